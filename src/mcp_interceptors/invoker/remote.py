"""Single calls to a remote interceptor host over an `mcp.Client`: `interceptors/list`, `interceptor/invoke`, and
`RemoteSource`, which a `Chain` routes invocations through (the executor's `Source` protocol).

A host's answer is read as the spec allows (unknown fields ignored, a missing `type` inferred); one that is
no result at all, or a result not signed by a configured key, is an invocation failure, never a verdict.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio
from mcp import Client, MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT
from pydantic import TypeAdapter

from mcp_interceptors.executor import Call
from mcp_interceptors.protocol.descriptors import (
    DescriptorWarning,
    InterceptorDescriptor,
    InterceptorType,
    parse_list_result,
)
from mcp_interceptors.protocol.errors import (
    TIMEOUT_G4,
    DiscoveryError,
    HostConnectionError,
    InterceptorsError,
    InterceptorTimeoutError,
    MalformedResultError,
    pattern_event_error,
)
from mcp_interceptors.protocol.events import Phase, is_pattern
from mcp_interceptors.protocol.invoke import (
    InvocationContext,
    InvokeRequest,
    ListRequest,
    RawParams,
    check_payload,
    check_timeout_ms,
)
from mcp_interceptors.protocol.results import InterceptorResult, parse_result
from mcp_interceptors.signatures import VerifyKeyLike, check_result_signature, verify_key_from

logger = logging.getLogger(__name__)

# `send_request` accepts a TypeAdapter at run time; typed as Any because its type var is bound to models.
_RAW_RESULT: Any = TypeAdapter(dict[str, Any])

#: How long an `interceptor/invoke` may take when neither the interceptor (override `timeoutMs`) nor
#: the chain has a deadline; the spec sets none, but a host that never answers, or answers with a
#: result that is not a JSON object (mcp's client drops such a response), must not hang the chain.
DEFAULT_INVOKE_TIMEOUT_MS = 30_000.0
#: How long `interceptors/list` may take before discovery fails (R66 then fails pinned interceptors closed).
DEFAULT_DISCOVERY_TIMEOUT_MS = 10_000.0
#: With `timeoutMs` sent, how much longer the invoker waits locally for the host's own timeout error.
HOST_TIMEOUT_GRACE_MS = 1_000.0


@dataclass(frozen=True, slots=True)
class Discovery:
    descriptors: list[InterceptorDescriptor]
    warnings: list[DescriptorWarning]


async def discover(
    client: Client, event: str | None = None, *, timeout_ms: float | None = DEFAULT_DISCOVERY_TIMEOUT_MS
) -> Discovery:
    """`interceptors/list` with the skipped entries reported instead of logged.

    No answer within `timeout_ms` (None: wait forever) raises `DiscoveryError`; host errors raise `MCPError`.
    A wildcard or pattern `event` raises `ChainParamsError` (-32602) unsent: an invoker never sends one (§2.1;
    a host answers `*` with only the `*`-hooked interceptors), and no `event` lists them all.
    """
    if event is not None and is_pattern(event):
        raise pattern_event_error(event)
    params = RawParams.model_validate({"event": event} if event is not None else {})
    raw = None
    with anyio.move_on_after(timeout_ms / 1000 if timeout_ms is not None else None) as scope:
        raw = await client.session.send_request(ListRequest(params=params), _RAW_RESULT)
    if scope.cancelled_caught or raw is None:
        raise DiscoveryError(
            f"interceptors/list got no usable answer within {timeout_ms:g} ms "
            "(the mcp client drops a response whose result is not a JSON object)",
            data={"reason": "timeout", "timeoutMs": timeout_ms},
        )
    descriptors, warnings = parse_list_result(raw)
    return Discovery(descriptors, warnings)


async def list_interceptors(
    client: Client, event: str | None = None, *, timeout_ms: float | None = DEFAULT_DISCOVERY_TIMEOUT_MS
) -> list[InterceptorDescriptor]:
    """The host's descriptors (optionally filtered by event); malformed entries are skipped with a warning."""
    found = await discover(client, event, timeout_ms=timeout_ms)
    for warning in found.warnings:
        logger.warning("skipped interceptor descriptor #%d (%s): %s", warning.index, warning.name, warning.reason)
    return found.descriptors


async def invoke_interceptor(
    client: Client,
    name: str,
    event: str,
    phase: Phase,
    payload: Any,
    *,
    config: Mapping[str, Any] | None = None,
    timeout_ms: float | None = None,
    context: InvocationContext | Mapping[str, Any] | None = None,
    type: InterceptorType | None = None,
    verify_key: VerifyKeyLike | None = None,
    default_timeout_ms: float = DEFAULT_INVOKE_TIMEOUT_MS,
) -> InterceptorResult:
    """Send one `interceptor/invoke`. Host errors raise `MCPError`; a malformed result raises
    `MalformedResultError`. `type` is the declared type (inferred from the result when omitted).
    With `verify_key` (the host's public key), a validation result without a valid signature by it
    raises `SignatureError`.

    `timeout_ms` is sent for the host to enforce, and waited for locally with a short grace for the
    host's own timeout error; without it the call waits `default_timeout_ms`. Either way, no answer
    in time raises `InterceptorTimeoutError` (-32000).
    """
    body = invoke_body(name, event, phase, payload, config=config, timeout_ms=timeout_ms, context=context)
    limit_ms = timeout_ms + HOST_TIMEOUT_GRACE_MS if timeout_ms is not None else default_timeout_ms
    raw = None
    with anyio.move_on_after(limit_ms / 1000) as scope:
        raw = await client.session.send_request(InvokeRequest(params=RawParams.model_validate(body)), _RAW_RESULT)
    if scope.cancelled_caught or raw is None:
        raise InterceptorTimeoutError(name, limit_ms, phase)
    return read_invoke_result(raw, name, phase, type, verify_key=verify_key)


def invoke_body(
    name: str,
    event: str,
    phase: Phase,
    payload: Any,
    *,
    config: Mapping[str, Any] | None = None,
    timeout_ms: float | None = None,
    context: InvocationContext | Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The `interceptor/invoke` params object (camelCase; `context` always carries a timestamp).

    A payload or `config` nested more than 200 levels deep raises `InvalidParamsError` (-32602, naming
    the field), so it is never sent: a host refuses it anyway, and over stdio mcp cannot even parse
    such a line, so the host would never answer and the invoke would wait out its timeout. So does a
    `timeout_ms` that is not a finite number > 0 (JSON cannot carry NaN or Infinity).
    """
    check_payload(payload, interceptor=name, event=event, phase=phase)
    check_payload(config, field="config", interceptor=name, event=event, phase=phase)
    check_timeout_ms(timeout_ms, interceptor=name, event=event, phase=phase)
    body: dict[str, Any] = {"name": name, "event": event, "phase": phase, "payload": payload}
    if config is not None:
        body["config"] = dict(config)
    if timeout_ms is not None:
        body["timeoutMs"] = timeout_ms
    if context is not None:
        ctx = context if isinstance(context, InvocationContext) else InvocationContext.model_validate(context)
        body["context"] = ctx.stamped().to_wire()
    return body


def read_invoke_result(
    raw: Any, name: str, phase: Phase, declared: str | None = None, *, verify_key: VerifyKeyLike | None = None
) -> InterceptorResult:
    """Parse an `interceptor/invoke` result; `declared` is the descriptor's type (else inferred).

    With `verify_key`, a validation result's signature is checked on the raw body, before parsing
    drops anything (`SignatureError` if it is missing or invalid).
    """
    kind = declared or (_infer_type(raw) if isinstance(raw, Mapping) else None)
    if kind is None:
        raise MalformedResultError(name, "result has no recognisable type")
    if verify_key is not None and kind == "validation" and isinstance(raw, Mapping):
        check_result_signature(raw, verify_key_from(verify_key), name)
    return parse_result(raw, interceptor=name, type=kind, phase=phase)


def _infer_type(raw: Mapping[str, Any]) -> str | None:
    if isinstance(raw.get("type"), str):
        return str(raw["type"])
    for key, kind in (("valid", "validation"), ("modified", "mutation"), ("recorded", "sink")):
        if key in raw:
            return kind
    return None


class RemoteSource:
    """A `Source` that routes every invoke to the connection that advertised the descriptor (R65).

    With `verify_key` (the host's Ed25519 public key), every validation result must carry the host's
    signature; a missing or invalid one is an invocation failure, routed by mode/failOpen. An invoke
    the executor sends no `timeoutMs` for waits at most `default_timeout_ms`; a closed connection is
    a `HostConnectionError`, not a timeout (see `invocation_error`).
    """

    def __init__(
        self,
        client: Client,
        *,
        verify_key: VerifyKeyLike | None = None,
        default_timeout_ms: float = DEFAULT_INVOKE_TIMEOUT_MS,
    ) -> None:
        self.client = client
        self.verify_key = verify_key_from(verify_key) if verify_key is not None else None
        self.default_timeout_ms = default_timeout_ms

    async def invoke(self, call: Call) -> InterceptorResult:
        try:
            return await invoke_interceptor(
                self.client,
                call.name,
                call.event,
                call.phase,
                call.payload,
                config=call.config,
                timeout_ms=call.timeout_ms,
                context=call.context,
                type=call.type,  # type: ignore[arg-type]
                verify_key=self.verify_key,
                default_timeout_ms=self.default_timeout_ms,
            )
        except MCPError as exc:
            raise invocation_error(exc, call.name) from None


def invocation_error(exc: MCPError, name: str = "") -> InterceptorsError:
    """An `MCPError` from an invoke as the invocation failure the executor routes.

    mcp raises its own errors with no `data`: a closed connection as -32000 (`CONNECTION_CLOSED`,
    the G4 timeout code too) and its request timeout as -32001 (`REQUEST_TIMEOUT`). A host's timeout
    error carries `data` (§3), so a data-less -32000 is the connection closing (a failure, never a
    timeout) and a data-less -32001 a local timeout. Anything else is the host's own error, kept
    with its code and data.
    """
    if exc.data is None and exc.code == CONNECTION_CLOSED:
        return HostConnectionError(name, exc.message)
    if exc.data is None and exc.code == REQUEST_TIMEOUT:
        return InterceptorsError(exc.message, data={"interceptor": name, "reason": "timeout"}, code=TIMEOUT_G4)
    data = exc.data if isinstance(exc.data, Mapping) else {}
    return InterceptorsError(exc.message, data=data, code=exc.code)


class UnavailableSource:
    """Stands in for a host whose discovery failed: every invoke is an invocation failure (R66)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    async def invoke(self, call: Call) -> InterceptorResult:
        raise DiscoveryError(f"interceptor host unavailable: {self.reason}", data={"interceptor": call.name})
