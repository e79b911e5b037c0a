"""`InvocationContext` wire rules that are easy to miss."""

from __future__ import annotations

from mcp_interceptors import InvocationContext


def test_reserved_interceptor_state_is_never_sent() -> None:
    context = InvocationContext.model_validate({"interceptorState": {"x": 1}, "sessionId": "s", "custom": 1})
    wire = context.to_wire()
    assert "interceptorState" not in wire
    assert wire["sessionId"] == "s"
    assert wire["custom"] == 1  # unknown fields still travel: hosts ignore what they do not know
