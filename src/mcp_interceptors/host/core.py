"""The host processing order (spec §2.2) for one invocation: look the interceptor up, check the hook, check the
config, run the handler under its deadline, and stamp its result. `InterceptorHost` adds authoring and the wire.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
from jsonschema import Draft202012Validator

from mcp_interceptors.executor import Call, Runner
from mcp_interceptors.host.invocation import (
    Invocation,
    Registered,
    check_concrete_event,
    config_key,
    fast_copy,
    new_object,
    result_of,
    set_invocation_fields,
    validate_config,
)
from mcp_interceptors.protocol.errors import (
    HookMismatchError,
    InterceptorExecutionError,
    InterceptorNotFoundError,
    InterceptorsError,
    InterceptorTimeoutError,
    TimeoutCodeStyle,
)
from mcp_interceptors.protocol.events import (
    MAX_CACHED_EVENT_LENGTH,
    Phase,
    is_pattern,
)
from mcp_interceptors.protocol.invoke import (
    InvocationContext,
    InvokeParams,
)
from mcp_interceptors.protocol.results import (
    InterceptorResult,
)

#: Entries of `InterceptorHost`'s hook-coverage cache; a client choosing new event names only refills it.
_COVERED_CACHE_SIZE = 4096
#: Configs `InterceptorHost` remembers as valid; past this it starts over (a config sent by a client only refills it).
_CHECKED_CONFIGS_SIZE = 1024


logger = logging.getLogger(__name__)


class HostCore:
    """The interceptors a host runs and how it runs one (`invoke`; `prepare` for a chain's common path)."""

    def __init__(self, *, copy_payloads: bool, timeout_code: TimeoutCodeStyle) -> None:
        self.copy_payloads = copy_payloads
        self.timeout_code: TimeoutCodeStyle = timeout_code
        self._registry: dict[str, Registered] = {}
        #: By `(name, event, phase)`: False when the interceptor does not hook it, else its hot-path runner
        #: (`_runner_for`), or True for a handler `_run` calls in a worker thread.
        self._covered: dict[tuple[str, str, str], Runner | bool] = {}
        #: `(interceptor, config key)` of configs its configSchema accepted (see `config_key`).
        self._checked_configs: set[tuple[str, bytes]] = set()
        self._has_sync = False
        self._may_suspend = False

    #: In-process: the executor's cancel scopes bound it, so it is not sent the chain's budget.
    local = True

    @property
    def concurrent(self) -> bool:
        """Whether parallel invocation helps: when some handler runs in a worker thread or can await.

        Only handlers that never suspend (async code without `await`, `async for` or `async with`, such
        as the CPU-bound built-in scans) gain nothing from it; the executor then runs them in turn.
        """
        return self._has_sync or self._may_suspend

    # ------------------------------------------------------------------ invocation core (§2.2)

    async def invoke(self, call: Call) -> InterceptorResult:
        """Run one interceptor (the `Source` protocol used by `Chain.add_local`, and the wire handler)."""
        registered = self._lookup(call.name)  # R21
        key = (call.name, call.event, call.phase)
        covered = self._covered.get(key)
        if covered is None:
            check_concrete_event(call.name, call.event)  # once per key: a rejected one is never cached
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

    def _runner_for(self, registered: Registered, event: str, phase: Phase) -> Runner:
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
            invocation: Invocation = new_object(Invocation)
            set_invocation_fields(
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
            return result_of(registered, outcome, given, phase, (time.perf_counter() - started) * 1000)

        return run

    async def _run(
        self,
        registered: Registered,
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
        invocation: Invocation = new_object(Invocation)
        set_invocation_fields(
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
        return result_of(registered, outcome, given, phase, duration_ms)

    def _check_config(self, name: str, validator: Draft202012Validator, config: Mapping[str, Any]) -> None:
        """`config` against the interceptor's configSchema (R23), once per distinct value: a gateway sends the
        same configured object with every invocation, and validating it costs 17-50 µs each time
        (`bench/gateway_overhead.py`, gateway+5 guards)."""
        key = config_key(config)
        if key is not None and (name, key) in self._checked_configs:
            return
        validate_config(name, validator, config)  # raises for an invalid one, which is never remembered
        if key is not None:
            if len(self._checked_configs) >= _CHECKED_CONFIGS_SIZE:
                self._checked_configs.clear()
            self._checked_configs.add((name, key))

    async def invoke_params(self, params: InvokeParams) -> InterceptorResult:
        """Run one interceptor for parsed `interceptor/invoke` params."""
        registered = self._lookup(params.name)
        return await self.invoke(Call.for_params(params, registered.descriptor.type))

    def _lookup(self, name: str) -> Registered:
        registered = self._registry.get(name)
        if registered is None:
            raise InterceptorNotFoundError(name)  # R21
        return registered

    async def _call_handler(self, registered: Registered, invocation: Invocation, timeout_ms: float | None) -> Any:
        if timeout_ms is None:  # no deadline: no cancel scope
            return await self._run_handler(registered, invocation, None, None)
        with anyio.move_on_after(timeout_ms / 1000) as scope:
            return await self._run_handler(registered, invocation, scope, timeout_ms)
        # Only our own deadline lands here: a TimeoutError raised by the handler is a crash (R28).
        raise InterceptorTimeoutError(invocation.name, timeout_ms, invocation.phase, style=self.timeout_code)  # R26/R27

    async def _run_handler(
        self,
        registered: Registered,
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
        task cancelled, say): -32603 like any crash. Left alone, it would end the server's request loop and
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
