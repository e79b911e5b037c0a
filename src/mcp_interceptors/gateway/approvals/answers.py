"""PURE: a person's answer to an approval question, judged, and the client's error when it is no yes.

An answer is an elicitation result (`{action, content}`), whichever channel brought it. Only `accept` with
content that matches the requested schema approves; anything else denies, with a reason the client sees
in `error.data.reason` and the audit trail keeps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from mcp import MCPError

from mcp_interceptors.guards.approval import form_schema_problem
from mcp_interceptors.protocol.errors import INVALID_PARAMS
from mcp_interceptors.protocol.escalation import Escalation

__all__ = ["MESSAGES", "REASONS", "Answer", "Outcome", "approval_error", "judge", "schema_problem"]

#: How an approval question ended.
Outcome = Literal["accept", "decline", "cancel", "timeout", "invalid", "unavailable", "unreachable"]
#: The client's `error.data.reason`, per outcome.
REASONS: dict[Outcome, str] = {
    "decline": "declined",
    "cancel": "cancelled",
    "timeout": "timeout",
    "invalid": "invalid_answer",
    "unavailable": "no_elicitation",
    "unreachable": "webhook_failed",
}
#: What the client's error message says, per outcome.
MESSAGES: dict[Outcome, str] = {
    "decline": "approval declined",
    "cancel": "approval cancelled",
    "timeout": "approval timed out",
    "invalid": "approval answer does not match the requested schema",
    "unavailable": "approval cannot be asked",
    "unreachable": "approval webhook failed",
}


@dataclass(frozen=True)
class Answer:
    """How one question ended: its outcome, the content given with an accept, and why it is no yes."""

    outcome: Outcome
    content: dict[str, Any] | None = None
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def approved(self) -> bool:
        return self.outcome == "accept"


def schema_problem(schema: Any) -> str | None:
    """Why an escalation's `requestedSchema` cannot be asked in a form elicitation, or None."""
    return form_schema_problem(schema)


def judge(answer: Any, escalation: Escalation) -> Answer:
    """An elicitation result as an answer to `escalation`: an accept whose content fits its schema, or why not."""
    if not isinstance(answer, Mapping):
        return Answer("invalid", detail="the answer is not an elicitation result (an object with an action)")
    action = answer.get("action")
    if action in ("decline", "cancel"):
        return Answer(action)
    if action != "accept":
        return Answer("invalid", detail=f"the answer's action is {action!r}, not accept, decline or cancel")
    content = answer.get("content", {})
    if content is None:
        content = {}
    if not isinstance(content, Mapping):
        return Answer("invalid", detail="the answer's content is not an object")
    error = best_match(Draft202012Validator(escalation.requested_schema).iter_errors(dict(content)))
    if error is not None:
        where = "content" + "".join(f".{part}" for part in error.absolute_path)
        return Answer("invalid", dict(content), detail=f"{where}: {error.message}")
    return Answer("accept", dict(content))


def approval_error(interceptor: str, event: str, answer: Answer) -> MCPError:
    """The client's error for a call a person did not approve: -32602 naming the guard and the reason."""
    reason = REASONS.get(answer.outcome, "declined")
    message = f"Blocked: {MESSAGES.get(answer.outcome, 'approval declined')} ({interceptor})"
    if answer.detail:
        message += f": {answer.detail}"
    data: dict[str, Any] = {
        "interceptor": interceptor,
        "reason": reason,
        "event": event,
        "phase": "request",
        "status": "validation_failed",
        "approval": answer.outcome,
    }
    return MCPError(INVALID_PARAMS, message, data)
