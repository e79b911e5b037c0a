"""`JsonRpcPeer`: requests past their deadline, and the drain at end of input."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from mcp import MCPError

from mcp_interceptors.gateway.jsonrpc.framing import REQUEST_TIMEOUT, loads
from mcp_interceptors.gateway.jsonrpc.peer import JsonRpcPeer

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


async def test_at_end_of_input_a_drain_answers_requests_read_and_fails_ours_to_the_peer_at_once() -> None:
    """With `drain_s`, requests read before end of input are answered; one that asks the peer something
    while draining gets `Connection closed` at once (the answer could only come on the input that ended)."""
    written: list[dict[str, Any]] = []
    lines = [
        b'{"jsonrpc": "2.0", "id": 1, "method": "quick", "params": {}}\n',
        b'{"jsonrpc": "2.0", "id": 2, "method": "asks-back", "params": {}}\n',
        b'{"jsonrpc": "2.0", "id": 3, "method": "stuck", "params": {}}\n',
    ]
    peer: JsonRpcPeer

    async def write(data: bytes) -> None:
        written.append(loads(data))

    input_ended = anyio.Event()

    async def read() -> bytes:
        if lines:
            return lines.pop(0)
        input_ended.set()
        return b""

    async def on_request(request_id: Any, method: str, params: dict[str, Any] | None) -> Any:
        await input_ended.wait()  # still running when end of input is read
        if method == "asks-back":
            try:
                await peer.send_raw_request("sampling/createMessage", {})
            except MCPError as exc:
                return {"asked": exc.error.message}
        if method == "stuck":
            await anyio.sleep_forever()
        return {"done": method}

    peer = JsonRpcPeer(read, write)
    with anyio.fail_after(5):
        await peer.run(on_request, _ignore, drain_s=0.5)
    answers = {message["id"]: message for message in written if "id" in message}
    assert answers[1]["result"] == {"done": "quick"}
    assert answers[2]["result"] == {"asked": "Connection closed"}
    assert answers[3]["error"]["code"] == -32000
    assert "did not finish within 0.5 s" in answers[3]["error"]["message"]
    assert not [message for message in written if message.get("method") == "sampling/createMessage"]


async def test_take_now_starts_whole_chunks_of_requests_and_leaves_anything_else_to_run() -> None:
    """`take_now` handles a chunk only if `run` would start every line of it as it stands; otherwise the chunk
    is left whole (nothing started) for `run`, which refuses, cancels or diverts in order."""
    started: list[Any] = []
    never = anyio.Event()

    async def read() -> bytes:
        await never.wait()
        return b""

    async def write(data: bytes) -> None:
        return None

    async def on_request(request_id: Any, method: str, params: dict[str, Any] | None) -> Any:
        started.append(request_id)
        await anyio.sleep_forever()

    def request(request_id: Any, method: str = "tools/call") -> bytes:
        return b'{"jsonrpc": "2.0", "id": %s, "method": "%s", "params": {}}\n' % (
            json.dumps(request_id).encode(),
            method.encode(),
        )

    peer = JsonRpcPeer(read, write, max_in_flight=3)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            await tg.start(peer.run, on_request, _ignore)
            assert not peer.take_now(request(1)[:-5])  # a partial line
            assert not peer.take_now(request(1) + b'{"jsonrpc": "2.0", "method": "notifications/cancelled"}\n')
            assert not peer.take_now(request(1) + request(1))  # the second reuses the first's id
            assert not peer.take_now(request(1) + b'{"jsonrpc": "2.0", "id": 9, "method": "x", "params": []}\n')
            assert not peer.take_now(b'{"jsonrpc": "2.0", "id": "gw-1", "result": {}}\n')  # not an answer we await
            await anyio.wait_all_tasks_blocked()
            assert started == [] and not peer.is_serving(1)
            assert peer.take_now(request(1) + b"\n" + request("two"))
            assert peer.is_serving(1) and peer.is_serving("two")
            assert not peer.take_now(request(3) + request(4))  # past max_in_flight: run refuses the fourth
            await anyio.wait_all_tasks_blocked()
            assert started == [1, "two"]
            tg.cancel_scope.cancel()
