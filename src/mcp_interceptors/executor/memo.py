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


class RunMemo:
    """The memo of one chain run: a dict of entries per payload object, and its plan's notes."""

    __slots__ = ("_by_payload", "notes")

    def __init__(self, notes: dict[str, Any]) -> None:
        self._by_payload: dict[int, tuple[Any, dict[Any, Any]]] = {}
        #: Shared by every run of one plan (concurrent ones too): hints only, never a verdict.
        self.notes = notes

    def entries(self, payload: Any) -> dict[Any, Any]:
        """This run's entries for `payload` (the object itself, not an equal one)."""
        held = self._by_payload.get(id(payload))
        if held is None or held[0] is not payload:
            held = self._by_payload[id(payload)] = (payload, {})
        return held[1]


_CURRENT: ContextVar[RunMemo | None] = ContextVar("mcp_interceptors_run_memo", default=None)


def open_memo(notes: dict[str, Any]) -> Token[RunMemo | None]:
    """Make a new memo, with the plan's `notes`, the current run's until `close_memo` (a `finally` of the run)."""
    return _CURRENT.set(RunMemo(notes))


def close_memo(token: Token[RunMemo | None]) -> None:
    _CURRENT.reset(token)


def memo_for(payload: Any) -> dict[Any, Any] | None:
    """The current chain run's entries for `payload`, or None outside a run (a host invoked on its own)."""
    memo = _CURRENT.get()
    return None if memo is None else memo.entries(payload)


def plan_notes() -> dict[str, Any] | None:
    """The notes of the current run's plan, or None outside a run."""
    memo = _CURRENT.get()
    return None if memo is None else memo.notes
