"""`Chain`: the interceptors of one invoker, from in-process hosts (`add_local`) and remote ones (`add_server`),
planned (pure `planning`, plans cached) and run by the `executor`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Literal

from mcp import Client, MCPError

from mcp_interceptors.executor import ChainResult, Source, execute_plan
from mcp_interceptors.invoker.pins import (
    LocalHost,
    OverridesArg,
    RequiredInterceptor,
    discovery_failure,
    resolve_overrides,
    unmet_pin,
)
from mcp_interceptors.invoker.remote import (
    DEFAULT_DISCOVERY_TIMEOUT_MS,
    DEFAULT_INVOKE_TIMEOUT_MS,
    RemoteSource,
    UnavailableSource,
    list_interceptors,
)
from mcp_interceptors.invoker.tracing_gate import GLOBAL_TRACING, global_spans, spans_of
from mcp_interceptors.planning import (
    Entry,
    Plan,
    SeverityRule,
    check_overrides,
    direction_for,
    plan_for,
)
from mcp_interceptors.protocol.descriptors import (
    InterceptorDescriptor,
)
from mcp_interceptors.protocol.errors import (
    ChainParamsError,
    DiscoveryError,
    InterceptorsError,
    unknown_interceptors_error,
)
from mcp_interceptors.protocol.events import MAX_CACHED_EVENT_LENGTH, Direction, Phase, Role
from mcp_interceptors.protocol.invoke import (
    InvocationContext,
    is_timeout_ms,
)
from mcp_interceptors.signatures import VerifyKeyLike

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from mcp_interceptors.invoker.tracing import ChainSpans

logger = logging.getLogger(__name__)

#: Plans a `Chain` keeps; past this the cache starts over (a plan is cheap to derive again).
_PLAN_CACHE_SIZE = 1024


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
        tracer_provider: TracerProvider | Literal[False] | None = None,
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
        #: How runs are traced (docs/telemetry.md): `GLOBAL_TRACING`, a provider's spans, or None (never).
        self.tracing: ChainSpans | Literal["global"] | None = GLOBAL_TRACING
        if tracer_provider is not None:
            self.tracing = None if tracer_provider is False else spans_of(tracer_provider)
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
        resolved = resolve_overrides(overrides, {d.name for d in descriptors}, name)
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
                    f"interceptors/list failed on {host_name!r}: {exc}", data=discovery_failure(host_name, exc)
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
        unmet = {d.name: problem for d in found if d.name in pinned and (problem := unmet_pin(pinned[d.name], d))}
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
        tracing = global_spans() if isinstance(self.tracing, str) else self.tracing
        # Positional: keyword arguments cost the call over twice as much, once per message (`bench/chain_overhead.py`).
        running = execute_plan(
            plan, payload, self._sources, config, ctx, deadline_ms, self.severity_rule, self.deadline_always_blocks
        )
        return await (running if tracing is None else tracing.traced(plan, running))

    def _direction(self, event: str, phase: Phase, direction: Direction | None) -> Direction:
        if direction is not None:
            return direction
        if self.role is None:
            raise ValueError(
                "cannot tell the direction: pass direction='sending' or 'receiving', "
                "or create the chain with Chain(role='client') or Chain(role='server')"
            )
        return direction_for(self.role, event, phase)
