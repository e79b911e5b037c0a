"""The invoker side: list and invoke over an `mcp.Client`, and `Chain`, which plans and runs chains.

`Chain` collects entries from remote hosts (`add_server`) and in-process sources (`add_local`),
caches plans (pure `planning`), and runs them with the `executor`. `chain_error` turns a blocked
result into the requester-facing JSON-RPC error (spec §3, R70), and `invalid_payload_error` a chain whose
mutators left no payload of its event into one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import anyio
from mcp import Client, MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT
from pydantic import TypeAdapter

from mcp_interceptors.executor import Call, ChainResult, Source, execute_plan
from mcp_interceptors.planning import (
    Entry,
    Overrides,
    Plan,
    SeverityRule,
    check_overrides,
    direction_for,
    plan_for,
)
from mcp_interceptors.protocol.descriptors import (
    DescriptorWarning,
    HookEntry,
    InterceptorDescriptor,
    InterceptorType,
    parse_list_result,
)
from mcp_interceptors.protocol.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    TIMEOUT_G4,
    ChainParamsError,
    DiscoveryError,
    HostConnectionError,
    InterceptorsError,
    InterceptorTimeoutError,
    MalformedResultError,
    WideningOverrideError,
    pattern_event_error,
    unknown_interceptors_error,
)
from mcp_interceptors.protocol.events import MAX_CACHED_EVENT_LENGTH, Direction, Phase, Role, is_pattern
from mcp_interceptors.protocol.invoke import (
    InvocationContext,
    InvokeRequest,
    ListRequest,
    RawParams,
    check_payload,
    check_timeout_ms,
    is_timeout_ms,
)
from mcp_interceptors.protocol.results import InterceptorResult, MutationResult, parse_result
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
#: Plans a `Chain` keeps; past this the cache starts over (a plan is cheap to derive again).
_PLAN_CACHE_SIZE = 1024


# --------------------------------------------------------------------------- single calls


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


# --------------------------------------------------------------------------- the chain


class LocalHost(Protocol):
    """What `Chain.add_local` needs: descriptors to plan with, and in-process invocation."""

    name: str

    @property
    def descriptors(self) -> list[InterceptorDescriptor]: ...

    async def invoke(self, call: Call) -> InterceptorResult: ...


@dataclass(frozen=True, slots=True)
class RequiredInterceptor:
    """An interceptor local policy requires: if its host cannot provide it, the events it guards fail."""

    name: str
    type: Literal["validation", "mutation"]
    hooks: tuple[HookEntry, ...]
    mode: Literal["active", "audit"] = "active"
    fail_open: bool = False

    def placeholder(self) -> InterceptorDescriptor:
        return InterceptorDescriptor(
            name=self.name, type=self.type, hooks=self.hooks, mode=self.mode, fail_open=self.fail_open
        )


OverridesArg = Mapping[str, Overrides | Mapping[str, Any]] | None


def _unmet_pin(pin: RequiredInterceptor, descriptor: InterceptorDescriptor) -> str | None:
    """Why a listed descriptor does not provide what `pin` requires (another type, hooks that no longer
    cover the pinned events and phases), or None: a host must not unpin an interceptor by renaming its hooks."""
    if descriptor.type != pin.type:
        return f"advertised as a {descriptor.type} interceptor, pinned as a {pin.type} one"
    try:
        check_overrides(descriptor, Overrides(hooks=pin.hooks))
    except WideningOverrideError:
        advertised = [entry.to_wire() for entry in descriptor.hooks]
        return f"its advertised hooks {advertised} do not cover the pinned {[e.to_wire() for e in pin.hooks]}"
    return None


def _discovery_failure(host_name: str, exc: Exception) -> dict[str, Any]:
    """`DiscoveryError.data` for a failed `interceptors/list`: the host, and the error it gave (its code)."""
    if isinstance(exc, InterceptorsError):
        return {"reason": str(exc), **exc.data, "host": host_name}
    if isinstance(exc, MCPError):
        return {"host": host_name, "reason": exc.error.message, "code": exc.error.code}
    return {"host": host_name, "reason": f"{type(exc).__name__}: {exc}"}


class Chain:
    """Plans and runs interceptor chains for one invoker.

    `role` ("client" or "server") lets `execute` derive the direction (§5.1); otherwise pass
    `direction=` on every call. `protocol_version` is checked against descriptors' `compat`.
    """

    def __init__(
        self,
        role: Role | None = None,
        *,
        protocol_version: str | None = None,
        enforce_compat: bool = True,
        severity_rule: SeverityRule = "g5",
        deadline_always_blocks: bool = False,
        sinks: bool = False,
        timeout_ms: float | None = None,
    ) -> None:
        if role not in (None, "client", "server"):  # a typo would silently flip every direction
            raise ValueError(f"role must be 'client' or 'server', got {role!r}")
        self.role: Role | None = role
        self.protocol_version = protocol_version
        self.enforce_compat = enforce_compat
        self.severity_rule: SeverityRule = severity_rule
        self.deadline_always_blocks = deadline_always_blocks
        self.sinks_enabled = sinks
        self.timeout_ms = timeout_ms
        self._entries: list[Entry] = []
        self._sources: dict[str, Source] = {}
        self._order = 0
        self._plans: dict[tuple[Any, ...], Plan] = {}
        self._known: frozenset[str] | None = None
        #: Each source's host order (R36), kept when `replace_discovered` swaps its interceptors.
        self._orders: dict[str, int] = {}

    # ---- building

    @property
    def entries(self) -> list[Entry]:
        return list(self._entries)

    @property
    def sources(self) -> Mapping[str, Source]:
        return self._sources

    def add_source(
        self,
        source: Source,
        descriptors: Iterable[InterceptorDescriptor],
        *,
        name: str,
        overrides: OverridesArg = None,
        order: int | None = None,
    ) -> list[Entry]:
        """Register a source with the descriptors it serves; widening overrides raise here (R62)."""
        if name in self._sources:
            raise ValueError(f"a host named {name!r} is already in this chain")
        descriptors = list(descriptors)
        resolved = _resolve_overrides(overrides, {d.name for d in descriptors}, name)
        if order is None:
            order = self._next_order()
        added = []
        for descriptor in descriptors:
            override = resolved.get(descriptor.name)
            check_overrides(descriptor, override)
            added.append(Entry(descriptor=descriptor, source=name, host_order=order, overrides=override))
        # Copied, never changed in place: a chain already running holds the sources and plan it started with.
        self._sources = {**self._sources, name: source}
        self._entries = [*self._entries, *added]
        self._orders.setdefault(name, order)
        self._plans.clear()
        self._known = None
        return added

    def add_local(self, host: LocalHost, *, name: str | None = None, overrides: OverridesArg = None) -> list[Entry]:
        """Run a host's interceptors in-process, with the same semantics as over a transport."""
        return self.add_source(host, host.descriptors, name=name or host.name, overrides=overrides)

    async def add_server(
        self,
        client: Client,
        *,
        name: str | None = None,
        overrides: OverridesArg = None,
        required: Iterable[RequiredInterceptor] = (),
        strict_overrides: bool = True,
        verify_key: VerifyKeyLike | None = None,
        discovery_timeout_ms: float | None = DEFAULT_DISCOVERY_TIMEOUT_MS,
        default_timeout_ms: float = DEFAULT_INVOKE_TIMEOUT_MS,
    ) -> list[Entry]:
        """Discover a remote host's interceptors with `interceptors/list` and route invokes to it.

        If discovery fails (an error, or no answer within `discovery_timeout_ms`), `DiscoveryError`
        is raised unless `required` interceptors are pinned:
        those are then planned as always-failing, so the events they guard fail closed (R66). A
        pinned interceptor missing from a successful listing is planned the same way. With
        `strict_overrides=False`, overrides naming interceptors this host does not advertise are
        ignored (a caller spreading one override map over several hosts checks them itself).
        With `verify_key`, the host's validation results must be signed by that key (see `RemoteSource`).
        `default_timeout_ms` bounds an invoke to this host when neither an override `timeoutMs` nor
        the chain's deadline does (`DEFAULT_INVOKE_TIMEOUT_MS`).
        """
        return await self.add_discovered(
            RemoteSource(client, verify_key=verify_key, default_timeout_ms=default_timeout_ms),
            lambda: list_interceptors(client, timeout_ms=discovery_timeout_ms),
            name=name,
            overrides=overrides,
            required=required,
            strict_overrides=strict_overrides,
        )

    async def add_discovered(
        self,
        source: Source,
        discover: Callable[[], Awaitable[list[InterceptorDescriptor]]],
        *,
        name: str | None = None,
        overrides: OverridesArg = None,
        required: Iterable[RequiredInterceptor] = (),
        strict_overrides: bool = True,
    ) -> list[Entry]:
        """`add_server` for any source with its own discovery call (e.g. a supervised connection).

        Signature checks belong to the source: it passes its host's key to `read_invoke_result`.
        """
        order = self._next_order()  # host order is fixed at call time, never by discovery timing (R36)
        host_name = name or f"server-{order}"
        pinned = {r.name: r for r in required}
        try:
            found = await discover()
        except (MCPError, OSError, InterceptorsError) as exc:
            if not pinned:
                raise DiscoveryError(
                    f"interceptors/list failed on {host_name!r}: {exc}", data=_discovery_failure(host_name, exc)
                ) from exc
            logger.error("discovery failed on %r, pinned interceptors will fail closed: %s", host_name, exc)
            found = []
            source = UnavailableSource(str(exc))
        return self._place(source, found, host_name, order, overrides, pinned, strict_overrides)

    def replace_discovered(
        self,
        source: Source,
        found: Iterable[InterceptorDescriptor],
        *,
        name: str,
        overrides: OverridesArg = None,
        required: Iterable[RequiredInterceptor] = (),
        strict_overrides: bool = True,
    ) -> list[Entry]:
        """Swap host `name`'s interceptors for a new listing `found` (the host restarted as a new version, or
        announced a change), as `add_discovered` places them: same host order, overrides applied to the new
        list, a pinned interceptor it no longer lists (or lists differently) planned as failing closed.

        Atomic between calls: a chain already running keeps the plan and sources it started with. If the new
        listing cannot be placed (an override widens what it now advertises, R62), the error is raised and the
        host's previous interceptors stay.
        """
        names = {name, f"{name}#missing"}
        order = self._orders.get(name)
        if order is None:
            order = self._next_order()
        entries, sources, orders = self._entries, self._sources, self._orders
        self._entries = [entry for entry in entries if entry.source not in names]
        self._sources = {key: value for key, value in sources.items() if key not in names}
        self._orders = {key: value for key, value in orders.items() if key not in names}
        try:
            pinned = {r.name: r for r in required}
            return self._place(source, list(found), name, order, overrides, pinned, strict_overrides)
        except BaseException:
            self._entries, self._sources, self._orders = entries, sources, orders
            raise
        finally:
            self._plans.clear()
            self._known = None

    def _place(
        self,
        source: Source,
        found: list[InterceptorDescriptor],
        host_name: str,
        order: int,
        overrides: OverridesArg,
        pinned: Mapping[str, RequiredInterceptor],
        strict_overrides: bool,
    ) -> list[Entry]:
        """Add a host's listing `found`, with its pins' stand-ins for what it does not provide as pinned."""
        unmet = {d.name: problem for d in found if d.name in pinned and (problem := _unmet_pin(pinned[d.name], d))}
        for pin_name, problem in unmet.items():
            logger.error("pinned interceptor %r on %r will fail closed: %s", pin_name, host_name, problem)
        found = [d for d in found if d.name not in unmet]  # a pin's contract, not the host's new one, decides
        listed = {d.name for d in found}
        missing = [r for r in pinned.values() if r.name not in listed]
        given = dict(overrides or {})
        if not strict_overrides:
            given = {key: value for key, value in given.items() if key in listed or key in pinned}
        added: list[Entry] = []
        if found or not missing:
            remote = {key: value for key, value in given.items() if key in listed or key not in pinned}
            added = self.add_source(source, found, name=host_name, overrides=remote, order=order)
        if missing:
            reason = f"pinned interceptor(s) {sorted(r.name for r in missing)} not advertised by {host_name!r}"
            if unmet:
                reason += " as pinned"
            logger.error(reason)
            stand_in = source if isinstance(source, UnavailableSource) else UnavailableSource(reason)
            added += self.add_source(
                stand_in,
                [r.placeholder() for r in missing],
                name=f"{host_name}#missing" if added or found else host_name,
                overrides={r.name: given[r.name] for r in missing if r.name in given},
                order=order,
            )
        return added

    def _names(self) -> frozenset[str]:
        """The names of every interceptor this chain has (cached until a source is added)."""
        if self._known is None:
            self._known = frozenset(entry.name for entry in self._entries)
        return self._known

    def _next_order(self) -> int:
        self._order += 1
        return self._order

    # ---- running

    def plan(
        self,
        event: str,
        phase: Phase,
        *,
        direction: Direction | None = None,
        interceptors: Iterable[str] | None = None,
        protocol_version: str | None = None,
    ) -> Plan:
        """The (cached) plan for one interception point."""
        names = tuple(sorted(interceptors)) if interceptors is not None else None
        version = protocol_version or self.protocol_version
        # The direction follows from the role; the switches are public attributes, so they are part of the key.
        key = (event, phase, direction, self.role, names, version, self.enforce_compat, self.sinks_enabled)
        plan = self._plans.get(key)
        if plan is None:
            resolved_direction = self._direction(event, phase, direction)
            plan = plan_for(
                self._entries,
                event,
                phase,
                resolved_direction,
                protocol_version=version,
                names=names,
                enforce_compat=self.enforce_compat,
                sinks_enabled=self.sinks_enabled,
            )
            if len(event) <= MAX_CACHED_EVENT_LENGTH:  # events may come from untrusted traffic: stay bounded
                if len(self._plans) >= _PLAN_CACHE_SIZE:
                    self._plans.clear()
                self._plans[key] = plan
        return plan

    async def execute(
        self,
        event: str,
        phase: Phase,
        payload: Any,
        *,
        direction: Direction | None = None,
        config: Mapping[str, Mapping[str, Any]] | None = None,
        context: InvocationContext | Mapping[str, Any] | None = None,
        timeout_ms: float | None = None,
        interceptors: Iterable[str] | None = None,
        protocol_version: str | None = None,
    ) -> ChainResult:
        """Run the chain for `(event, phase)` on `payload`. `timeout_ms` is the whole-chain deadline.

        `event` is one concrete event; `interceptors` restricts the plan to those names; `config` maps
        names to their config. A pattern event, a phase or direction the spec does not define, a deadline
        that is not a finite number > 0, a name this chain does not have in `interceptors` or `config`, or a
        `config` value that is not an object raises `ChainParamsError` (-32602): it never runs less, nor
        without the config.
        """
        plan = self.plan(
            event, phase, direction=direction, interceptors=interceptors, protocol_version=protocol_version
        )
        return await self.run_plan(plan, payload, config, context, timeout_ms)

    async def run_plan(
        self,
        plan: Plan,
        payload: Any,
        config: Mapping[str, Mapping[str, Any]] | None = None,
        context: InvocationContext | Mapping[str, Any] | None = None,
        timeout_ms: float | None = None,
    ) -> ChainResult:
        """`execute` of a plan this chain made (`plan`), for a caller that already has it: a gateway asks
        for the plan to learn whether a leg is governed at all. Its parameters are checked as `execute`'s."""
        if config is not None and not isinstance(config, Mapping):
            reason = f"config must map interceptor names to config objects, got {type(config).__name__}"
            raise ChainParamsError(reason, data={"field": "config", "reason": reason})
        if config and (unknown := [name for name in config if name not in self._names()]):
            raise unknown_interceptors_error(sorted(unknown), field="config")  # a typo must not drop the config
        if config and (bad := sorted(name for name, value in config.items() if not isinstance(value, Mapping))):
            # it reached the host as `dict(value)`'s crash: -32603 "dictionary update sequence element ..."
            reason = f"config for {bad[0]!r} must be an object, got {type(config[bad[0]]).__name__}"
            raise ChainParamsError(reason, data={"field": "config", "interceptor": bad[0], "reason": reason})
        deadline_ms = timeout_ms if timeout_ms is not None else self.timeout_ms
        if deadline_ms is not None and not is_timeout_ms(deadline_ms):
            reason = f"timeout_ms must be a finite number of milliseconds > 0, got {deadline_ms!r}"
            raise ChainParamsError(reason, data={"field": "timeoutMs", "reason": reason})
        ctx = None
        if context is not None:
            # The exact type first: isinstance on a pydantic model class goes through its metaclass's hook.
            ctx = (
                context
                if type(context) is InvocationContext or isinstance(context, InvocationContext)
                else InvocationContext.model_validate(context)
            )
            ctx = ctx.stamped()
        # Positional: keyword arguments cost the call over twice as much (once per message).
        return await execute_plan(
            plan, payload, self._sources, config, ctx, deadline_ms, self.severity_rule, self.deadline_always_blocks
        )

    def _direction(self, event: str, phase: Phase, direction: Direction | None) -> Direction:
        if direction is not None:
            return direction
        if self.role is None:
            raise ValueError(
                "cannot tell the direction: pass direction='sending' or 'receiving', "
                "or create the chain with Chain(role='client') or Chain(role='server')"
            )
        return direction_for(self.role, event, phase)


def _resolve_overrides(overrides: OverridesArg, known: set[str], host: str) -> dict[str, Overrides]:
    resolved: dict[str, Overrides] = {}
    for interceptor, value in (overrides or {}).items():
        if interceptor not in known:
            raise ValueError(f"override names {interceptor!r}, which host {host!r} does not advertise")
        resolved[interceptor] = value if isinstance(value, Overrides) else Overrides.from_mapping(value)
    return resolved


# --------------------------------------------------------------------------- requester-facing errors


def chain_error(result: ChainResult, *, include_details: bool = False) -> MCPError:
    """The JSON-RPC error for a blocked chain (R70).

    Validation blocks get `-32602`, mutation and timeout blocks `-32603`. `data` names the
    interceptor, a generic reason, the event and phase; interceptor messages, suggestions and
    payloads are included only with `include_details=True`.
    """
    if result.allowed:
        raise ValueError("chain_error() needs a blocked result; this one succeeded")
    aborted = result.aborted_at
    interceptor = aborted.interceptor if aborted is not None else ""
    if result.status == "validation_failed":
        code, message = INVALID_PARAMS, "Blocked by interceptor validation"
        failed = aborted is not None and aborted.reason.startswith("validation failed")
        reason = "validation failed" if failed else "interceptor failed"
    elif result.status == "timeout":
        code, message, reason = INTERNAL_ERROR, "Blocked: interceptor chain timed out", "timeout"
    else:
        code, message, reason = INTERNAL_ERROR, "Blocked: interceptor mutation failed", "interceptor failed"
    data: dict[str, Any] = {
        "interceptor": interceptor,
        "reason": reason,
        "event": result.event,
        "phase": result.phase,
        "status": result.status,
    }
    retry_after = _retry_after(result, interceptor)
    if retry_after is not None:  # a rate limit's hint is no detail to hide: the client needs it to back off
        data["retryAfterSeconds"] = retry_after
    if include_details:
        data["abortedAt"] = aborted.to_wire() if aborted is not None else None
        data["validationErrors"] = [
            {"interceptor": r.interceptor, "severity": m.severity, "message": m.message}
            for r in result.results
            if r.type == "validation" and r.mode != "audit" and not getattr(r, "valid", True)
            for m in (getattr(r, "messages", None) or ())
        ]
    return MCPError(code, message, data)


def _retry_after(result: ChainResult, interceptor: str) -> float | None:
    """The `info.retryAfterSeconds` of the blocking validator's verdict (rate-limit gives one), if any."""
    for item in result.results:
        if item.interceptor == interceptor and item.type == "validation" and not getattr(item, "valid", True):
            value = (item.info or {}).get("retryAfterSeconds")
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
                return float(value)
    return None


def payload_problem(event: str, phase: Phase, payload: Any) -> str | None:
    """Why `payload` is no payload of `event` at `phase` (spec §1.2: `{method, params}` for a request, the
    result object for a response), or None."""
    if not isinstance(payload, Mapping):
        return f"the payload is {type(payload).__name__ if payload is not None else 'null'}, not an object"
    if phase == "request":
        if payload.get("method") != event:
            return f"the payload's method is {payload.get('method')!r}, not {event!r}"
        if payload.get("params") is not None and not isinstance(payload["params"], Mapping):
            return "the payload's params is not an object"
    return None


def invalid_payload_error(result: ChainResult, problem: str) -> MCPError:
    """The error for a chain whose mutators left no payload of its event: it names the last active mutator
    that changed the payload (the one whose output it is), never the client's request."""
    changed = [
        r.interceptor for r in result.results if isinstance(r, MutationResult) and r.modified and r.mode != "audit"
    ]
    data = {
        "interceptor": changed[-1] if changed else "",
        "reason": "invalid payload",
        "event": result.event,
        "phase": result.phase,
        "status": "mutation_failed",
        "detail": problem,
    }
    return MCPError(INTERNAL_ERROR, "Blocked: interceptor mutation produced an invalid payload", data)


__all__: Sequence[str] = [
    "Chain",
    "Discovery",
    "LocalHost",
    "RemoteSource",
    "RequiredInterceptor",
    "chain_error",
    "discover",
    "invalid_payload_error",
    "invoke_interceptor",
    "list_interceptors",
    "payload_problem",
]
