"""Error codes, `error.data` shapes and our exception family (spec §3); each exception carries its code."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
#: A request the client cancelled (what mcp answers it with).
REQUEST_CANCELLED = -32800
#: G4's timeout code; G5 uses INTERNAL_ERROR with `data.reason == "timeout"`. We emit G4 by default.
TIMEOUT_G4 = -32000

TimeoutCodeStyle = Literal["g4", "g5"]


class InterceptorsError(Exception):
    """Root of our exceptions: `code` and `data` are what goes on the wire."""

    code: int = INTERNAL_ERROR

    def __init__(self, message: str, *, data: Mapping[str, Any] | None = None, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data: dict[str, Any] = dict(data or {})
        if code is not None:
            self.code = code


class InvalidParamsError(InterceptorsError):
    """Bad invoke params: unknown name, hook mismatch, config rejected by `configSchema` (-32602)."""

    code = INVALID_PARAMS


class InterceptorNotFoundError(InvalidParamsError):
    def __init__(self, name: str) -> None:
        super().__init__(f"Unknown interceptor: {name!r}", data={"name": name, "interceptor": name})


class HookMismatchError(InvalidParamsError):
    def __init__(self, name: str, event: str, phase: str, advertised: Sequence[Mapping[str, Any]]) -> None:
        super().__init__(
            f"Interceptor {name!r} is not hooked to ({event}, {phase})",
            data={
                "name": name,
                "interceptor": name,
                "event": event,
                "phase": phase,
                "advertisedHooks": list(advertised),
            },
        )


class InterceptorExecutionError(InterceptorsError):
    """The handler raised, or returned something that is not a result of its declared type (-32603)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__("Interceptor execution failed", data={"interceptor": name, "reason": reason})


class InterceptorTimeoutError(InterceptorsError):
    """The host-enforced `timeoutMs` passed (R26): -32000 (G4) or -32603 with `reason: timeout` (G5)."""

    def __init__(self, name: str, timeout_ms: float, phase: str, *, style: TimeoutCodeStyle = "g4") -> None:
        super().__init__(
            "Interceptor execution timeout",
            data={"interceptor": name, "reason": "timeout", "timeoutMs": timeout_ms, "phase": phase},
            code=TIMEOUT_G4 if style == "g4" else INTERNAL_ERROR,
        )


class HostConnectionError(InterceptorsError):
    """The connection to an interceptor host closed (or was never open) before it answered (-32603).

    An invocation failure routed by mode/failOpen, never a timeout: mcp raises its local
    "connection closed" with -32000, the code a G4 host uses for its timeout (§3).
    """

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(
            f"interceptor host connection closed: {detail}",
            data={"interceptor": name, "reason": "interceptor host connection closed"},
        )


class MalformedResultError(InterceptorsError):
    """A result that breaks its contract (§5.9): treated by the invoker as an invocation failure."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"Malformed result from {name!r}: {reason}", data={"interceptor": name, "reason": reason})


class WideningOverrideError(InterceptorsError, ValueError):
    """A hook override that adds an event or phase the interceptor did not advertise (R62)."""

    code = INVALID_PARAMS


#: `data.reason` when a guard's state store cannot be reached: the invocation fails, closed unless `failOpen`.
STATE_UNAVAILABLE = "state_unavailable"


class StateUnavailableError(InterceptorsError):
    """A guard's state store could not be reached, or did not answer in time (-32603)."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"guard state unavailable: {detail}", data={"reason": STATE_UNAVAILABLE, "detail": detail})


class DiscoveryError(InterceptorsError):
    """`interceptors/list` failed on a host (transport error, -32601, timeout)."""


class ChainParamsError(InvalidParamsError, ValueError):
    """A chain run asked for something the chain cannot do as asked (-32602): it fails closed.

    `data.field` names the parameter (`event`, `interceptors` or `config`); a chain never quietly runs a
    smaller plan than the caller named.
    """


def unknown_interceptors_error(unknown: Sequence[str], field: str = "interceptors") -> ChainParamsError:
    """`interceptors` (or the keys of a chain's `config`) names interceptors the chain does not have (a typo
    must not run an empty plan, or run the plan without the caller's config)."""
    listed = ", ".join(repr(name) for name in unknown)
    return ChainParamsError(
        f"{field} names {listed}, which this chain does not have; check the spelling against its interceptors",
        data={"field": field, "unknown": list(unknown)},
    )


def pattern_event_error(event: str) -> ChainParamsError:
    """A chain runs for one concrete lifecycle event; `*` or a glob is a hook pattern, not an event."""
    return ChainParamsError(
        f"event must be one concrete event name such as 'tools/call', not the pattern {event!r}",
        data={"field": "event", "event": event},
    )


def is_timeout_error(code: int, data: Any) -> bool:
    """Classify an error response *a host sent* as a timeout: G4's code, or G5's code with `reason: timeout`.

    Errors raised locally by the mcp client (connection closed is also -32000) never get here
    as such: `invoker.invocation_error` turns them into `HostConnectionError` or a local timeout first.
    """
    if code == TIMEOUT_G4:
        return True
    return code == INTERNAL_ERROR and isinstance(data, Mapping) and data.get("reason") == "timeout"
