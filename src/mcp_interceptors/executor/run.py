"""Runs a `Plan`: awaits sources, runs validators in parallel, enforces deadlines (spec §5.3-§5.8).

The executor only awaits; every decision is `planning.ChainRun`'s. One cancel scope carries the chain's
deadline; a plan of in-process handlers that never suspend takes the common path (`still.py`) first.
"""

from __future__ import annotations

import asyncio
import math
import time
import weakref
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel

from mcp_interceptors.executor.calls import Call, ChainResult, Source
from mcp_interceptors.executor.memo import close_memo, open_memo
from mcp_interceptors.executor.outcomes import DEADLINE, attempt, failure, timed
from mcp_interceptors.executor.still import Handover, still_plan
from mcp_interceptors.planning import NO_FINDINGS, Batch, ChainRun, Outcome, Plan, SeverityRule, Step, summary_of
from mcp_interceptors.protocol.errors import TIMEOUT_G4
from mcp_interceptors.protocol.invoke import InvocationContext


async def execute_plan(
    plan: Plan,
    payload: Any,
    sources: Mapping[str, Source],
    config: Mapping[str, Mapping[str, Any]] | None = None,
    context: InvocationContext | None = None,
    timeout_ms: float | None = None,
    severity_rule: SeverityRule = "g5",
    deadline_always_blocks: bool = False,
) -> ChainResult:
    """Execute `plan` on `payload`. `timeout_ms` is the whole-chain deadline (R60).

    One cancel scope carries the deadline for the whole run. When it fires, the invocations in
    flight and every one not yet started resolve as deadline failures, routed by their own mode
    and failOpen (G5); a per-invocation scope exists only for an interceptor's own, shorter timeout.
    A run whose every invocation is an in-process handler that never suspends needs no scope: nothing
    in it reaches a checkpoint where one could cancel, and the clock checks around each invocation
    decide the deadline (R60).
    """
    started = time.perf_counter()
    still, notes = still_plan(plan, sources)
    # The run's memo (`memo.py`): a guard's serialisation or scan of a payload, for the run's next guards.
    token = open_memo(notes)
    try:
        # A still run opens no cancel scope, so its deadline need not be on the loop's clock: it is on the
        # clock the run times its invocations with anyway (finding the loop's costs more than all its reads:
        # `bench/chain_overhead.py`).
        clock = time.perf_counter if still is not None else _clock()
        deadline = clock() + timeout_ms / 1000 if timeout_ms is not None else None
        handover = None
        if still is not None:
            ran = await still.run(payload, config or {}, context, deadline, severity_rule)
            if isinstance(ran, Handover):
                handover = ran
            else:  # nothing blocked, failed or was malformed
                final_payload, results, findings = ran
                # Positional: eleven keyword arguments cost the call over twice as much, once per message
                # (`bench/chain_overhead.py`).
                return ChainResult(
                    "success",
                    plan.event,
                    plan.phase,
                    plan.direction,
                    final_payload,
                    results,
                    [],
                    summary_of(results) if findings else NO_FINDINGS,
                    None,
                    (time.perf_counter() - started) * 1000,
                    plan,
                )
        run = ChainRun(plan, payload, severity_rule=severity_rule, deadline_always_blocks=deadline_always_blocks)
        invoker = _Invoker(
            plan, sources, config or {}, context, deadline, clock, still is not None or _never_suspends(plan, sources)
        )
        if handover is not None:
            await handover.replay(run, invoker.invoke)
        cut: tuple[Batch, list[Outcome | None]] | None = None
        with anyio.CancelScope(deadline=deadline) if deadline is not None and not invoker.still else _NO_SCOPE:
            while (batch := run.next_batch()) is not None:
                outcomes: list[Any] = [None] * len(batch.steps)  # an Outcome per step once filled
                cut = (batch, outcomes)
                await invoker.fill(batch, run.snapshot(batch), outcomes)
                run.record(batch, outcomes)
                cut = None
        if cut is not None:  # the deadline passed mid-batch
            batch, outcomes = cut
            run.record(batch, [outcome or DEADLINE for outcome in outcomes])
            while (batch := run.next_batch()) is not None:
                run.record(batch, [DEADLINE] * len(batch.steps))
        outcome = run.result()
        return ChainResult(
            status=outcome.status,
            event=plan.event,
            phase=plan.phase,
            direction=plan.direction,
            final_payload=outcome.final_payload,
            results=outcome.results,
            failures=outcome.failures,
            validation_summary=outcome.validation_summary,
            aborted_at=outcome.aborted_at,
            total_duration_ms=(time.perf_counter() - started) * 1000,
            plan=plan,
            escalations=outcome.escalations,
            pending_payload=outcome.pending_payload,
        )
    finally:
        close_memo(token)


#: Stands in for the chain's cancel scope when it needs none (reusable: it does nothing).
_NO_SCOPE = nullcontext()


def _clock() -> Callable[[], float]:
    """The clock `anyio.current_time` reads, resolved once per run: on asyncio the loop's own `time`,
    which the cancel scopes' deadlines are in; `anyio.current_time` looks the backend up on every call."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio (trio)
        return anyio.current_time
    global _last_clock
    known, clock = _last_clock
    if known() is loop:
        return clock
    if anyio.lowlevel.current_token().native_token is not loop:  # an asyncio loop anyio does not run on
        return anyio.current_time
    # asyncio's own `time` is `time.monotonic()` behind a Python frame; a loop of another kind keeps its own.
    clock = time.monotonic if type(loop).time is asyncio.BaseEventLoop.time else loop.time
    _last_clock = (weakref.ref(loop), clock)
    return clock


def _no_loop() -> None:
    return None


#: The asyncio loop `_clock` last found anyio running on (held weakly), and its clock: asking anyio again
#: costs more than all of a run's clock reads (`bench/chain_overhead.py`).
_last_clock: tuple[Callable[[], asyncio.AbstractEventLoop | None], Callable[[], float]] = (_no_loop, time.monotonic)


def _never_suspends(plan: Plan, sources: Mapping[str, Source]) -> bool:
    """Whether every invocation of `plan` is an in-process handler that cannot suspend (see `Source`)."""
    if plan.timed:
        return False
    for name in plan.sources:
        source = sources.get(name)
        if source is None or not getattr(source, "local", False) or getattr(source, "concurrent", True):
            return False
    return True


@dataclass(slots=True)
class _Invoker:
    plan: Plan
    sources: Mapping[str, Source]
    config: Mapping[str, Mapping[str, Any]]
    context: InvocationContext | None
    deadline: float | None
    clock: Callable[[], float]
    #: No invocation of the plan can suspend: every batch runs in turn, with no scope (see `execute_plan`).
    still: bool

    async def fill(self, batch: Batch, snapshot: Any, outcomes: list[Outcome | None]) -> None:
        """Invoke every step of `batch`, writing each outcome at its step's index (R43).

        Validators run concurrently, except when every source says concurrency buys nothing (in-process
        async handlers): then they run one after another, cheaper than a task group (`bench/chain_overhead.py`).
        """
        steps = batch.steps
        if (
            self.still
            or len(steps) == 1
            or not any(getattr(self.sources.get(step.source), "concurrent", True) for step in steps)
        ):
            for index, step in enumerate(steps):
                outcomes[index] = await self.invoke(step, snapshot)
            return

        async def run_one(index: int, step: Step) -> None:
            outcomes[index] = await self.invoke(step, snapshot)

        async with anyio.create_task_group() as tg:
            for index, step in enumerate(steps):
                tg.start_soon(run_one, index, step)

    async def invoke(self, step: Step, payload: Any) -> Outcome:
        source = self.sources.get(step.source)
        if source is None:
            return Outcome(code=-32603, reason=f"host {step.source!r} is not connected")
        if step.policy.timeout_ms is None and getattr(source, "local", False):
            # The hot path: an in-process host with no timeout of its own; the chain's scope bounds it.
            if self._passed():
                return DEADLINE
            plan, name = self.plan, step.name
            call = Call(name, step.type, plan.event, plan.phase, payload, self.config.get(name), None, self.context)
            started = time.perf_counter()
            try:
                answer = Outcome(timed(await source.invoke(call), started, name))
            except Exception as exc:  # never a cancellation
                answer = failure(exc, self.deadline is not None, None)
            return DEADLINE if self._passed() else answer
        own = step.policy.timeout_ms / 1000 if step.policy.timeout_ms is not None else None
        remaining = self.deadline - self.clock() if self.deadline is not None else None
        if remaining is not None and remaining <= 0:
            return DEADLINE
        chain_bound = remaining is not None and (own is None or remaining <= own)
        # A remote host is sent the budget it has, so it stops work we have given up on; an
        # in-process host is cancelled by our scopes directly and needs none of its own.
        budget = remaining if chain_bound else own
        sent = None if getattr(source, "local", False) else budget
        call = Call(
            name=step.name,
            type=step.type,
            event=self.plan.event,
            phase=self.plan.phase,
            payload=payload,
            config=self.config.get(step.name),
            timeout_ms=math.ceil(sent * 1000) if sent is not None else None,
            context=self.context,
        )
        if own is None or chain_bound:  # the chain's scope (if any) bounds it
            answer = await attempt(source, call, chain_bound, None)
            return DEADLINE if chain_bound and self._passed() else answer
        outcome = None
        with anyio.move_on_after(own) as scope:
            outcome = await attempt(source, call, False, scope)
        # A handler that never awaits cannot be cancelled: its answer, when it comes after the timeout,
        # is a timeout all the same (as a host answers a late result, R26).
        if scope.cancelled_caught or outcome is None or self.clock() > scope.deadline:
            return Outcome(code=TIMEOUT_G4, reason="timeout", timeout=True)
        return outcome

    def _passed(self) -> bool:
        """Whether the chain deadline has passed. Its scope cancels only at a checkpoint, so an in-process
        handler that never awaits finishes past it: that answer is a deadline failure all the same (R60),
        as a late answer past an interceptor's own timeout is (below), and nothing starts after it."""
        return self.deadline is not None and self.clock() > self.deadline
