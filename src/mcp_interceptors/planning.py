"""The pure half of the chain (spec §5): direction, selection, policy, ordering, and the decision tables.

`plan_for` turns descriptors plus local policy into a frozen `Plan`; `ChainRun` is a state machine
that hands the executor one batch at a time and applies the spec's tables to the outcomes. Nothing
here awaits, logs or reads the clock, so plans are deterministic (R36) and testable as data.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

from mcp_interceptors.protocol._base import INT32_MAX, INT32_MIN
from mcp_interceptors.protocol.chain import AbortedAt, AbortType, ChainStatus, InvocationFailure, ValidationSummary
from mcp_interceptors.protocol.descriptors import (
    HookEntry,
    InterceptorDescriptor,
    Mode,
    PhasePriority,
    PriorityHint,
    resolve_priority,
    unknown_priority_keys,
)
from mcp_interceptors.protocol.errors import (
    ChainParamsError,
    WideningOverrideError,
    pattern_event_error,
    unknown_interceptors_error,
)
from mcp_interceptors.protocol.events import (
    PHASES,
    Direction,
    Phase,
    Role,
    initiator_for,
    is_pattern,
    pattern_covers,
)
from mcp_interceptors.protocol.invoke import is_timeout_ms
from mcp_interceptors.protocol.results import (
    InterceptorResult,
    MutationResult,
    SinkResult,
    ValidationResult,
    message_severities,
    same_json,
)

SeverityRule = Literal["g5", "py"]
#: Sinks are fire-and-forget observers; without their own timeout they get this short one (§5.12).
DEFAULT_SINK_TIMEOUT_MS = 500.0
BatchKind = Literal["mutation", "validation", "sink"]


# --------------------------------------------------------------------------- direction (§5.1)


def direction_for(role: Role, event: str, phase: Phase) -> Direction:
    """The pass order for an invoker in `role` at `(event, phase)`, from who initiates the event (R40).

    A client sends requests of client-initiated events and receives their responses; the roles
    swap for server-initiated events (sampling, elicitation, roots). Custom events and
    `llm/completion` are initiated by the invoker itself, whatever its role.
    """
    initiator = initiator_for(event)
    sends_request = initiator == "invoker" or initiator == role
    if phase == "request":
        return "sending" if sends_request else "receiving"
    return "receiving" if sends_request else "sending"


# --------------------------------------------------------------------------- policy (§5.2 step 3)


@dataclass(frozen=True, slots=True)
class Overrides:
    """Invoker-local policy for one interceptor (PR #24); never sent on the wire."""

    mode: Mode | None = None
    fail_open: bool | None = None
    priority: PriorityHint | None = None
    timeout_ms: float | None = None
    hooks: tuple[HookEntry, ...] | None = None

    def __post_init__(self) -> None:
        # Local policy fails closed on a typo: a misspelt mode must not silently make an interceptor audit-only.
        if self.mode not in (None, "active", "audit"):
            raise ValueError(f"override mode must be 'active' or 'audit', got {self.mode!r}")
        if self.fail_open is not None and not isinstance(self.fail_open, bool):
            raise ValueError(f"override failOpen must be true or false, got {self.fail_open!r}")
        timeout = self.timeout_ms
        if timeout is not None and not is_timeout_ms(timeout):
            raise ValueError(f"override timeoutMs must be a finite number of milliseconds > 0, got {timeout!r}")
        priority = self.priority
        if priority is not None and (
            isinstance(priority, bool)
            or not isinstance(priority, int | PhasePriority)
            or (isinstance(priority, int) and not INT32_MIN <= priority <= INT32_MAX)
        ):
            raise ValueError(f"override priority must be a 32-bit integer or {{request?, response?}}, got {priority!r}")

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> Overrides:
        """Build from a camelCase or snake_case mapping; `phase: both` in hooks is accepted as sugar.

        Unknown keys and ill-typed values raise `ValueError` naming them (local config fails closed).
        """
        unknown = sorted(set(raw) - _OVERRIDE_KEYS)
        if unknown:
            raise ValueError(f"unknown override key(s) {unknown}; use {sorted(_OVERRIDE_KEYS)}")
        hooks_raw = raw.get("hooks")
        hooks = None
        if hooks_raw is not None:
            probe = InterceptorDescriptor.model_validate({"name": "-", "type": "validation", "hooks": hooks_raw})
            hooks = probe.hooks
        priority = raw.get("priority", raw.get("priorityHint", raw.get("priority_hint")))
        if isinstance(priority, Mapping):
            unknown_keys = unknown_priority_keys(priority)
            if unknown_keys:
                raise ValueError(f"override priority keys must be 'request' and/or 'response', got {unknown_keys}")
            probe = InterceptorDescriptor.model_validate(
                {"name": "-", "type": "mutation", "hooks": [], "priorityHint": dict(priority)}
            )
            priority = probe.priority_hint
        mode = raw.get("mode")
        return cls(
            mode="active" if mode == "enforce" else mode,
            fail_open=raw.get("failOpen", raw.get("fail_open")),
            priority=priority,
            timeout_ms=raw.get("timeoutMs", raw.get("timeout_ms")),
            hooks=hooks,
        )


_OVERRIDE_KEYS = frozenset(
    {"mode", "failOpen", "fail_open", "priority", "priorityHint", "priority_hint", "timeoutMs", "timeout_ms", "hooks"}
)


def check_overrides(descriptor: InterceptorDescriptor, overrides: Overrides | None) -> None:
    """Reject a hook override that widens what the interceptor advertised (R62)."""
    if overrides is None or overrides.hooks is None:
        return
    for entry in overrides.hooks:
        declared = [d for d in descriptor.hooks if d.phase == entry.phase]
        for event in entry.events:
            if not any(pattern_covers(pattern, event) for d in declared for pattern in d.events):
                raise WideningOverrideError(
                    f"Override for {descriptor.name!r} adds ({event}, {entry.phase}), which it does not advertise; "
                    "hook overrides may only narrow the advertised hooks",
                    data={"interceptor": descriptor.name, "event": event, "phase": entry.phase},
                )


@dataclass(frozen=True, slots=True)
class Policy:
    """Effective policy for one interceptor at one phase: override, else author default, else spec default."""

    mode: Mode
    fail_open: bool
    priority: int
    timeout_ms: float | None


def policy_for(descriptor: InterceptorDescriptor, overrides: Overrides | None, phase: Phase) -> Policy:
    o = overrides or Overrides()
    return Policy(
        mode=o.mode if o.mode is not None else descriptor.mode,
        fail_open=o.fail_open if o.fail_open is not None else descriptor.fail_open,
        priority=resolve_priority(descriptor.priority_hint, phase, o.priority),
        timeout_ms=o.timeout_ms,
    )


# --------------------------------------------------------------------------- plan (§5.2)


@dataclass(frozen=True, slots=True)
class Entry:
    """A descriptor as one source advertised it, with the invoker's policy for it.

    `source` names the connection every invoke is routed to (R65); `host_order` is the configured
    host order, the last tie-breaker for mutators (R35).
    """

    descriptor: InterceptorDescriptor
    source: str
    host_order: int
    overrides: Overrides | None = None

    @property
    def name(self) -> str:
        return self.descriptor.name

    @property
    def hooks(self) -> tuple[HookEntry, ...]:
        if self.overrides is not None and self.overrides.hooks is not None:
            return self.overrides.hooks
        return self.descriptor.hooks

    def effective(self) -> InterceptorDescriptor:
        """The descriptor as this invoker runs it: its overrides' hooks, mode, failOpen and priorityHint
        applied (an invoker that is itself a host lists this; overrides are never sent to the host)."""
        o = self.overrides
        if o is None:
            return self.descriptor
        changes = {"hooks": o.hooks, "mode": o.mode, "fail_open": o.fail_open, "priority_hint": o.priority}
        update = {key: value for key, value in changes.items() if value is not None}
        return self.descriptor.model_copy(update=update) if update else self.descriptor


@dataclass(frozen=True, slots=True)
class Step:
    """One selected interceptor in a plan."""

    name: str
    type: Literal["validation", "mutation", "sink"]
    source: str
    policy: Policy

    @property
    def active(self) -> bool:
        return self.policy.mode == "active"


@dataclass(frozen=True, slots=True)
class Skip:
    name: str
    source: str
    reason: str


@dataclass(frozen=True, slots=True)
class Plan:
    """The execution plan for one lifecycle event at one interception point."""

    event: str
    phase: Phase
    direction: Direction
    mutators: tuple[Step, ...]
    validators: tuple[Step, ...]
    sinks: tuple[Step, ...] = ()
    skipped: tuple[Skip, ...] = ()
    #: `(pass index, batch)` in invocation order, derived once so a run never rebuilds it.
    batches: tuple[tuple[int, Batch], ...] = field(init=False, repr=False, compare=False)
    #: The sources the steps are routed to, each once, in step order (derived).
    sources: tuple[str, ...] = field(init=False, repr=False, compare=False)
    #: Whether some step has a timeout of its own (derived).
    timed: bool = field(init=False, repr=False, compare=False)
    #: What the executor derived once to run this plan on a mapping of sources (`prepare_with`).
    prepared: Any = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        batches: list[tuple[int, Batch]] = []
        for index, (kind, steps) in enumerate(self.passes):
            if kind == "mutation":
                batches.extend((index, Batch("mutation", (step,))) for step in steps)  # one mutator at a time
            elif steps:
                batches.append((index, Batch(kind, steps)))
        object.__setattr__(self, "batches", tuple(batches))
        steps = self.steps
        object.__setattr__(self, "sources", tuple(dict.fromkeys(step.source for step in steps)))
        object.__setattr__(self, "timed", any(step.policy.timeout_ms is not None for step in steps))

    def prepare_with(self, prepared: Any) -> None:
        """Keep what the executor derived to run this plan (the plan's own fields never change)."""
        object.__setattr__(self, "prepared", prepared)

    @property
    def passes(self) -> tuple[tuple[BatchKind, tuple[Step, ...]], ...]:
        """Passes in the order the direction requires (R38/R39), sinks last."""
        if self.direction == "sending":
            return (("mutation", self.mutators), ("validation", self.validators), ("sink", self.sinks))
        return (("validation", self.validators), ("mutation", self.mutators), ("sink", self.sinks))

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(step for _, steps in self.passes for step in steps)

    def describe(self) -> list[dict[str, Any]]:
        """Rows for `gateway --check` and for tests: one per step, in invocation order."""
        return [
            {
                "interceptor": step.name,
                "source": step.source,
                "type": step.type,
                "mode": step.policy.mode,
                "failOpen": step.policy.fail_open,
                "priority": step.policy.priority if step.type == "mutation" else None,
                "timeoutMs": step.policy.timeout_ms,
            }
            for step in self.steps
        ]


def plan_for(
    entries: Iterable[Entry],
    event: str,
    phase: Phase,
    direction: Direction,
    *,
    protocol_version: str | None = None,
    names: Iterable[str] | None = None,
    enforce_compat: bool = True,
    sinks_enabled: bool = False,
) -> Plan:
    """Select, resolve policy, partition and order (§5.2). Pure: same inputs, same plan (R36).

    Fails closed with `ChainParamsError` (-32602) when `event` is a pattern rather than one concrete
    event, when `phase` or `direction` is not one of the spec's two values, or when `names` restricts to
    interceptors no entry has: a typo must not run an empty plan (or the other pass order).
    """
    if is_pattern(event):
        raise pattern_event_error(event)
    if phase not in PHASES:  # `both` or `Request` would select no hook and let the payload through
        raise ChainParamsError(
            f"phase must be 'request' or 'response', got {phase!r}", data={"field": "phase", "phase": phase}
        )
    if direction not in ("sending", "receiving"):  # anything else ran the receiving order
        raise ChainParamsError(
            f"direction must be 'sending' or 'receiving', got {direction!r}",
            data={"field": "direction", "direction": direction},
        )
    wanted = frozenset(names) if names is not None else None
    ordered = sorted(entries, key=lambda e: e.host_order)  # stable: keeps each host's list order
    if wanted is not None and (unknown := wanted.difference(entry.name for entry in ordered)):
        raise unknown_interceptors_error(sorted(unknown))
    mutators: list[tuple[int, str, int, Step]] = []
    validators: list[Step] = []
    sinks: list[Step] = []
    skipped: list[Skip] = []
    for entry in ordered:
        d = entry.descriptor
        if not any(hook.covers(event, phase) for hook in entry.hooks):
            continue
        if wanted is not None and d.name not in wanted:
            continue
        if enforce_compat and d.compat is not None and protocol_version and not d.compat.includes(protocol_version):
            skipped.append(Skip(d.name, entry.source, f"compat excludes protocol {protocol_version}"))
            continue
        if d.type == "sink" and not sinks_enabled:
            skipped.append(Skip(d.name, entry.source, "sink interceptors are not enabled"))
            continue
        policy = policy_for(d, entry.overrides, phase)
        if d.type == "sink" and policy.timeout_ms is None:
            policy = Policy(policy.mode, policy.fail_open, policy.priority, DEFAULT_SINK_TIMEOUT_MS)
        step = Step(d.name, d.type, entry.source, policy)
        if d.type == "mutation":
            mutators.append((step.policy.priority, d.name, entry.host_order, step))
        elif d.type == "validation":
            validators.append(step)
        else:
            sinks.append(step)
    mutators.sort(key=lambda item: item[:3])  # priority, name by code point, host order (R34/R35)
    return Plan(
        event=event,
        phase=phase,
        direction=direction,
        mutators=tuple(item[3] for item in mutators),
        validators=tuple(validators),
        sinks=tuple(sinks),
        skipped=tuple(skipped),
    )


# --------------------------------------------------------------------------- decision tables (§5.3-§5.5)


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


def summary_of(results: Iterable[InterceptorResult]) -> ValidationSummary:
    """The validation summary of a run's results (§5.10)."""
    counts = [0, 0, 0]  # errors, warnings, infos
    for result in results:
        if not isinstance(result, ValidationResult):
            continue
        if result.valid and not result.messages and result.severity is None:
            continue  # a bare `valid: true` counts nothing
        for severity in message_severities(result):
            counts[_SUMMARY_SLOT.get(severity, 0)] += 1
    return summary_for(*counts) if any(counts) else NO_FINDINGS


# --------------------------------------------------------------------------- the run (§5.3-§5.11)


class Outcome(NamedTuple):
    """What one invocation produced: a parsed result, or a failure with its code and reason.

    Immutable like the frozen dataclasses here, but a tuple: one is built per invocation, and a
    tuple is built several times faster than a frozen dataclass.
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


@dataclass(frozen=True, slots=True)
class Batch:
    """Work for the executor: one mutator, or every validator (or sink) of a pass in parallel.

    `observe` marks audit-mode interceptors called after a block; they see the pass input and
    cannot change the decision (§5.6).
    """

    kind: BatchKind
    steps: tuple[Step, ...]
    observe: bool = False


@dataclass
class RunResult:
    status: ChainStatus
    final_payload: Any
    results: list[InterceptorResult]
    failures: list[InvocationFailure]
    validation_summary: ValidationSummary
    aborted_at: AbortedAt | None

    @property
    def allowed(self) -> bool:
        return self.status == "success"


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
        return RunResult(
            self._status,
            None if self.blocked else self._current,
            self._results,
            self._failures,
            summary_of(self._results),
            self._aborted_at,
        )

    # ---- internals

    def _record_mutation(self, step: Step, outcome: Outcome, observe: bool) -> None:
        result = outcome.result
        if result is not None:
            problem = self._malformed_mutation(result, observe)
            if problem is None and isinstance(result, MutationResult):
                if step.active and not observe:
                    if result.modified:
                        self._current = result.payload  # R37
                    self._results.append(result)
                else:
                    self._results.append(result.model_copy(update={"mode": "audit"}))  # shadow, never applied (R50)
                return
            outcome = Outcome(code=-32603, reason=problem or "malformed mutation result")
        self._record_failure(step, outcome, observe, "mutation_failed", "mutation")

    def _malformed_mutation(self, result: InterceptorResult, observe: bool) -> str | None:
        if not isinstance(result, MutationResult):
            return f"expected a mutation result, got type {result.type!r}"
        seen = self._pass_input if observe else self._current
        if not result.modified and not same_json(result.payload, seen):
            return "modified is false but the payload differs from the input"
        return None

    def _record_validation(self, step: Step, outcome: Outcome, observe: bool) -> None:
        result = outcome.result
        if result is not None and not isinstance(result, ValidationResult):
            outcome = Outcome(code=-32603, reason=f"expected a validation result, got type {result.type!r}")
            result = None
        if isinstance(result, ValidationResult):
            audit = observe or not step.active
            self._results.append(result.model_copy(update={"mode": "audit"}) if audit else result)
            if not audit and not self.blocked and is_blocking_verdict(result, self.severity_rule):
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
