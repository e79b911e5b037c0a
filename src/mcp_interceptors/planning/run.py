"""PURE: the spec's decision tables (§5.3-§5.5, §5.10) and `ChainRun`, the state machine that applies them.

`ChainRun` hands the executor one batch at a time and records the outcomes through the tables: these
functions are the only place mutation outcomes, validator verdicts, severity and failures are decided, for
the executor's common path (`executor/still.py`) as for the full run. Nothing here awaits, logs or reads the clock.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from mcp_interceptors.planning.plan import Batch, Plan, Step
from mcp_interceptors.planning.policy import Policy
from mcp_interceptors.protocol.chain import AbortedAt, AbortType, ChainStatus, InvocationFailure, ValidationSummary
from mcp_interceptors.protocol.escalation import Escalation, escalation_of
from mcp_interceptors.protocol.results import (
    InterceptorResult,
    MutationResult,
    SinkResult,
    ValidationResult,
    message_severities,
    same_json,
)

SeverityRule = Literal["g5", "py"]


@functools.lru_cache(maxsize=256)
def summary_for(errors: int, warnings: int, infos: int) -> ValidationSummary:
    """The (immutable, so shared) summary for these counts; most runs end with the same few."""
    return ValidationSummary(errors=errors, warnings=warnings, infos=infos)


NO_FINDINGS = ValidationSummary()
#: Where a message severity is counted in the summary; any other severity counts as an error (§5.10).
_SUMMARY_SLOT = {"error": 0, "warn": 1, "info": 2}


def is_blocking_verdict(result: ValidationResult, rule: SeverityRule = "g5") -> bool:
    """§5.5 for a successful invocation of an active validator.

    `valid: true` never blocks (R48). `valid: false` blocks unless the severity is `warn` or `info`
    (R44-R47). Rule `py` differs only when severity is omitted: then messages decide, if any.
    """
    if result.valid:
        return False
    severity = result.severity
    if severity is None and rule == "py" and result.messages:
        return any(message.severity == "error" for message in result.messages)
    return severity not in ("warn", "info")


def failure_blocks(policy: Policy) -> bool:
    """§5.5 and §1.8 for an invocation failure: only active and fail-closed blocks (R51-R53)."""
    return policy.mode == "active" and not policy.fail_open


def has_findings(result: ValidationResult) -> bool:
    """Whether a verdict counts in the validation summary (§5.10): anything but a bare `valid: true`."""
    return not result.valid or bool(result.messages) or result.severity is not None


def summary_of(results: Iterable[InterceptorResult]) -> ValidationSummary:
    """The validation summary of a run's results (§5.10)."""
    counts = [0, 0, 0]  # errors, warnings, infos
    for result in results:
        if not isinstance(result, ValidationResult) or not has_findings(result):
            continue
        for severity in message_severities(result):
            counts[_SUMMARY_SLOT.get(severity, 0)] += 1
    return summary_for(*counts) if any(counts) else NO_FINDINGS


def mutation_problem(result: InterceptorResult, seen: Any) -> str | None:
    """Why a mutator's `result` is malformed against the payload it was given (`seen`), else None (§5.4):
    it must be a mutation result, and one saying `modified: false` must give its input back unchanged."""
    if not isinstance(result, MutationResult):
        return f"expected a mutation result, got type {result.type!r}"
    if not result.modified and not same_json(result.payload, seen):
        return "modified is false but the payload differs from the input"
    return None


def as_audit(result: InterceptorResult) -> InterceptorResult:
    """The result of an interceptor run in audit mode, as recorded: marked so, never applied or blocking (R50)."""
    return result.model_copy(update={"mode": "audit"})


# --------------------------------------------------------------------------- the run (§5.3-§5.11)


class Outcome(NamedTuple):
    """What one invocation produced: a parsed result, or a failure with its code and reason.

    Immutable like the frozen dataclasses here, but a tuple: one is built per invocation, and a
    tuple is built several times faster than a frozen dataclass (`bench/chain_overhead.py`).
    """

    result: InterceptorResult | None = None
    code: int = 0
    reason: str = ""
    timeout: bool = False
    #: Cut short (or never started) because the whole-chain deadline passed.
    deadline: bool = False

    @property
    def failed(self) -> bool:
        return self.result is None


class Escalated(NamedTuple):
    """An active validator's verdict that asks a person's approval instead of blocking outright."""

    interceptor: str
    escalation: Escalation


@dataclass
class RunResult:
    status: ChainStatus
    final_payload: Any
    results: list[InterceptorResult]
    failures: list[InvocationFailure]
    validation_summary: ValidationSummary
    aborted_at: AbortedAt | None
    #: Blocked only by these escalations: a person's yes to every one lets `pending_payload` through.
    escalations: tuple[Escalated, ...] = ()
    pending_payload: Any = None

    @property
    def allowed(self) -> bool:
        return self.status == "success"


def is_lifted(escalations: Sequence[Escalated], approved: Iterable[str]) -> bool:
    """Whether a run blocked only by `escalations` may go on: a person approved each escalating interceptor
    (named in `approved`). A run with none is not blocked by escalations, so approval lifts nothing."""
    names = set(approved)
    return bool(escalations) and all(item.interceptor in names for item in escalations)


@dataclass
class ChainRun:
    """One execution of a plan: yields batches in the required order and applies the tables.

    A run that blocked is final: later batches are only audit observations, and the committed
    payload is withheld (atomic abort, R55).
    """

    plan: Plan
    payload: Any
    severity_rule: SeverityRule = "g5"
    deadline_always_blocks: bool = False
    _current: Any = field(init=False)
    _pass_input: Any = field(init=False)
    _queue: list[tuple[int, Batch]] = field(init=False)
    _pass_index: int = field(init=False, default=-1)
    _blocked_pass: int = field(init=False, default=-1)
    _results: list[InterceptorResult] = field(init=False, default_factory=list)
    _failures: list[InvocationFailure] = field(init=False, default_factory=list)
    _status: ChainStatus = field(init=False, default="success")
    _aborted_at: AbortedAt | None = field(init=False, default=None)
    _escalations: list[Escalated] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self._current = self.payload
        self._pass_input = self.payload
        self._queue = list(reversed(self.plan.batches))  # pop() from the end

    @property
    def blocked(self) -> bool:
        return self._status != "success"

    def next_batch(self) -> Batch | None:
        """The next batch to invoke, or None when the run is complete."""
        while self._queue:
            index, batch = self._queue.pop()
            if not self.blocked:
                if index != self._pass_index:
                    self._pass_index = index
                    self._pass_input = self._current
                return batch
            if batch.kind == "sink" or index == self._blocked_pass:
                continue  # the aborted pass stops; sinks run only when nothing blocked (§5.12)
            observers = tuple(step for step in batch.steps if not step.active)
            if observers:
                return Batch(batch.kind, observers, observe=True)  # gated pass: audit only (§5.6)
        return None

    def snapshot(self, batch: Batch) -> Any:
        """The payload a batch must see: observers get the pass input, never discarded changes."""
        return self._pass_input if batch.observe else self._current

    def record(self, batch: Batch, outcomes: Sequence[Outcome]) -> None:
        """Apply the spec's tables to the outcomes of `batch`, given in the batch's step order."""
        for step, outcome in zip(batch.steps, outcomes, strict=True):
            if batch.kind == "mutation":
                self._record_mutation(step, outcome, batch.observe)
            elif batch.kind == "validation":
                self._record_validation(step, outcome, batch.observe)
            else:
                self._record_sink(step, outcome)

    def result(self) -> RunResult:
        """The run's result. One that nothing blocked but escalations did is blocked, and says by which: its
        payload is withheld as `pending_payload`, for the invoker that gets a person's approval of them."""
        summary = summary_of(self._results)
        if self._escalations and not self.blocked:
            first = self._escalations[0]
            reason = f"validation failed (approval required): {first.escalation.message}"
            aborted_at = AbortedAt(interceptor=first.interceptor, reason=reason, type="validation")
            escalations, pending = tuple(self._escalations), self._current
            results, failures = self._results, self._failures
            return RunResult("validation_failed", None, results, failures, summary, aborted_at, escalations, pending)
        return RunResult(
            self._status,
            None if self.blocked else self._current,
            self._results,
            self._failures,
            summary,
            self._aborted_at,
        )

    # ---- internals

    def _record_mutation(self, step: Step, outcome: Outcome, observe: bool) -> None:
        result = outcome.result
        if result is not None:
            problem = mutation_problem(result, self._pass_input if observe else self._current)
            if problem is None and isinstance(result, MutationResult):
                if step.active and not observe:
                    if result.modified:
                        self._current = result.payload  # R37
                    self._results.append(result)
                else:
                    self._results.append(as_audit(result))  # shadow, never applied (R50)
                return
            outcome = Outcome(code=-32603, reason=problem or "malformed mutation result")
        self._record_failure(step, outcome, observe, "mutation_failed", "mutation")

    def _record_validation(self, step: Step, outcome: Outcome, observe: bool) -> None:
        result = outcome.result
        if result is not None and not isinstance(result, ValidationResult):
            outcome = Outcome(code=-32603, reason=f"expected a validation result, got type {result.type!r}")
            result = None
        if isinstance(result, ValidationResult):
            audit = observe or not step.active
            self._results.append(as_audit(result) if audit else result)
            if not audit and not self.blocked and is_blocking_verdict(result, self.severity_rule):
                escalation = escalation_of(result)
                if escalation is not None:  # blocks unless a person approves; the run goes on meanwhile
                    self._escalations.append(Escalated(step.name, escalation))
                    return
                first = result.messages[0].message if result.messages else None
                reason = f"validation failed ({result.severity or 'error'})" + (f": {first}" if first else "")
                self._block(AbortedAt(interceptor=step.name, reason=reason, type="validation"), "validation_failed")
            return
        self._record_failure(step, outcome, observe, "validation_failed", "validation")

    def _record_sink(self, step: Step, outcome: Outcome) -> None:
        if isinstance(outcome.result, SinkResult):
            self._results.append(outcome.result)
        else:  # a crashed or wrong-typed sink never blocks (§5.12)
            self._results.append(SinkResult(interceptor=step.name, phase=self.plan.phase, recorded=False))

    def _record_failure(
        self, step: Step, outcome: Outcome, observe: bool, status: ChainStatus, kind: AbortType
    ) -> None:
        self._failures.append(
            InvocationFailure(
                interceptor=step.name,
                phase=self.plan.phase,
                code=outcome.code,
                reason=outcome.reason,
                timeout=outcome.timeout or outcome.deadline,
                mode=step.policy.mode,
                fail_open=step.policy.fail_open,
            )
        )
        if observe or self.blocked:
            return
        if outcome.deadline and (self.deadline_always_blocks or failure_blocks(step.policy)):
            self._block(AbortedAt(interceptor=step.name, reason="chain deadline exceeded", type="timeout"), "timeout")
        elif failure_blocks(step.policy):
            reason = "timeout" if outcome.timeout else f"invocation failed: {outcome.reason}"
            self._block(AbortedAt(interceptor=step.name, reason=reason, type=kind), status)

    def _block(self, aborted_at: AbortedAt, status: ChainStatus) -> None:
        self._status = status
        self._aborted_at = aborted_at
        self._blocked_pass = self._pass_index
