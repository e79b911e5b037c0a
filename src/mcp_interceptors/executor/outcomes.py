"""What one invocation produced, as the executor turns it into a `planning.Outcome`: a result stamped with its
duration, or a failure with its code (a source that crashed, timed out, or answered with no result).
"""

from __future__ import annotations

import time
from typing import Any

import anyio

from mcp_interceptors.executor.calls import Call, Source
from mcp_interceptors.planning import Outcome
from mcp_interceptors.protocol.errors import TIMEOUT_G4, InterceptorsError, MalformedResultError, is_timeout_error
from mcp_interceptors.protocol.results import InterceptorResult

#: The outcome of an invocation the chain deadline cut short or never started.
DEADLINE = Outcome(code=TIMEOUT_G4, reason="chain deadline exceeded", timeout=True, deadline=True)


async def attempt(source: Source, call: Call, chain_bound: bool, scope: anyio.CancelScope | None) -> Outcome:
    """One invocation; every exception (never a cancellation) becomes a failure outcome."""
    started = time.perf_counter()
    try:
        return Outcome(timed(await source.invoke(call), started, call.name))
    except Exception as exc:
        return failure(exc, chain_bound, scope)


def timed(result: InterceptorResult, started: float, name: str) -> InterceptorResult:
    """`result` with `durationMs`, which the aggregate requires (R67): measured here when a host omits it.

    A source that answers with anything but a result (None, a dict, a bool) broke the `Source` contract:
    that is a malformed result, an invocation failure routed by mode/failOpen (R58), never a crash.
    """
    if not isinstance(result, InterceptorResult):
        raise MalformedResultError(name, f"the source returned {type(result).__name__}, not an interceptor result")
    if getattr(result, "duration_ms", 0) is not None:
        return result
    return result.model_copy(update={"duration_ms": (time.perf_counter() - started) * 1000})


def failure(exc: Exception, chain_bound: bool, scope: anyio.CancelScope | None) -> Outcome:
    """The outcome of an invocation that raised: a crashing source is a failure, never a verdict."""
    if scope is not None and scope.cancel_called:  # our deadline fired and the source turned it into an error
        return Outcome(code=TIMEOUT_G4, reason="timeout", timeout=True, deadline=chain_bound)
    if isinstance(exc, InterceptorsError):
        timed_out = is_timeout_error(exc.code, exc.data)
        reason = str(exc.data.get("reason") or exc.message)
        return Outcome(code=exc.code, reason=reason, timeout=timed_out, deadline=timed_out and chain_bound)
    return Outcome(code=-32603, reason=f"{type(exc).__name__}: {exc}")


def outcome_of(answer: Any, started: float, name: str, chain_bound: bool) -> Outcome:
    """The outcome of an invocation that answered `answer` (or raised it), as `run._Invoker.invoke` makes it."""
    if isinstance(answer, Exception):
        return failure(answer, chain_bound, None)
    try:
        return Outcome(timed(answer, started, name))
    except Exception as exc:  # not a result at all (`attempt` makes the same failure of it)
        return failure(exc, chain_bound, None)
