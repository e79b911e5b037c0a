"""`JsonRpcPeer`'s requests past their deadline."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp import MCPError

from mcp_interceptors.gateway.jsonrpc import REQUEST_TIMEOUT, JsonRpcPeer, loads

pytestmark = pytest.mark.anyio


async def _ignore(*_: Any) -> None:
    return None


async def test_a_request_past_its_timeout_fails_and_the_peer_is_told() -> None:
    written: list[dict[str, Any]] = []

    async def write(data: bytes) -> None:
        written.append(loads(data))

    never = anyio.Event()

    async def read() -> bytes:
        await never.wait()
        return b""

    peer = JsonRpcPeer(read, write)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(peer.run, _ignore, _ignore)
            with pytest.raises(MCPError) as caught:
                await peer.send_raw_request("tools/call", {"name": "slow"}, {"timeout": 0.05})
            assert caught.value.error.code == REQUEST_TIMEOUT
            assert [m.get("method") for m in written] == ["tools/call", "notifications/cancelled"]
            assert written[1]["params"] == {"requestId": written[0]["id"], "reason": "timed out"}
            assert not peer.is_pending(written[0]["id"])
            tg.cancel_scope.cancel()
