"""`InterceptorHost`: author interceptors with decorators and serve them as an mcp `Extension`.

One core (`InterceptorHost.invoke`) follows the host processing order of spec §2.2; the wire
handlers for `interceptors/list` / `interceptor/invoke` and in-process chains (`Chain.add_local`)
both go through it, so local and remote semantics are identical.
"""

from __future__ import annotations

import copy
import dis
import functools
import inspect
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread
import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, best_match
from mcp import MCPError
from mcp.server import MCPServer, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.server.extension import Extension, MethodBinding
from pydantic import ValidationError

from mcp_interceptors.canonical import CanonicalizationError
from mcp_interceptors.executor import Call, Runner
from mcp_interceptors.protocol._base import filled_model
from mcp_interceptors.protocol.descriptors import (
    Compat,
    HookEntry,
    InterceptorDescriptor,
    InterceptorType,
    Mode,
    PriorityHint,
    supported_events,
    unknown_priority_keys,
)
from mcp_interceptors.protocol.errors import (
    HookMismatchError,
    InterceptorExecutionError,
    InterceptorNotFoundError,
    InterceptorsError,
    InterceptorTimeoutError,
    InvalidParamsError,
    TimeoutCodeStyle,
)
from mcp_interceptors.protocol.events import (
    EXTENSION_ID,
    MAX_CACHED_EVENT_LENGTH,
    PHASES,
    Phase,
    is_interceptable,
    is_pattern,
)
from mcp_interceptors.protocol.invoke import (
    INVOKE_METHOD,
    LIST_METHOD,
    InvocationContext,
    InvokeParams,
    RawParams,
    check_payload,
)
from mcp_interceptors.protocol.results import (
    KNOWN_SEVERITIES,
    RESULT_MODELS,
    InterceptorResult,
    MutationResult,
    SinkResult,
    ValidationMessage,
    ValidationResult,
    result_json_problem,
    same_json,
)
from mcp_interceptors.signatures import SigningKeyLike, public_key_text, sign_result, signing_key_from

logger = logging.getLogger(__name__)

PhaseSpec = Literal["request", "response", "both"]
#: Entries of `InterceptorHost`'s hook-coverage cache; a client choosing new event names only refills it.
_COVERED_CACHE_SIZE = 4096
#: Configs `InterceptorHost` remembers as valid; past this it starts over (a config sent by a client only refills it).
_CHECKED_CONFIGS_SIZE = 1024
#: Values a config may hold and still be remembered as valid (`_config_key`); larger ones are checked every time.
_CONFIG_KEY_VALUES = 10_000
Handler = Callable[["Invocation"], Any]
F = TypeVar("F", bound=Handler)


@dataclass(frozen=True, init=False)
class Invocation:
    """What a handler receives. `payload` is the handler's own copy; `config` is `{}` when omitted.

    Frozen; `__init__` fills `__dict__` in one step (one is built per invocation, see `Call`).
    """

    name: str
    event: str
    phase: Phase
    payload: Any
    config: Mapping[str, Any]
    context: InvocationContext | None

    def __init__(
        self,
        name: str,
        event: str,
        phase: Phase,
        payload: Any,
        config: Mapping[str, Any],
        context: InvocationContext | None,
    ) -> None:
        _set_invocation_fields(
            self,
            {"name": name, "event": event, "phase": phase, "payload": payload, "config": config, "context": context},
        )

    @property
    def session_id(self) -> str | None:
        return self.context.session_id if self.context is not None else None


#: Fills an `Invocation`'s `__dict__` (the slot's descriptor: faster than `object.__setattr__` finding it).
_set_invocation_fields = Invocation.__dict__["__dict__"].__set__
_new_object = object.__new__


@dataclass(frozen=True, slots=True)
class _Registered:
    descriptor: InterceptorDescriptor
    #: The descriptor's name and type, read on every invocation (a pydantic model's attributes cost more).
    name: str
    type: InterceptorType
    handler: Handler
    is_async: bool
    config_validator: Draft202012Validator | None
    #: An async handler that never suspends (see `_may_suspend`): a chain may run it without a cancel scope.
    still: bool
    #: By phase, its result's fields with our stamps that never change (`WireModel.template`).
    stamps: Mapping[str, dict[str, Any]]


def hooks_for(events: Iterable[str], phase: PhaseSpec) -> tuple[HookEntry, ...]:
    """Expand `phase="both"` sugar into one hook entry per phase (never sent as `both`, R14)."""
    event_list = tuple(events)
    phases: Sequence[Phase] = PHASES if phase == "both" else (phase,)
    return tuple(HookEntry(events=event_list, phase=p) for p in phases)


class InterceptorHost(Extension):
    """A set of interceptors, servable on any mcp server and runnable in-process.

    `copy_payloads=False` skips the per-invocation deep copy for handlers known not to mutate
    their input (the built-in guards). `timeout_code` picks G4's `-32000` or G5's `-32603`.
    `strict_list_filter` rejects wildcard `interceptors/list` filters with `-32602` (R10).
    `signing_key` (an Ed25519 key, its raw or base64url bytes, or PEM; see `mcp_interceptors.signatures`)
    signs every validation result this host sends over the wire; `public_key` is what invokers configure.
    """

    identifier = EXTENSION_ID

    def __init__(
        self,
        name: str = "interceptors",
        *,
        copy_payloads: bool = True,
        timeout_code: TimeoutCodeStyle = "g4",
        strict_list_filter: bool = False,
        signing_key: SigningKeyLike | None = None,
    ) -> None:
        self.name = name
        self.signing_key = signing_key_from(signing_key) if signing_key is not None else None
        self.copy_payloads = copy_payloads
        self.timeout_code: TimeoutCodeStyle = timeout_code
        self.strict_list_filter = strict_list_filter
        self._registry: dict[str, _Registered] = {}
        self._wire_list: list[dict[str, Any]] | None = None
        #: By `(name, event, phase)`: False when the interceptor does not hook it, else its hot-path runner
        #: (`_runner_for`), or True for a handler `_run` calls in a worker thread.
        self._covered: dict[tuple[str, str, str], Runner | bool] = {}
        #: `(interceptor, config key)` of configs its configSchema accepted (see `_config_key`).
        self._checked_configs: set[tuple[str, bytes]] = set()
        self._has_sync = False
        self._may_suspend = False

    # ------------------------------------------------------------------ authoring

    def add(self, descriptor: InterceptorDescriptor, handler: Handler) -> None:
        """Register a handler under a full descriptor. Names are unique per host (R11).

        A hook on an event no hook can match (`initialize`, `ping`, `server/discover`, notifications:
        spec §1.2) raises: the handler would never run while the host advertised the event.
        """
        if descriptor.name in self._registry:
            raise ValueError(f"interceptor {descriptor.name!r} is already registered on host {self.name!r}")
        never = sorted({event for hook in descriptor.hooks for event in hook.events if not is_interceptable(event)})
        if never:
            raise ValueError(
                f"interceptor {descriptor.name!r} hooks {', '.join(map(repr, never))}, which no interceptor ever"
                " runs on (initialize, ping, server/discover and notifications are not lifecycle events);"
                " drop them from its hooks"
            )
        _check_handler(descriptor.name, handler)
        schema = descriptor.config_schema
        if schema is not None:
            try:
                Draft202012Validator.check_schema(schema)
            except SchemaError as exc:  # a nested schema: the envelope was checked by the descriptor model
                at = " at " + "/".join(str(part) for part in exc.path) if exc.path else ""
                raise ValueError(f"interceptor {descriptor.name!r}: invalid configSchema{at}: {exc.message}") from None
        is_async = _is_async(handler)
        registered = _Registered(
            descriptor=descriptor,
            name=descriptor.name,
            type=descriptor.type,
            handler=handler,
            is_async=is_async,
            config_validator=Draft202012Validator(schema) if schema is not None else None,
            still=is_async and not _may_suspend(handler),
            stamps={
                phase: RESULT_MODELS[descriptor.type].template({"interceptor": descriptor.name, "phase": phase})
                for phase in PHASES
            },
        )
        self._registry[descriptor.name] = registered
        self._has_sync = self._has_sync or not is_async
        self._may_suspend = self._may_suspend or (is_async and not registered.still)
        self._wire_list = None

    def validator(
        self,
        name: str,
        *,
        events: Iterable[str] | None = None,
        phase: PhaseSpec = "request",
        hooks: Iterable[HookEntry | Mapping[str, Any]] | None = None,
        mode: Mode = "active",
        fail_open: bool = False,
        priority: PriorityHint | Mapping[str, int] | None = None,
        description: str | None = None,
        version: str | None = None,
        config_schema: Mapping[str, Any] | None = None,
        compat: Compat | Mapping[str, Any] | None = None,
    ) -> Callable[[F], F]:
        """Register a validator. Returns may be a `ValidationResult`, a bool, or `(bool, messages)`.

        Options are `build_descriptor`'s; a bad one raises `ValueError` naming the interceptor, here.
        """
        descriptor = build_descriptor(
            name,
            "validation",
            events=events,
            phase=phase,
            hooks=hooks,
            mode=mode,
            fail_open=fail_open,
            priority=priority,
            description=description,
            version=version,
            config_schema=config_schema,
            compat=compat,
        )
        return self._decorator(descriptor)

    def mutator(
        self,
        name: str,
        *,
        events: Iterable[str] | None = None,
        phase: PhaseSpec = "request",
        hooks: Iterable[HookEntry | Mapping[str, Any]] | None = None,
        mode: Mode = "active",
        fail_open: bool = False,
        priority: PriorityHint | Mapping[str, int] | None = None,
        description: str | None = None,
        version: str | None = None,
        config_schema: Mapping[str, Any] | None = None,
        compat: Compat | Mapping[str, Any] | None = None,
    ) -> Callable[[F], F]:
        """Register a mutator. Returns may be a `MutationResult`, the new payload, or None (unchanged)."""
        descriptor = build_descriptor(
            name,
            "mutation",
            events=events,
            phase=phase,
            hooks=hooks,
            mode=mode,
            fail_open=fail_open,
            priority=priority,
            description=description,
            version=version,
            config_schema=config_schema,
            compat=compat,
        )
        return self._decorator(descriptor)

    def sink(
        self,
        name: str,
        *,
        events: Iterable[str] | None = None,
        phase: PhaseSpec = "request",
        hooks: Iterable[HookEntry | Mapping[str, Any]] | None = None,
        mode: Mode = "active",
        fail_open: bool = False,
        priority: PriorityHint | Mapping[str, int] | None = None,
        description: str | None = None,
        version: str | None = None,
        config_schema: Mapping[str, Any] | None = None,
        compat: Compat | Mapping[str, Any] | None = None,
    ) -> Callable[[F], F]:
        """Register an opt-in sink (PR #28): never blocks, never changes the payload."""
        descriptor = build_descriptor(
            name,
            "sink",
            events=events,
            phase=phase,
            hooks=hooks,
            mode=mode,
            fail_open=fail_open,
            priority=priority,
            description=description,
            version=version,
            config_schema=config_schema,
            compat=compat,
        )
        return self._decorator(descriptor)

    def _decorator(self, descriptor: InterceptorDescriptor) -> Callable[[F], F]:
        def register(fn: F) -> F:
            self.add(descriptor, fn)
            return fn

        return register

    #: In-process: the executor's cancel scopes bound it, so it is not sent the chain's budget.
    local = True

    @property
    def concurrent(self) -> bool:
        """Whether parallel invocation helps: when some handler runs in a worker thread or can await.

        Only handlers that never suspend (async code without `await`, `async for` or `async with`, such
        as the CPU-bound built-in scans) gain nothing from it; the executor then runs them in turn.
        """
        return self._has_sync or self._may_suspend

    @property
    def public_key(self) -> str | None:
        """The base64url public half of `signing_key`, for invokers' `verify_key` (None: results unsigned)."""
        return public_key_text(self.signing_key) if self.signing_key is not None else None

    # ------------------------------------------------------------------ discovery

    @property
    def descriptors(self) -> list[InterceptorDescriptor]:
        """Every registered descriptor, in registration order (R7)."""
        return [registered.descriptor for registered in self._registry.values()]

    def list(self, event: str | None = None) -> list[InterceptorDescriptor]:
        """`interceptors/list` semantics: the event filter matches literal and `*` hooks in any phase (R8/R9)."""
        if event is None:
            return self.descriptors
        if self.strict_list_filter and is_pattern(event):
            raise InvalidParamsError(
                f"interceptors/list filter must be one concrete event name, got pattern {event!r}",
                data={"field": "event", "event": event},
            )
        return [d for d in self.descriptors if d.matches_event(event)]

    def settings(self) -> dict[str, Any]:
        """Advertised at `capabilities.extensions[EXTENSION_ID]` (and `experimental` for legacy clients)."""
        return {"supportedEvents": supported_events(self.descriptors)}

    # ------------------------------------------------------------------ invocation core (§2.2)

    async def invoke(self, call: Call) -> InterceptorResult:
        """Run one interceptor (the `Source` protocol used by `Chain.add_local`, and the wire handler)."""
        registered = self._lookup(call.name)  # R21
        key = (call.name, call.event, call.phase)
        covered = self._covered.get(key)
        if covered is None:
            _check_concrete_event(call.name, call.event)  # once per key: a rejected one is never cached
            covered = registered.descriptor.covers(call.event, call.phase)
            if covered and registered.is_async:
                covered = self._runner_for(registered, call.event, call.phase)
            if len(call.event) <= MAX_CACHED_EVENT_LENGTH:  # event names are the caller's: keep the cache small
                if len(self._covered) >= _COVERED_CACHE_SIZE:
                    self._covered.clear()
                self._covered[key] = covered
        if covered is False:
            advertised = [entry.to_wire() for entry in registered.descriptor.hooks]
            raise HookMismatchError(call.name, call.event, call.phase, advertised)  # R22
        if call.timeout_ms is None and covered is not True:  # an async handler, no timeout: the hot path
            return await covered(call.payload, call.config, call.context)
        return await self._run(
            registered, call.event, call.phase, call.payload, call.config, call.context, call.timeout_ms
        )

    def prepare(self, name: str, event: str, phase: Phase) -> Runner | None:
        """`invoke` of `name` at `(event, phase)` with the lookup and hook check done once, for a chain that
        runs it on every message (the `Source` protocol's optional seam). Only for a handler that never
        suspends; None when `invoke` must run it, or answer it: an unknown name (R21), an event it does
        not hook (R22), a handler that may await or runs in a thread."""
        registered = self._registry.get(name)
        if registered is None or not registered.still or not event or is_pattern(event):
            return None
        if not registered.descriptor.covers(event, phase):
            return None
        return self._runner_for(registered, event, phase)

    def _runner_for(self, registered: _Registered, event: str, phase: Phase) -> Runner:
        """`_run`'s hot path (an async handler, no timeout of its own) at one point, with what depends only on
        the interceptor and the point bound once: `prepare` gives it to a chain that runs it on every message."""
        name, handler, validator = registered.name, registered.handler, registered.config_validator

        async def run(
            given: Any, given_config: Mapping[str, Any] | None, context: InvocationContext | None
        ) -> InterceptorResult:
            payload = fast_copy(given) if self.copy_payloads else given
            if given_config is None:
                config: dict[str, Any] = {}
            else:
                config = dict(given_config)
                if validator is not None:
                    self._check_config(name, validator, config)  # R23
            invocation: Invocation = _new_object(Invocation)
            _set_invocation_fields(
                invocation,
                {
                    "name": name,
                    "event": event,
                    "phase": phase,
                    "payload": payload,
                    "config": config,
                    "context": context,
                },
            )
            started = time.perf_counter()
            try:
                outcome = await handler(invocation)
            except InterceptorsError:
                raise
            except Exception as exc:
                raise self._crash(invocation, exc, None, None) from None
            except anyio.get_cancelled_exc_class() as exc:
                raise await self._stray_cancellation(invocation, exc) from None
            return _result_of(registered, outcome, given, phase, (time.perf_counter() - started) * 1000)

        return run

    async def _run(
        self,
        registered: _Registered,
        event: str,
        phase: Phase,
        given: Any,
        given_config: Mapping[str, Any] | None,
        context: InvocationContext | None,
        timeout_ms: float | None = None,
    ) -> InterceptorResult:
        """The host processing order past lookup and hook check (§2.2): config, handler, result; an async
        handler with no timeout of its own takes the same order through its runner (`_runner_for`)."""
        name = registered.name
        payload = fast_copy(given) if self.copy_payloads else given
        if given_config is None:
            config: dict[str, Any] = {}
        else:
            config = dict(given_config)
            if registered.config_validator is not None:
                self._check_config(name, registered.config_validator, config)  # R23
        # `Invocation(...)` without the class call's and `__init__`'s frames (one is built per invocation).
        invocation: Invocation = _new_object(Invocation)
        _set_invocation_fields(
            invocation,
            {"name": name, "event": event, "phase": phase, "payload": payload, "config": config, "context": context},
        )
        started = time.perf_counter()
        outcome = await self._call_handler(registered, invocation, timeout_ms)
        duration_ms = (time.perf_counter() - started) * 1000
        if timeout_ms is not None and duration_ms > timeout_ms:
            # A handler that never yields (CPU-bound work, a blocking call in `async def`) cannot be
            # preempted by the cancel scope: its result arrived past the deadline and is discarded (R26).
            raise InterceptorTimeoutError(name, timeout_ms, phase, style=self.timeout_code)
        return _result_of(registered, outcome, given, phase, duration_ms)

    def _check_config(self, name: str, validator: Draft202012Validator, config: Mapping[str, Any]) -> None:
        """`config` against the interceptor's configSchema (R23), once per distinct value: a gateway sends the
        same configured object with every invocation, and validating it cost 17-50 µs each time."""
        key = _config_key(config)
        if key is not None and (name, key) in self._checked_configs:
            return
        _check_config(name, validator, config)  # raises for an invalid one, which is never remembered
        if key is not None:
            if len(self._checked_configs) >= _CHECKED_CONFIGS_SIZE:
                self._checked_configs.clear()
            self._checked_configs.add((name, key))

    async def invoke_params(self, params: InvokeParams) -> InterceptorResult:
        """Run one interceptor for parsed `interceptor/invoke` params."""
        registered = self._lookup(params.name)
        return await self.invoke(Call.for_params(params, registered.descriptor.type))

    def _lookup(self, name: str) -> _Registered:
        registered = self._registry.get(name)
        if registered is None:
            raise InterceptorNotFoundError(name)  # R21
        return registered

    async def _call_handler(self, registered: _Registered, invocation: Invocation, timeout_ms: float | None) -> Any:
        if timeout_ms is None:  # no deadline: no cancel scope
            return await self._run_handler(registered, invocation, None, None)
        with anyio.move_on_after(timeout_ms / 1000) as scope:
            return await self._run_handler(registered, invocation, scope, timeout_ms)
        # Only our own deadline lands here: a TimeoutError raised by the handler is a crash (R28).
        raise InterceptorTimeoutError(invocation.name, timeout_ms, invocation.phase, style=self.timeout_code)  # R26/R27

    async def _run_handler(
        self,
        registered: _Registered,
        invocation: Invocation,
        scope: anyio.CancelScope | None,
        timeout_ms: float | None,
    ) -> Any:
        try:
            if registered.is_async:
                return await registered.handler(invocation)
            return await anyio.to_thread.run_sync(registered.handler, invocation, abandon_on_cancel=True)
        except InterceptorsError:
            raise
        except Exception as exc:
            raise self._crash(invocation, exc, scope, timeout_ms) from None
        except anyio.get_cancelled_exc_class() as exc:
            if scope is not None and scope.cancel_called:
                raise  # our own deadline: `_call_handler` answers it with the timeout error
            raise await self._stray_cancellation(invocation, exc) from None

    async def _stray_cancellation(self, invocation: Invocation, exc: BaseException) -> InterceptorsError:
        """The error for a handler that raised a cancellation nobody asked for (it awaited a future another
        task cancelled, say): -32603 like any crash. Left alone, it ended the server's request loop and
        with it every client's connection. A real cancellation of this call (the client's
        `notifications/cancelled`, an invoker's deadline) is delivered again at the checkpoint."""
        await anyio.lowlevel.checkpoint()
        logger.warning("interceptor %r raised a cancellation of its own", invocation.name, exc_info=exc)
        return InterceptorExecutionError(invocation.name, f"{type(exc).__name__}: raised by the handler")

    def _crash(
        self, invocation: Invocation, exc: Exception, scope: anyio.CancelScope | None, timeout_ms: float | None
    ) -> InterceptorsError:
        """The error for a handler that raised: a timeout if our own deadline caused it (R26-R28), else -32603."""
        name = invocation.name
        if scope is not None and scope.cancel_called:
            return InterceptorTimeoutError(name, timeout_ms or 0, invocation.phase, style=self.timeout_code)
        logger.warning("interceptor %r raised", name, exc_info=exc)
        return InterceptorExecutionError(name, f"{type(exc).__name__}: {exc}")  # R24/R25

    # ------------------------------------------------------------------ mcp wiring

    def methods(self) -> Sequence[MethodBinding]:
        return [
            MethodBinding(method=LIST_METHOD, params_type=RawParams, handler=self._serve_list),
            MethodBinding(method=INVOKE_METHOD, params_type=RawParams, handler=self._serve_invoke),
        ]

    async def _serve_list(self, ctx: ServerRequestContext[Any, Any], params: RawParams) -> dict[str, Any]:
        raw = ctx.params or {}
        event = raw.get("event")
        if event is not None and not isinstance(event, str):
            raise MCPError(-32602, "interceptors/list: `event` must be a string", data={"field": "event"})
        try:
            if event is None:
                if self._wire_list is None:
                    self._wire_list = [d.to_wire() for d in self.descriptors]
                return {"interceptors": self._wire_list}
            return {"interceptors": [d.to_wire() for d in self.list(event)]}
        except InterceptorsError as exc:
            raise MCPError(exc.code, exc.message, exc.data) from None

    async def _serve_invoke(self, ctx: ServerRequestContext[Any, Any], params: RawParams) -> dict[str, Any]:
        try:
            parsed = parse_invoke_params(ctx.params)
            check_payload(parsed.payload, interceptor=parsed.name)  # deeper ones cannot be copied or answered
            check_payload(parsed.config, field="config", interceptor=parsed.name)
            result = await self.invoke_params(parsed)
        except InterceptorsError as exc:
            raise MCPError(exc.code, exc.message, exc.data) from None
        # `invoke` checked what the handler filled (pydantic would turn a set into a list and NaN into null);
        # deep nesting fails with a bare ValueError that mcp answers with code 0 or a data-less -32603 (R25).
        problem = None
        try:
            body = result.to_wire()
        except ValueError as exc:  # PydanticSerializationError too; e.g. an unchanged payload nested too deep
            problem = result_json_problem(result) or str(exc)
        if problem is not None:
            error = InterceptorExecutionError(parsed.name, f"result is not JSON-serialisable: {problem}")
            raise MCPError(error.code, error.message, error.data) from None
        if self.signing_key is not None and isinstance(result, ValidationResult):
            try:
                body = sign_result(body, self.signing_key)  # over the body exactly as it goes on the wire
            except CanonicalizationError as exc:  # e.g. an integer past the doubles in `info`: code 0, no data
                error = InterceptorExecutionError(parsed.name, f"result cannot be signed: {exc}")
                raise MCPError(error.code, error.message, error.data) from None
        return body

    async def capability_middleware(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Server middleware that repeats the capability under `experimental` in `initialize` results,
        and keeps the one in `server/discover` results current.

        Handshake-era (`<= 2025-11-25`) results have no `extensions` member, so without this a
        legacy client never sees the advertisement (spec §4 era gap). mcp stores an extension's
        settings when the server is built, so interceptors registered later would be missing from
        the 2026-07-28 advertisement while `interceptors/list` shows them (R4).
        """
        result = await call_next(ctx)
        if ctx.method == "initialize" and isinstance(result, dict):
            capabilities = result.setdefault("capabilities", {})
            experimental = capabilities.get("experimental") or {}
            capabilities["experimental"] = {**experimental, EXTENSION_ID: self.settings()}
        elif ctx.method == "server/discover" and isinstance(result, dict):
            capabilities = result.setdefault("capabilities", {})
            extensions = capabilities.get("extensions") or {}
            capabilities["extensions"] = {**extensions, EXTENSION_ID: self.settings()}
        return result

    def create_server(self, name: str | None = None, **kwargs: Any) -> MCPServer[Any]:
        """An `MCPServer` hosting only these interceptors, advertised in both protocol eras."""
        middleware = [*kwargs.pop("middleware", ()), self.capability_middleware]
        return MCPServer(name or self.name, extensions=[self], middleware=middleware, **kwargs)


def parse_invoke_params(raw: Mapping[str, Any] | None) -> InvokeParams:
    """Validate `interceptor/invoke` params; a bad field gets `-32602` naming it (and the interceptor)."""
    body = {k: v for k, v in (raw or {}).items() if k != "_meta"}
    try:
        return InvokeParams.model_validate(body)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        field = ".".join(str(part) for part in error["loc"]) or "params"
        name = body.get("name") if isinstance(body.get("name"), str) else None
        data: dict[str, Any] = {"field": field, "reason": error["msg"]}
        if name:
            data["interceptor"] = name
        raise InvalidParamsError(f"Invalid interceptor/invoke params: {field}: {error['msg']}", data=data) from None


def _check_concrete_event(name: str, event: str) -> None:
    """An invoke names one lifecycle event; `*` or `tools/*` would otherwise match a `*` hook and run."""
    if event and not is_pattern(event):
        return
    reason = "must be one concrete event name, not " + ("a wildcard or pattern" if event else "empty")
    raise InvalidParamsError(
        f"Invalid interceptor/invoke params: event: {reason}",
        data={"field": "event", "reason": reason, "interceptor": name},
    )


def _check_config(name: str, validator: Draft202012Validator, config: Mapping[str, Any]) -> None:
    error = best_match(validator.iter_errors(config))
    if error is None:
        return
    path = "config" + "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    raise InvalidParamsError(
        f"config for {name!r} violates its configSchema at {path}: {error.message}",
        data={"name": name, "interceptor": name, "field": path, "reason": error.message},
    )


def _config_key(config: Mapping[str, Any]) -> bytes | None:
    """A key equal for two configs only when jsonschema must judge them alike, or None (check it every time).

    Only plain JSON of exact types gets one: to jsonschema a tuple is not an array nor a bool an integer,
    while orjson writes a tuple as a list and NaN as null, and a subclass could validate differently.
    A config past `_CONFIG_KEY_VALUES` values (or holding a cycle) gets none either.
    """
    stack: list[Any] = [config]
    budget = _CONFIG_KEY_VALUES
    while stack:
        budget -= 1
        if budget < 0:
            return None
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            if any(type(key) is not str for key in item):
                return None
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind is float:
            if not math.isfinite(item):
                return None
        elif not (kind is str or kind is int or kind is bool or item is None):
            return None
    try:
        return orjson.dumps(config, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):  # nested past orjson's depth limit
        return None


def _normalise(
    registered: _Registered, value: Any, original_payload: Any, phase: Phase, duration_ms: float
) -> InterceptorResult:
    """Turn a handler's return into the stamped result of its declared type, or fail with -32603.

    A new payload is filled in from the interceptor's stamps (as `_run` fills a validator's bool and a
    mutator's None): they are ours and the value's type was just checked, so validating them again would
    only cost time.
    """
    descriptor = registered.descriptor
    name = descriptor.name
    if descriptor.type == "validation":
        result = _as_validation(name, value, {"interceptor": name, "phase": phase, "duration_ms": duration_ms})
        _check_severities(name, result)
        return result
    if descriptor.type == "mutation":
        if not isinstance(value, _RESULT_TYPES):  # None (unchanged) or the new payload
            modified = value is not None and value != original_payload
            if type(modified) is bool:  # else an exotic payload's comparison: let the model judge it
                # Python's == says `True == 1`: an equal-looking payload is checked as JSON (R20)
                fields = registered.stamps[phase].copy()
                fields["duration_ms"] = duration_ms
                fields["modified"] = modified or (value is not None and not same_json(value, original_payload))
                fields["payload"] = original_payload if value is None else value
                return filled_model(
                    MutationResult, fields, {"interceptor", "phase", "duration_ms", "modified", "payload"}
                )
        return _as_mutation(name, value, original_payload, phase, duration_ms)
    stamp = {"interceptor": name, "phase": phase, "duration_ms": duration_ms}
    if value is None or isinstance(value, bool):
        return SinkResult(recorded=value is not False, **stamp)
    if isinstance(value, SinkResult):
        return value.model_copy(update=stamp)
    raise InterceptorExecutionError(name, f"sink returned {type(value).__name__}, expected SinkResult, bool or None")


_RESULT_TYPES = (ValidationResult, MutationResult, SinkResult)
_TYPE_NOUNS = {"validation": "validator", "mutation": "mutator", "sink": "sink"}


def _result_of(
    registered: _Registered, outcome: Any, given: Any, phase: Phase, duration_ms: float
) -> InterceptorResult:
    """The stamped result of a handler that returned `outcome` for the payload `given` (§2.2, past the handler)."""
    # The common returns, a validator's bool and a mutator's None (unchanged), are filled in from the
    # interceptor's stamps: they are ours and the value's type was just checked.
    if type(outcome) is bool and registered.type == "validation":
        fields = registered.stamps[phase].copy()
        fields["duration_ms"] = duration_ms
        fields["valid"] = outcome
        fields["severity"] = None if outcome else "error"
        return filled_model(ValidationResult, fields, {"interceptor", "phase", "duration_ms", "valid", "severity"})
    if outcome is None and registered.type == "mutation":
        fields = registered.stamps[phase].copy()
        fields["duration_ms"] = duration_ms
        fields["modified"] = False
        fields["payload"] = given
        return filled_model(MutationResult, fields, {"interceptor", "phase", "duration_ms", "modified", "payload"})
    try:
        result = _normalise(registered, outcome, given, phase, duration_ms)
    except InterceptorsError:
        raise
    except (TypeError, ValueError) as exc:  # pydantic's ValidationError too: the handler's return, not the params
        raise _malformed_return(registered.descriptor, exc) from None
    if outcome is None or type(outcome) is bool:  # the result holds only our stamps and the input payload
        return result
    # In-process as over a transport: a datetime, set or NaN in a new payload fails the invocation (R25).
    problem = result_json_problem(result, given)
    if problem is not None:
        raise InterceptorExecutionError(registered.name, f"result is not JSON-serialisable: {problem}")
    return result


def _malformed_return(descriptor: InterceptorDescriptor, exc: TypeError | ValueError) -> InterceptorExecutionError:
    """-32603 naming the interceptor for a return its result cannot be built from, such as `(False, 5)` or
    messages without `message`; it was answered -32602 (blaming the invoker's params) or with code 0."""
    if isinstance(exc, ValidationError):
        error = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in error["loc"])
        problem = f"{where}: {error['msg']}" if where else str(error["msg"])
    else:
        problem = f"{type(exc).__name__}: {exc}"
    noun = _TYPE_NOUNS.get(descriptor.type, "interceptor")
    return InterceptorExecutionError(descriptor.name, f"{noun} returned an invalid result: {problem}")


def _as_validation(name: str, value: Any, stamp: dict[str, Any]) -> ValidationResult:
    if isinstance(value, ValidationResult):
        return value.model_copy(update=stamp)
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], bool):
        valid, messages = value
        severity = "info" if valid else "error"
        items = [messages] if isinstance(messages, str | ValidationMessage) else list(messages or [])
        parsed = tuple(
            ValidationMessage(message=m, severity=severity)
            if isinstance(m, str)
            else ValidationMessage.model_validate(m)
            for m in items
        )
        return ValidationResult(valid=valid, severity=None if valid else "error", messages=parsed or None, **stamp)
    if isinstance(value, Mapping) and "valid" in value:
        try:
            return ValidationResult.model_validate(value).model_copy(update=stamp)
        except ValidationError as exc:
            raise InterceptorExecutionError(
                name, f"validator returned an invalid result: {exc.errors()[0]['msg']}"
            ) from None
    raise InterceptorExecutionError(
        name, f"validator returned {type(value).__name__}, expected ValidationResult, bool or (bool, messages)"
    )


def _check_severities(name: str, result: ValidationResult) -> None:
    """A host sends only the spec's severities; an invoker would read another as blocking (R47), so a
    handler's `critical` or `fatal` is a malformed result here, not a verdict."""
    severities = [result.severity] if result.severity is not None else []
    severities += [message.severity for message in result.messages or ()]
    for severity in severities:
        if severity not in KNOWN_SEVERITIES:
            raise InterceptorExecutionError(
                name, f"validator returned severity {severity!r}, expected one of 'info', 'warn', 'error'"
            )


def _as_mutation(name: str, value: Any, original_payload: Any, phase: Phase, duration_ms: float) -> MutationResult:
    stamp = {"interceptor": name, "phase": phase, "duration_ms": duration_ms}
    if isinstance(value, MutationResult):
        if not value.modified and not same_json(value.payload, original_payload):
            raise InterceptorExecutionError(name, "mutator returned modified=false with a changed payload")
        return value.model_copy(update=stamp)
    if isinstance(value, ValidationResult | SinkResult):
        raise InterceptorExecutionError(name, f"mutator returned a {value.type} result, expected a mutation result")
    return MutationResult(modified=not same_json(value, original_payload), payload=value, **stamp)


def build_descriptor(
    name: str,
    type_: InterceptorType,
    *,
    events: Iterable[str] | None = None,
    phase: PhaseSpec = "request",
    hooks: Iterable[HookEntry | Mapping[str, Any]] | None = None,
    mode: Mode = "active",
    fail_open: bool = False,
    priority: PriorityHint | Mapping[str, int] | None = None,
    description: str | None = None,
    version: str | None = None,
    config_schema: Mapping[str, Any] | None = None,
    compat: Compat | Mapping[str, Any] | None = None,
) -> InterceptorDescriptor:
    """Build and validate a descriptor from decorator options; errors name the option to fix."""
    if (events is None) == (hooks is None):
        raise ValueError(f"interceptor {name!r}: pass exactly one of events=[...] or hooks=[...]")
    if isinstance(events, str):
        raise ValueError(f"interceptor {name!r}: events must be a list of event names, not a string")
    if phase not in ("request", "response", "both"):
        raise ValueError(f"interceptor {name!r}: phase must be 'request', 'response' or 'both', got {phase!r}")
    unknown = unknown_priority_keys(priority)
    if unknown:
        raise ValueError(f"interceptor {name!r}: priority keys must be 'request' and/or 'response', got {unknown}")
    try:
        raw_hooks: list[Any] = (
            [entry.to_wire() for entry in hooks_for(events, phase)]
            if events is not None
            else [entry.to_wire() if isinstance(entry, HookEntry) else dict(entry) for entry in hooks or ()]
        )
        body: dict[str, Any] = {"name": name, "type": type_, "hooks": raw_hooks, "mode": mode, "failOpen": fail_open}
        if priority is not None:
            body["priorityHint"] = priority.to_wire() if hasattr(priority, "to_wire") else priority
        for key, value in (("description", description), ("version", version), ("configSchema", config_schema)):
            if value is not None:
                body[key] = dict(value) if isinstance(value, Mapping) else value
        if compat is not None:
            body["compat"] = compat.to_wire() if isinstance(compat, Compat) else dict(compat)
        return InterceptorDescriptor.model_validate(body)
    except ValidationError as exc:  # from the hook entries or the descriptor
        error = exc.errors(include_url=False)[0]
        field = ".".join(str(part) for part in error["loc"])
        raise ValueError(f"interceptor {name!r}: invalid {field}: {error['msg']}") from None
    except (TypeError, ValueError):  # an option of the wrong shape (hooks=[5], compat=1)
        raise ValueError(
            f"interceptor {name!r}: hooks must be HookEntry objects or mappings, compat a Compat or a mapping"
        ) from None


def fast_copy(payload: Any) -> Any:
    """Deep-copy a JSON payload; orjson's round trip is several times faster than `copy.deepcopy`."""
    try:
        return orjson.loads(orjson.dumps(payload))
    except (TypeError, orjson.JSONEncodeError):
        return copy.deepcopy(payload)


#: Opcodes through which a coroutine can give the event loop control (`await`, `async for`, `async with`).
_SUSPENDING_OPS = frozenset({"GET_AWAITABLE", "GET_AITER", "GET_ANEXT", "BEFORE_ASYNC_WITH", "SEND", "YIELD_VALUE"})


def _may_suspend(handler: Handler) -> bool:
    """Whether an async handler's code can suspend; True when its code cannot be found.

    Every layer counts, not only the innermost: a decorator's wrapper (`functools.wraps`) may await
    before calling a handler that never does, and the executor drops its cancel scope for chains of
    handlers that cannot suspend.
    """
    function: Any = handler
    seen: set[int] = set()
    while id(function) not in seen:
        seen.add(id(function))
        if isinstance(function, functools.partial):
            function = function.func
            continue
        code = getattr(function, "__code__", None)
        if code is None:  # an async callable object: its class's `__call__`
            code = getattr(type(function).__call__, "__code__", None)
        if code is None or any(instruction.opname in _SUSPENDING_OPS for instruction in dis.get_instructions(code)):
            return True
        inner = getattr(function, "__wrapped__", None)
        if inner is None:
            return False
        function = inner
    return False


def _check_handler(name: str, handler: Any) -> None:
    """Refuse at registration a handler that could never produce a result (it would fail every call)."""
    if not callable(handler):
        raise TypeError(f"interceptor {name!r}: the handler must be callable, got {type(handler).__name__}")
    if inspect.isasyncgenfunction(handler) or inspect.isgeneratorfunction(handler):
        raise TypeError(
            f"interceptor {name!r}: the handler is a generator function; use a plain or async function that returns"
        )
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):  # some builtins have no signature: let them through
        return
    try:
        signature.bind(None)
    except TypeError:
        raise TypeError(
            f"interceptor {name!r}: the handler must accept one positional argument (the Invocation),"
            f" its signature is {signature}"
        ) from None


def _is_async(handler: Handler) -> bool:
    # async callable objects count too
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(type(handler).__call__)
