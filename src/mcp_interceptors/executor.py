"""Runs a `Plan`: awaits sources, runs validators in parallel, enforces deadlines (spec §5.3-§5.8).

The executor only awaits; every decision is `planning.ChainRun`'s. Sources arrive through the
one-method `Source` protocol, so the same loop drives in-process hosts and remote MCP hosts.
"""

from __future__ import annotations

import asyncio
import math
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import anyio.lowlevel

from mcp_interceptors.planning import (
    NO_FINDINGS,
    Batch,
    ChainRun,
    Outcome,
    Plan,
    SeverityRule,
    Step,
    is_blocking_verdict,
    summary_of,
)
from mcp_interceptors.protocol.chain import (
    AbortedAt,
    ChainExecutionResult,
    ChainStatus,
    InvocationFailure,
    ValidationSummary,
)
from mcp_interceptors.protocol.errors import TIMEOUT_G4, InterceptorsError, MalformedResultError, is_timeout_error
from mcp_interceptors.protocol.events import Direction, Phase
from mcp_interceptors.protocol.invoke import InvocationContext, InvokeParams
from mcp_interceptors.protocol.results import InterceptorResult, MutationResult, ValidationResult, same_json


@dataclass(frozen=True, init=False)
class Call:
    """One invocation as a source receives it. `timeout_ms` is the budget the host should enforce.

    Frozen, with a hand-written `__init__` that fills `__dict__` in one step: one is built per
    invocation, and the generated frozen `__init__` (a guarded `setattr` per field) costs twice as much.
    """

    name: str
    type: str
    event: str
    phase: Phase
    payload: Any
    config: Mapping[str, Any] | None = None
    timeout_ms: float | None = None
    context: InvocationContext | None = None

    def __init__(
        self,
        name: str,
        type: str,
        event: str,
        phase: Phase,
        payload: Any,
        config: Mapping[str, Any] | None = None,
        timeout_ms: float | None = None,
        context: InvocationContext | None = None,
    ) -> None:
        fields = {
            "name": name,
            "type": type,
            "event": event,
            "phase": phase,
            "payload": payload,
            "config": config,
            "timeout_ms": timeout_ms,
            "context": context,
        }
        object.__setattr__(self, "__dict__", fields)

    @classmethod
    def for_params(cls, params: InvokeParams, type: str) -> Call:
        """The call an `interceptor/invoke` request asks for, for an interceptor declared as `type`."""
        return cls(
            name=params.name,
            type=type,
            event=params.event,
            phase=params.phase,
            payload=params.payload,
            config=params.config,
            timeout_ms=params.timeout_ms,
            context=params.context,
        )


#: A local source's invocation of one interceptor at one point, prepared once per plan (see `Source`):
#: called with the payload, the interceptor's config and the context, it answers as `Source.invoke` does.
Runner = Callable[[Any, Mapping[str, Any] | None, InvocationContext | None], Awaitable[InterceptorResult]]


class Source(Protocol):
    """Where interceptors run: an in-process host or a remote MCP host connection.

    A source may set `concurrent = False` to say its invocations never suspend (in-process coroutines
    with no `await` that can yield, as `InterceptorHost.concurrent` tells), so parallel invocation gains
    nothing: the executor then runs its validators one after another, and a run of such sources alone
    (`local = True`, no timeout of their own) without a cancel scope, which could never fire in it.

    `call.payload` is the chain's own object, shared with the validators of its pass and the caller, and
    not copied for a source of your own (an `InterceptorHost` copies it for its handlers): a source must
    not change it in place; a mutation answers with a new payload.

    A local source may also offer `prepare(name, event, phase) -> Runner | None`: the invocation of an
    interceptor whose handler never suspends, looked up once per plan. A plan whose every step has one
    runs in one loop (`_StillPlan`); None leaves that step to `invoke`.
    """

    async def invoke(self, call: Call) -> InterceptorResult:
        """Return the parsed, stamped result, or raise (an `InterceptorsError` carries its code)."""
        ...


@dataclass
class ChainResult:
    """The outcome of one chain execution (R67). `final_payload` is set only on success."""

    status: ChainStatus
    event: str
    phase: Phase
    direction: Direction
    final_payload: Any
    results: list[InterceptorResult]
    failures: list[InvocationFailure]
    validation_summary: ValidationSummary
    aborted_at: AbortedAt | None
    total_duration_ms: float
    plan: Plan = field(repr=False)

    @property
    def allowed(self) -> bool:
        return self.status == "success"

    def to_wire(self) -> dict[str, Any]:
        """The camelCase `ChainExecutionResult` body (for logs and `interceptor/executeChain`)."""
        return ChainExecutionResult(
            status=self.status,
            event=self.event,
            phase=self.phase,
            results=tuple(result.to_wire() for result in self.results),
            final_payload=self.final_payload,
            validation_summary=self.validation_summary,
            total_duration_ms=self.total_duration_ms,
            aborted_at=self.aborted_at,
            failures=tuple(self.failures),
        ).to_wire()


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
    still = _still_plan(plan, sources)
    # A still run opens no cancel scope, so its deadline need not be on the loop's clock: it is on the
    # clock the run times its invocations with anyway (finding the loop's costs more than all its reads).
    clock = time.perf_counter if still is not None else _clock()
    deadline = clock() + timeout_ms / 1000 if timeout_ms is not None else None
    handover = None
    if still is not None:
        ran = await still.run(payload, config or {}, context, deadline, severity_rule)
        if isinstance(ran, _Handover):
            handover = ran
        else:  # nothing blocked, failed or was malformed
            final_payload, results, findings = ran
            # Positional: eleven keyword arguments cost the call over twice as much (once per message).
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
        await handover.replay(run, invoker)
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
    )


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
#: costs more than all of a run's clock reads.
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


@dataclass(frozen=True, slots=True)
class _StillStep:
    name: str
    run: Runner
    mutates: bool
    #: Active: a mutator's change is applied, a validator's verdict may block (an audit one is recorded as such).
    judges: bool


@dataclass(frozen=True, slots=True)
class _StillPlan:
    """A plan whose every step is an in-process handler that never suspends, each with its prepared runner.

    `run` takes the common path in one loop: invoke each step in plan order and apply what cannot
    change the decision (a mutation applied, a verdict that does not block). At the first outcome
    that needs the spec's tables (a failure, a block, an audit mutator, a malformed or late result) it
    hands the outcomes so far to a `ChainRun`, which replays them and finishes the run: no interceptor
    is invoked twice, and every decision is still `ChainRun`'s.
    """

    sources: Mapping[str, Source]
    #: Every step, in plan order.
    steps: tuple[_StillStep, ...]
    #: Some validator runs in audit mode (its results are recorded marked as such).
    audits: bool

    async def run(
        self,
        payload: Any,
        config: Mapping[str, Mapping[str, Any]],
        context: InvocationContext | None,
        deadline: float | None,
        rule: SeverityRule,
    ) -> tuple[Any, list[InterceptorResult], bool] | _Handover:
        """`(final payload, results, whether a verdict has findings)` of a run that took the common path
        throughout, else its handover. `deadline` is on `time.perf_counter`'s clock."""
        current = payload
        answers: list[InterceptorResult] = []
        findings = False  # whether the validation summary counts anything (`planning.summary_of`)
        # Validators of a pass all see its input: with mutations applied in turn, plan order is all it takes.
        # One clock read between two invocations: the end of one is the start of the next.
        now = time.perf_counter()
        for item in self.steps:
            if deadline is not None and now > deadline:  # nothing starts past the deadline (R60)
                return _Handover(answers, DEADLINE)
            started = now
            result: Any
            try:
                result = await item.run(current, config.get(item.name), context)
            except Exception as exc:  # never a cancellation
                result = exc
            now = time.perf_counter()
            if deadline is not None and now > deadline:  # a handler that never awaits finished late
                return _Handover(answers, DEADLINE)
            # A result's fields are read from its `__dict__`: each attribute of a pydantic model goes through
            # its class's `__getattr__` hook, several times the cost of a dict lookup.
            if item.mutates:
                if not item.judges or type(result) is not MutationResult:  # an audit mutator: a shadow (R50)
                    return _Handover(answers, _outcome(result, started, item.name, deadline is not None))
                fields = result.__dict__
                changed = fields["payload"]
                if fields["duration_ms"] is None or not (
                    fields["modified"] or changed is current or same_json(changed, current)
                ):
                    return _Handover(answers, _outcome(result, started, item.name, deadline is not None))
                if fields["modified"]:
                    current = changed  # R37: the next step sees it
            else:
                verdict = result.__dict__ if type(result) is ValidationResult else None
                if (
                    verdict is None
                    or verdict["duration_ms"] is None
                    or (item.judges and not verdict["valid"] and is_blocking_verdict(result, rule))
                ):
                    return _Handover(answers, _outcome(result, started, item.name, deadline is not None))
                findings = (
                    findings or not verdict["valid"] or bool(verdict["messages"]) or verdict["severity"] is not None
                )
            answers.append(result)
        if not self.audits:
            return current, answers, findings
        marked = [
            answer if item.judges else answer.model_copy(update={"mode": "audit"})
            for item, answer in zip(self.steps, answers, strict=True)
        ]
        return current, marked, findings


def _outcome(answer: Any, started: float, name: str, chain_bound: bool) -> Outcome:
    """The outcome of an invocation that answered `answer` (or raised it), as `_Invoker.invoke` makes it."""
    if isinstance(answer, Exception):
        return _failure(answer, chain_bound, None)
    try:
        return Outcome(_timed(answer, started, name))
    except Exception as exc:  # not a result at all (`_attempt` makes the same failure of it)
        return _failure(exc, chain_bound, None)


@dataclass(frozen=True, slots=True)
class _Handover:
    """Where a `_StillPlan` run left the common path: the results of the steps before, then one outcome."""

    answers: list[InterceptorResult]
    outcome: Outcome

    async def replay(self, run: ChainRun, invoker: _Invoker) -> None:
        """Record every outcome so far into `run`, invoking the rest of the batch where it stopped."""
        done = iter(self.answers)
        pending = len(self.answers)
        while (batch := run.next_batch()) is not None:
            if pending >= len(batch.steps):
                run.record(batch, [Outcome(next(done)) for _ in batch.steps])
                pending -= len(batch.steps)
                continue
            outcomes = [Outcome(next(done)) for _ in range(pending)]
            outcomes.append(self.outcome)
            snapshot = run.snapshot(batch)
            for step in batch.steps[len(outcomes) :]:
                outcomes.append(await invoker.invoke(step, snapshot))
            run.record(batch, outcomes)
            return


def _still_plan(plan: Plan, sources: Mapping[str, Source]) -> _StillPlan | None:
    """`plan`'s `_StillPlan` for `sources`, derived once (kept on the plan), or None when some step has
    no prepared runner or a timeout of its own."""
    cached = plan.prepared
    if cached is not None and cached[0] is sources:
        return cached[1]  # type: ignore[no-any-return]
    still = None if plan.timed else _derive_still_plan(plan, sources)
    plan.prepare_with((sources, still))
    return still


def _derive_still_plan(plan: Plan, sources: Mapping[str, Source]) -> _StillPlan | None:
    items = []
    for step in plan.steps:
        prepare = getattr(sources.get(step.source), "prepare", None)
        runner = prepare(step.name, plan.event, plan.phase) if prepare is not None and step.type != "sink" else None
        if runner is None:
            return None
        items.append(_StillStep(step.name, runner, step.type == "mutation", step.active))
    audits = any(step.type == "validation" and not step.active for step in plan.steps)
    return _StillPlan(sources, tuple(items), audits)


#: The outcome of an invocation the chain deadline cut short or never started.
DEADLINE = Outcome(code=TIMEOUT_G4, reason="chain deadline exceeded", timeout=True, deadline=True)


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
        async handlers): then they run one after another, which is cheaper than a task group.
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
                answer = Outcome(_timed(await source.invoke(call), started, name))
            except Exception as exc:  # never a cancellation
                answer = _failure(exc, self.deadline is not None, None)
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
            answer = await _attempt(source, call, chain_bound, None)
            return DEADLINE if chain_bound and self._passed() else answer
        outcome = None
        with anyio.move_on_after(own) as scope:
            outcome = await _attempt(source, call, False, scope)
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


async def _attempt(source: Source, call: Call, chain_bound: bool, scope: anyio.CancelScope | None) -> Outcome:
    """One invocation; every exception (never a cancellation) becomes a failure outcome."""
    started = time.perf_counter()
    try:
        return Outcome(_timed(await source.invoke(call), started, call.name))
    except Exception as exc:
        return _failure(exc, chain_bound, scope)


def _timed(result: InterceptorResult, started: float, name: str) -> InterceptorResult:
    """`result` with `durationMs`, which the aggregate requires (R67): measured here when a host omits it.

    A source that answers with anything but a result (None, a dict, a bool) broke the `Source` contract:
    that is a malformed result, an invocation failure routed by mode/failOpen (R58), never a crash.
    """
    if not isinstance(result, InterceptorResult):
        raise MalformedResultError(name, f"the source returned {type(result).__name__}, not an interceptor result")
    if getattr(result, "duration_ms", 0) is not None:
        return result
    return result.model_copy(update={"duration_ms": (time.perf_counter() - started) * 1000})


def _failure(exc: Exception, chain_bound: bool, scope: anyio.CancelScope | None) -> Outcome:
    """The outcome of an invocation that raised: a crashing source is a failure, never a verdict."""
    if scope is not None and scope.cancel_called:  # our deadline fired and the source turned it into an error
        return Outcome(code=TIMEOUT_G4, reason="timeout", timeout=True, deadline=chain_bound)
    if isinstance(exc, InterceptorsError):
        timed_out = is_timeout_error(exc.code, exc.data)
        reason = str(exc.data.get("reason") or exc.message)
        return Outcome(code=exc.code, reason=reason, timeout=timed_out, deadline=timed_out and chain_bound)
    return Outcome(code=-32603, reason=f"{type(exc).__name__}: {exc}")
