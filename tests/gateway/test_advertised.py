"""What a session was shown stays callable: a `list_changed` arriving while a call is routed does not
turn a tool the session was just shown (and that is still listed) into an unknown one."""

from __future__ import annotations

from typing import Any, cast

import anyio
import anyio.lowlevel
import pytest

from mcp_interceptors import Chain
from mcp_interceptors.gateway.config import parse_config
from mcp_interceptors.gateway.gateway import Gateway
from mcp_interceptors.gateway.session import DownstreamSession
from mcp_interceptors.gateway.upstream.connection import UpstreamConnection

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Client:
    """The downstream side of the call: nothing is relayed to it here."""

    async def request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        raise AssertionError("unexpected request to the client")

    async def notify(self, method: str, params: dict[str, Any] | None) -> None:
        pass

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        pass

    async def notify_related(self, method: str, params: dict[str, Any] | None) -> None:
        pass


class _Upstream:
    """One upstream connection with one tool."""

    up = True
    info = None
    is_http = False
    era = "legacy"
    name = "a"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def hold(self) -> None:
        pass

    def release(self) -> None:
        pass

    async def request(self, method: str, params: dict[str, Any] | None, **_: Any) -> dict[str, Any]:
        await anyio.lowlevel.checkpoint()
        if method == "tools/list":
            return {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
        self.calls.append(method)
        return {"content": [{"type": "text", "text": "echoed"}]}


async def test_a_list_changed_while_a_call_is_routed_does_not_refuse_a_listed_tool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The upstream announces `list_changed` while each listing's records are made durable (the await
    after the gateway noted what the session is shown): the call still goes through. Before, the
    notification dropped that note before the call was checked against it: `-32602 Unknown tool: echo`."""
    config = parse_config({"upstreams": {"a": {"command": "python", "args": ["server.py"]}}})
    gateway = Gateway(config, Chain(role="server"))
    session = DownstreamSession(key="s", era="legacy")
    upstream = _Upstream()
    session.upstreams = {"a": cast(UpstreamConnection, upstream)}
    settled = gateway.replies.settled

    async def settled_then_changed(result: dict[str, Any], record: Any) -> dict[str, Any]:
        answer = await settled(result, record)
        if "tools" in result:
            await gateway.notifications.from_upstream(session, "a", "notifications/tools/list_changed", None)
        return answer

    monkeypatch.setattr(gateway.replies, "settled", settled_then_changed)
    with anyio.fail_after(5):
        result = await gateway.forwarder.handle(session, "tools/call", {"name": "echo", "arguments": {}}, _Client(), 1)
    assert result["content"] == [{"type": "text", "text": "echoed"}]
    assert upstream.calls == ["tools/call"]
