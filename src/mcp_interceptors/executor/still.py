"""The executor's common path: a plan whose every step is an in-process handler that never suspends runs in one
loop, with no cancel scope, no task group and no `ChainRun`, until an outcome needs the spec's tables.

Which outcomes need them is planning's to say (`mutation_problem`, `is_blocking_verdict`, `has_findings`):
this module only invokes and hands over. `bench/chain_overhead.py` (in-process chains) measures it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mcp_interceptors.executor.calls import Runner, Source
from mcp_interceptors.executor.outcomes import DEADLINE, outcome_of
from mcp_interceptors.planning import (
    ChainRun,
    Outcome,
    Plan,
    SeverityRule,
    Step,
    as_audit,
    has_findings,
    is_blocking_verdict,
    mutation_problem,
)
from mcp_interceptors.protocol.invoke import InvocationContext
from mcp_interceptors.protocol.results import InterceptorResult, MutationResult, ValidationResult

#: Invokes one step on a payload, as the full run does (`run._Invoker.invoke`).
Invoke = Callable[[Step, Any], Awaitable[Outcome]]


@dataclass(frozen=True, slots=True)
class StillStep:
    name: str
    run: Runner
    mutates: bool
    #: Active: a mutator's change is applied, a validator's verdict may block (an audit one is recorded as such).
    judges: bool


@dataclass(frozen=True, slots=True)
class StillPlan:
    """A plan whose every step is an in-process handler that never suspends, each with its prepared runner.

    `run` takes the common path in one loop: invoke each step in plan order and go on while planning says the
    outcome needs none of the spec's tables (a well-formed mutation, applied; a verdict that does not block).
    At the first outcome that does (a failure, a block, an audit mutator, a malformed or late result) it
    hands the outcomes so far to a `ChainRun`, which replays them and finishes the run: no interceptor is
    invoked twice, and every decision is planning's (`mutation_problem`, `is_blocking_verdict`, `has_findings`).
    """

    sources: Mapping[str, Source]
    #: Every step, in plan order.
    steps: tuple[StillStep, ...]
    #: Some validator runs in audit mode (its results are recorded marked as such).
    audits: bool

    async def run(
        self,
        payload: Any,
        config: Mapping[str, Mapping[str, Any]],
        context: InvocationContext | None,
        deadline: float | None,
        rule: SeverityRule,
    ) -> tuple[Any, list[InterceptorResult], bool] | Handover:
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
                return Handover(answers, DEADLINE)
            started = now
            result: Any
            try:
                result = await item.run(current, config.get(item.name), context)
            except Exception as exc:  # never a cancellation
                result = exc
            now = time.perf_counter()
            if deadline is not None and now > deadline:  # a handler that never awaits finished late
                return Handover(answers, DEADLINE)
            # Exactly the result classes, stamped with a duration (else `_timed` stamps it after the handover).
            if item.mutates:
                if (
                    not item.judges  # an audit mutator: a shadow (R50)
                    or type(result) is not MutationResult
                    or result.duration_ms is None
                    or mutation_problem(result, current) is not None
                ):
                    return Handover(answers, outcome_of(result, started, item.name, deadline is not None))
                if result.modified:
                    current = result.payload  # R37: the next step sees it
            else:
                if (
                    type(result) is not ValidationResult
                    or result.duration_ms is None
                    or (item.judges and is_blocking_verdict(result, rule))
                ):
                    return Handover(answers, outcome_of(result, started, item.name, deadline is not None))
                findings = findings or has_findings(result)
            answers.append(result)
        if not self.audits:
            return current, answers, findings
        marked = [answer if item.judges else as_audit(answer) for item, answer in zip(self.steps, answers, strict=True)]
        return current, marked, findings


@dataclass(frozen=True, slots=True)
class Handover:
    """Where a `StillPlan` run left the common path: the results of the steps before, then one outcome."""

    answers: list[InterceptorResult]
    outcome: Outcome

    async def replay(self, run: ChainRun, invoke: Invoke) -> None:
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
                outcomes.append(await invoke(step, snapshot))
            run.record(batch, outcomes)
            return


def still_plan(plan: Plan, sources: Mapping[str, Source]) -> tuple[StillPlan | None, dict[str, Any]]:
    """`plan`'s `StillPlan` for `sources` (None when some step has no prepared runner or a timeout of its own)
    and the notes its runs share (`memo.RunMemo.notes`), derived once and kept on the plan."""
    cached = plan.prepared
    if cached is not None and cached[0] is sources:
        return cached[1], cached[2]
    still = None if plan.timed else _derive_still_plan(plan, sources)
    notes: dict[str, Any] = {}
    plan.prepare_with((sources, still, notes))
    return still, notes


def _derive_still_plan(plan: Plan, sources: Mapping[str, Source]) -> StillPlan | None:
    items = []
    for step in plan.steps:
        prepare = getattr(sources.get(step.source), "prepare", None)
        runner = prepare(step.name, plan.event, plan.phase) if prepare is not None and step.type != "sink" else None
        if runner is None:
            return None
        items.append(StillStep(step.name, runner, step.type == "mutation", step.active))
    audits = any(step.type == "validation" and not step.active for step in plan.steps)
    return StillPlan(sources, tuple(items), audits)
