"""A person's answer to an approval question is judged (only an accept whose content fits the schema is a
yes), the client's error names the guard and the reason, and remembered approvals expire."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_interceptors.gateway.approvals.answers import approval_error, judge
from mcp_interceptors.gateway.approvals.asking import can_elicit
from mcp_interceptors.gateway.approvals.memory import Remembered, StateApprovals
from mcp_interceptors.protocol.escalation import Escalation
from mcp_interceptors.state.memory import MemoryState

CONFIRM = {"type": "object", "properties": {"confirm": {"type": "string", "enum": ["yes"]}}, "required": ["confirm"]}
ASKED = Escalation(message="Delete it?", requested_schema=CONFIRM)


@pytest.mark.parametrize(
    ("answer", "outcome", "detail"),
    [
        ({"action": "accept", "content": {"confirm": "yes"}}, "accept", ""),
        ({"action": "decline"}, "decline", ""),
        ({"action": "cancel"}, "cancel", ""),
        ({"action": "accept", "content": {"confirm": "no"}}, "invalid", "content.confirm: 'no' is not one of ['yes']"),
        ({"action": "accept"}, "invalid", "content: 'confirm' is a required property"),
        ({"action": "accept", "content": "yes"}, "invalid", "the answer's content is not an object"),
        ({"action": "approve"}, "invalid", "the answer's action is 'approve', not accept, decline or cancel"),
        ("yes", "invalid", "the answer is not an elicitation result (an object with an action)"),
    ],
)
def test_only_an_accept_matching_the_schema_approves(answer: Any, outcome: str, detail: str) -> None:
    judged = judge(answer, ASKED)
    assert (judged.outcome, judged.detail, judged.approved) == (outcome, detail, outcome == "accept")


def test_an_accept_of_a_question_asking_nothing_approves() -> None:
    assert judge({"action": "accept"}, Escalation(message="Go?")).approved


def test_the_clients_error_names_the_guard_and_the_reason() -> None:
    error = approval_error("approval", "tools/call", judge({"action": "accept", "content": {}}, ASKED))
    assert error.error.code == -32602
    assert error.error.message == (
        "Blocked: approval answer does not match the requested schema (approval): "
        "content: 'confirm' is a required property"
    )
    assert error.error.data == {
        "interceptor": "approval",
        "reason": "invalid_answer",
        "event": "tools/call",
        "phase": "request",
        "status": "validation_failed",
        "approval": "invalid",
    }


@pytest.mark.parametrize(
    ("capabilities", "can"),
    [
        ({"elicitation": {}}, True),
        ({"elicitation": {"form": {}}}, True),
        ({"elicitation": {"form": {}, "url": {}}}, True),
        ({"elicitation": {"url": {}}}, False),
        ({"sampling": {}}, False),
        (None, False),
    ],
)
def test_form_elicitation_is_what_the_client_declared(capabilities: Any, can: bool) -> None:
    assert can_elicit(capabilities) is can


@pytest.mark.anyio
async def test_a_remembered_approval_expires_and_the_oldest_is_forgotten_first() -> None:
    now = [0.0]
    memory = StateApprovals(MemoryState(max_keys=2, clock=lambda: now[0]))
    yes = Remembered("2026-01-01T00:00:00Z", {"answer": "accept"})
    await memory.remember("a", yes, 10)
    await memory.remember("b", yes, 100)
    assert await memory.recall("a") == yes
    now[0] = 10.0
    assert await memory.recall("a") is None
    assert await memory.recall("b") == yes
    await memory.remember("c", yes, 100)
    await memory.remember("d", yes, 100)
    assert [await memory.recall(key) for key in "bcd"] == [None, yes, yes]
    with pytest.raises(ValueError, match="ttl_s must be a positive number"):
        await memory.remember("e", yes, 0)
