"""What an approver gives the governor: the approvals it got, a denial to record, or a round to answer with.

Kept apart from `asking` so the governor depends on these shapes only, not on how a person is asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from mcp import MCPError

from mcp_interceptors.gateway.recording import CallRecord, Leg

#: Per escalating interceptor, the audit entry of its approval (who was asked, the answer, when).
Granted = dict[str, dict[str, Any]]


class Approver(Protocol):
    """Gets a person's approval of the escalations that blocked `leg` (a chain result with `escalations`).

    Returns the approvals, one per escalating interceptor; raises `ApprovalDenied` when one is no yes, or
    `ApprovalRound` when the answer must come in a 2026-07-28 client's retry.
    """

    async def __call__(self, leg: Leg, record: CallRecord | None) -> Granted: ...


class ApprovalDenied(Exception):
    """A person did not approve (or could not be asked): `error` is the client's, `approvals` the answers."""

    def __init__(self, error: MCPError, approvals: Mapping[str, dict[str, Any]]) -> None:
        super().__init__(error.error.message)
        self.error = error
        self.approvals = dict(approvals)


class ApprovalRound(Exception):
    """Not a failure: the call is answered with `result`, an `input_required` round asking the 2026-07-28
    client's user; its retry brings the answers (`asking.Approvals.take_round`)."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__("approval asked in an input_required round")
        self.result = result
