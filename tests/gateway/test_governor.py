"""`gateway/governor.py`: the gateway's chain on one leg of a message, and the client's error for a block."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp import MCPError

from mcp_interceptors import Chain, InterceptorHost, Invocation
from mcp_interceptors.gateway.governor import Governor
from mcp_interceptors.protocol.invoke import InvocationContext

pytestmark = pytest.mark.anyio

CONTEXT = InvocationContext.model_validate({"traceId": "t"})


def governor(replacement: Any, *, mode: str = "active") -> Governor:
    host = InterceptorHost("rewriters")

    @host.mutator("rewriter", events=["tools/call"], phase="both")
    async def rewriter(inv: Invocation) -> Any:
        return replacement

    chain = Chain(role="server")
    chain.add_local(host, overrides={"rewriter": {"mode": mode}})
    return Governor(chain)


@pytest.mark.parametrize(
    ("replacement", "detail"),
    [
        ("rewritten", "the payload is str, not an object"),
        (7, "the payload is int, not an object"),
        ({"method": "tools/list", "params": {}}, "the payload's method is 'tools/list', not 'tools/call'"),
        ({"method": "tools/call", "params": ["echo"]}, "the payload's params is not an object"),
    ],
)
async def test_a_mutator_that_leaves_no_request_payload_is_named_in_the_block(replacement: Any, detail: str) -> None:
    # Such a payload used to be forwarded as empty params, and the client got `-32602 params.name must
    # be a string` for a request it sent well-formed, with nothing naming the mutator.
    with anyio.fail_after(10), pytest.raises(MCPError) as error:
        await governor(replacement).govern_request("tools/call", {"name": "echo"}, CONTEXT)
    assert error.value.code == -32603
    assert error.value.data == {
        "interceptor": "rewriter",
        "reason": "invalid payload",
        "event": "tools/call",
        "phase": "request",
        "status": "mutation_failed",
        "detail": detail,
    }


async def test_a_mutator_that_leaves_no_result_object_is_named_in_the_block() -> None:
    with anyio.fail_after(10), pytest.raises(MCPError) as error:
        await governor(["not", "a", "result"]).govern_response("tools/call", {"content": []}, CONTEXT)
    assert error.value.code == -32603
    assert error.value.data is not None
    assert (error.value.data["interceptor"], error.value.data["phase"]) == ("rewriter", "response")
    assert error.value.data["detail"] == "the payload is list, not an object"


async def test_an_audit_mutators_replacement_is_never_checked_or_applied() -> None:
    with anyio.fail_after(10):
        params = await governor("rewritten", mode="audit").govern_request("tools/call", {"name": "echo"}, CONTEXT)
    assert params == {"name": "echo"}
