"""PURE: select, resolve policy, partition and order the interceptors of one event at one point into a `Plan` (§5.2).

Same inputs, same plan (R36): payload content and timing never change selection or order. A `Plan`'s
batches (one mutator at a time, every validator or sink of a pass together) are what a `run.ChainRun` hands
the executor, in the order the direction requires.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from mcp_interceptors.planning.policy import Overrides, Policy, policy_for
from mcp_interceptors.protocol.descriptors import HookEntry, InterceptorDescriptor
from mcp_interceptors.protocol.errors import ChainParamsError, pattern_event_error, unknown_interceptors_error
from mcp_interceptors.protocol.events import PHASES, Direction, Phase, is_pattern

#: Sinks are fire-and-forget observers; without their own timeout they get this short one (§5.12).
DEFAULT_SINK_TIMEOUT_MS = 500.0
BatchKind = Literal["mutation", "validation", "sink"]


@dataclass(frozen=True, slots=True)
class Batch:
    """Work for the executor: one mutator, or every validator (or sink) of a pass in parallel.

    `observe` marks audit-mode interceptors called after a block; they see the pass input and
    cannot change the decision (§5.6).
    """

    kind: BatchKind
    steps: tuple[Step, ...]
    observe: bool = False


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
