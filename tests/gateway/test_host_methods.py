"""`gateway/host_methods.py`: the context the gateway vouches for, and payloads or results too deep to send."""

from __future__ import annotations

from typing import Any

import pytest

from mcp_interceptors.gateway.host_methods import result_body, vouched_context
from mcp_interceptors.protocol.errors import InterceptorExecutionError
from mcp_interceptors.protocol.invoke import MAX_PAYLOAD_DEPTH, InvocationContext, Principal, is_too_deep
from mcp_interceptors.protocol.results import MutationResult

OWN = InvocationContext(
    principal=Principal(type="user", id="alice"),
    session_id="modern:alice",
    server="notes",
    trace_id="7",
    timestamp="t0",
)


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    "supplied",
    [
        {"principal": {"type": "user", "id": "bob"}, "sessionId": "modern:bob", "server": "mail"},
        {"principal": {"type": "service", "id": "bob"}, "session_id": "modern:bob", "Server": "mail"},
        {"sessionId": "modern:bob", "session_id": "modern:bob", "SessionId": "b", "Principal": {"type": "user"}},
    ],
)
def test_s7_principal_session_and_server_are_the_gateways_in_every_spelling(supplied: dict[str, Any]) -> None:
    wire = vouched_context(OWN, InvocationContext.model_validate(supplied)).to_wire()
    assert {k: wire.get(k) for k in ("principal", "sessionId", "server")} == {
        "principal": {"type": "user", "id": "alice"},
        "sessionId": "modern:alice",
        "server": "notes",
    }
    assert set(wire) == {"principal", "sessionId", "server", "traceId", "timestamp"}


def test_s7_correlation_fields_and_unknown_fields_pass_through() -> None:
    supplied = InvocationContext.model_validate(
        {"traceId": "t-9", "spanId": "s-1", "timestamp": "2026-09-01T10:00:00Z", "baggage": {"k": "v"}}
    )
    wire = vouched_context(OWN, supplied).to_wire()
    assert wire == {
        "principal": {"type": "user", "id": "alice"},
        "sessionId": "modern:alice",
        "server": "notes",
        "traceId": "t-9",
        "spanId": "s-1",
        "timestamp": "2026-09-01T10:00:00Z",
        "baggage": {"k": "v"},
    }
    assert vouched_context(OWN, None) is OWN


@pytest.mark.parametrize(
    ("value", "too_deep"),
    [
        ("x", False),
        (nested(MAX_PAYLOAD_DEPTH), False),
        (nested(MAX_PAYLOAD_DEPTH + 1), True),
        ({"a": [1, {"b": nested(MAX_PAYLOAD_DEPTH - 3)}]}, False),
        ({"a": [1, {"b": nested(MAX_PAYLOAD_DEPTH - 2)}]}, True),
        ([[]] * 10_000, False),
        (nested(100_000), True),  # walked without recursion
    ],
)
def test_s3_nesting_limit(value: Any, too_deep: bool) -> None:
    assert is_too_deep(value) is too_deep


def test_r24_a_mutation_result_too_deep_to_send_names_the_interceptor() -> None:
    result = MutationResult(
        interceptor="deepen", phase="response", modified=True, payload=nested(MAX_PAYLOAD_DEPTH + 1)
    )
    with pytest.raises(InterceptorExecutionError) as failed:
        result_body(result, "deepen")
    assert (failed.value.code, failed.value.data) == (
        -32603,
        {"interceptor": "deepen", "reason": "result payload is nested more than 200 levels deep"},
    )
