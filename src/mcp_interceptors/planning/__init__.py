"""The pure half of the chain (spec §5): direction, selection, policy, ordering, and the decision tables.

`plan_for` turns descriptors plus local policy into a frozen `Plan` (`plan.py`, with `policy.py`); `ChainRun`
is a state machine that hands the executor one batch at a time and applies the spec's tables to the outcomes
(`run.py`). Nothing here awaits, logs or reads the clock, so plans are deterministic (R36) and testable as data.
"""

from mcp_interceptors.planning.plan import DEFAULT_SINK_TIMEOUT_MS, Batch, BatchKind, Entry, Plan, Skip, Step, plan_for
from mcp_interceptors.planning.policy import Overrides, Policy, check_overrides, direction_for, policy_for
from mcp_interceptors.planning.run import (
    NO_FINDINGS,
    ChainRun,
    Escalated,
    Outcome,
    RunResult,
    SeverityRule,
    as_audit,
    failure_blocks,
    has_findings,
    is_blocking_verdict,
    is_lifted,
    mutation_problem,
    summary_for,
    summary_of,
)

__all__ = [
    "DEFAULT_SINK_TIMEOUT_MS",
    "NO_FINDINGS",
    "Batch",
    "BatchKind",
    "ChainRun",
    "Entry",
    "Escalated",
    "Outcome",
    "Overrides",
    "Plan",
    "Policy",
    "RunResult",
    "SeverityRule",
    "Skip",
    "Step",
    "as_audit",
    "check_overrides",
    "direction_for",
    "failure_blocks",
    "has_findings",
    "is_blocking_verdict",
    "is_lifted",
    "mutation_problem",
    "plan_for",
    "policy_for",
    "summary_for",
    "summary_of",
]
