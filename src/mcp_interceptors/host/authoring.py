"""Authoring interceptors: the options every decorator takes (one definition: `build_descriptor`'s), the hook
entries they make, and the checks a handler must pass to be registered.
"""

from __future__ import annotations

import dis
import functools
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Concatenate, Literal, ParamSpec, Protocol

from pydantic import ValidationError

from mcp_interceptors.host.invocation import F, Handler
from mcp_interceptors.protocol.descriptors import (
    Compat,
    HookEntry,
    InterceptorDescriptor,
    InterceptorType,
    Mode,
    PriorityHint,
    unknown_priority_keys,
)
from mcp_interceptors.protocol.events import PHASES, Phase

PhaseSpec = Literal["request", "response", "both"]
_Options = ParamSpec("_Options")


def hooks_for(events: Iterable[str], phase: PhaseSpec) -> tuple[HookEntry, ...]:
    """Expand `phase="both"` sugar into one hook entry per phase (never sent as `both`, R14)."""
    event_list = tuple(events)
    phases: Sequence[Phase] = PHASES if phase == "both" else (phase,)
    return tuple(HookEntry(events=event_list, phase=p) for p in phases)


class Registers(Protocol):
    """What a decorator returns: registers the handler it is given, and gives it back unchanged."""

    def __call__(self, handler: F, /) -> F: ...


class _Registering(Protocol):
    """What a registrar's decorator needs of its host."""

    def _decorator(self, descriptor: InterceptorDescriptor) -> Registers: ...


def registrar(
    build: Callable[Concatenate[str, InterceptorType, _Options], InterceptorDescriptor],
    type_: InterceptorType,
    doc: str,
) -> Callable[Concatenate[Any, str, _Options], Registers]:
    """A decorator method registering interceptors of `type_`, whose options are `build_descriptor`'s: one
    signature for `validator`, `mutator` and `sink`, checked by type checkers (`ParamSpec`) and shown by
    `inspect.signature`, an unknown option refused as Python refuses an unknown keyword."""
    method = {"validation": "validator", "mutation": "mutator", "sink": "sink"}[type_]

    def register(host: Any, name: str, /, *args: _Options.args, **options: _Options.kwargs) -> Registers:
        unknown = [key for key in options if key not in _OPTION_NAMES]
        if args or unknown:
            got = f"an unexpected keyword argument {unknown[0]!r}" if unknown else "positional options"
            raise TypeError(f"InterceptorHost.{method}() got {got}")
        registering: _Registering = host
        return registering._decorator(build(name, type_, *args, **options))

    register.__name__ = method
    register.__qualname__ = f"InterceptorHost.{method}"
    register.__doc__ = (
        f"{doc}\n\nOptions are `build_descriptor`'s; a bad one raises `ValueError` naming the interceptor."
    )
    register.__signature__ = _signature_for(inspect.signature(build))  # type: ignore[attr-defined]
    return register


def _signature_for(options: inspect.Signature) -> inspect.Signature:
    """`(self, name, *, <the options>)`: `build_descriptor`'s options after a decorator's own two parameters."""
    own = [
        inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY),
        inspect.Parameter("name", inspect.Parameter.POSITIONAL_ONLY, annotation="str"),
    ]
    kept = [p for p in options.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
    return options.replace(parameters=[*own, *kept], return_annotation="Registers")


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


#: Opcodes through which a coroutine can give the event loop control (`await`, `async for`, `async with`).
_SUSPENDING_OPS = frozenset({"GET_AWAITABLE", "GET_AITER", "GET_ANEXT", "BEFORE_ASYNC_WITH", "SEND", "YIELD_VALUE"})


def may_suspend(handler: Handler) -> bool:
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


def check_handler(name: str, handler: Any) -> None:
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


def is_async_handler(handler: Handler) -> bool:
    # async callable objects count too
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(type(handler).__call__)


#: The options of every decorator (`registrar`), as `build_descriptor` names them.
_OPTION_NAMES = frozenset(
    name for name, p in inspect.signature(build_descriptor).parameters.items() if p.kind is p.KEYWORD_ONLY
)
