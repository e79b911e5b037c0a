"""An escalation is a `valid: false` verdict whose `info` carries, under a namespaced key, what to ask a person."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_interceptors.protocol.escalation import ESCALATION_INFO_KEY, Escalation, escalate, escalation_of
from mcp_interceptors.protocol.results import ValidationResult, parse_result


def test_an_escalation_is_a_blocking_verdict_with_its_question_in_info() -> None:
    schema = {"type": "object", "properties": {"reason": {"type": "string"}}, "required": ["reason"]}
    result = escalate("Delete repo x?", requested_schema=schema, timeout_ms=30_000, key="deletes:delete_repo")
    body = result.to_wire()
    # What an invoker that has never heard of escalations reads: an error verdict, so it blocks (fail closed).
    assert (body["valid"], body["severity"]) == (False, "error")
    assert body["messages"] == [{"message": "approval required: Delete repo x?", "severity": "error"}]
    assert body["info"] == {
        ESCALATION_INFO_KEY: {
            "message": "Delete repo x?",
            "requestedSchema": schema,
            "timeoutMs": 30_000,
            "key": "deletes:delete_repo",
            "remember": "call",
        }
    }


def test_an_escalation_survives_the_wire_from_a_remote_host() -> None:
    wire = escalate("Pay 5000?", remember="principal", remember_ms=900_000, info={"rule": "big"}).to_wire()
    parsed = parse_result(wire, interceptor="approval", type="validation", phase="request")
    assert isinstance(parsed, ValidationResult)
    escalation = escalation_of(parsed)
    assert escalation == Escalation(message="Pay 5000?", remember="principal", remember_ms=900_000)
    assert parsed.info is not None and parsed.info["rule"] == "big"


@pytest.mark.parametrize(
    "raw",
    [
        "ask someone",
        {"message": ""},
        {"message": "ok?", "timeoutMs": "5000"},
        {"message": "ok?", "timeoutMs": -1},
        {"message": "ok?", "timeoutMs": float("inf")},
        {"message": "ok?", "remember": "forever"},
        {"timeoutMs": 5000},
    ],
)
def test_a_malformed_escalation_is_none_so_the_verdict_blocks_as_written(raw: Any) -> None:
    result = ValidationResult(valid=False, severity="error", info={ESCALATION_INFO_KEY: raw})
    assert escalation_of(result) is None


def test_only_a_blocking_verdict_escalates() -> None:
    """An approval lifts a block; on a passing verdict the key means nothing."""
    raw = escalate("ok?").to_wire()["info"]
    assert escalation_of(ValidationResult(valid=True, info=raw)) is None
    assert escalation_of(ValidationResult(valid=False, severity="error")) is None
