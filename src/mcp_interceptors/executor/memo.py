"""A chain run's memo: what an interceptor derived from a payload (its JSON text, a scan's verdict), kept for the
run's other interceptors, and notes a plan keeps from one run to the next. `run.execute_plan` opens one per run.

Entries are keyed by the payload object: a source never changes a payload in place (`Source`; a host that
might copies it first, `copy_payloads`), so a mutation is a new object with entries of its own. Each entry holds
its payload, so no other object can take its id during the run. The memo is handed down as a context variable:
the validators of a parallel pass (tasks, worker threads) share it, and only write values any of them would
compute alike, so whichever writes first, the others read the same value.
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from typing import Any

__all__ = ["RunMemo", "close_memo", "memo_for", "open_memo", "plan_notes"]


class RunMemo(dict[int, tuple[Any, dict[Any, Any]]]):
    """The memo of one chain run: by payload id, the payload and its entries; and its plan's notes."""

    __slots__ = ("notes",)
    #: Shared by every run of one plan (concurrent ones too): hints only, never a verdict.
    notes: dict[str, Any]


_CURRENT: ContextVar[RunMemo | None] = ContextVar("mcp_interceptors_run_memo", default=None)


def open_memo(notes: dict[str, Any]) -> Token[RunMemo | None]:
    """Make a new memo, with the plan's `notes`, the current run's until `close_memo` (a `finally` of the run)."""
    memo = RunMemo()
    memo.notes = notes
    return _CURRENT.set(memo)


def close_memo(token: Token[RunMemo | None]) -> None:
    _CURRENT.reset(token)


def memo_for(payload: Any) -> dict[Any, Any] | None:
    """The current chain run's entries for `payload` (the object itself, not an equal one), or None outside
    a run (a host invoked on its own)."""
    memo = _CURRENT.get()
    if memo is None:
        return None
    held = memo.get(id(payload))
    if held is None or held[0] is not payload:
        held = memo[id(payload)] = (payload, {})
    return held[1]


def plan_notes() -> dict[str, Any] | None:
    """The notes of the current run's plan, or None outside a run."""
    memo = _CURRENT.get()
    return None if memo is None else memo.notes
