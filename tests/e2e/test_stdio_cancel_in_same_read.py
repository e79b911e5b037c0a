"""A stdio client's cancellation read together with the request it cancels still cancels it.

A client that gives up quickly (a short read timeout while the gateway is still starting, say)
leaves the request and its `notifications/cancelled` in the pipe together; the gateway reads
both in one chunk, before the request's handler task has started.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from e2e_support import ConfigWriter, gateway_env, unique, upstream_entry
from helpers import cli_argv
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY

pytestmark = pytest.mark.anyio

META = {
    PROTOCOL_VERSION_META_KEY: "2026-07-28",
    CLIENT_INFO_META_KEY: {"name": "raw-client", "version": "1.0.0"},
    CLIENT_CAPABILITIES_META_KEY: {},
}


def call(request_id: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments, "_meta": META}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


async def test_request_and_its_cancellation_in_one_chunk(write_config: ConfigWriter, tmp_path: Path) -> None:
    config = write_config({"upstreams": {"e2e": upstream_entry()}})
    token = unique("same-chunk")
    messages = [
        call(1, "sleep", {"seconds": 60, "token": token}),
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1, "reason": "gave up"}},
        call(2, "was_cancelled", {"token": token, "wait": 0.5}),
    ]
    chunk = b"".join(json.dumps(message).encode() + b"\n" for message in messages)
    answered: list[Any] = []
    with anyio.fail_after(60):
        async with await anyio.open_process(cli_argv("gateway", "--config", str(config)), env=gateway_env()) as proc:
            assert proc.stdin is not None and proc.stdout is not None
            await proc.stdin.send(chunk)  # one write: the gateway reads it at once when it starts serving
            reader = BufferedByteReceiveStream(proc.stdout)
            while 2 not in answered:
                reply = json.loads(await reader.receive_until(b"\n", 1 << 20))
                answered.append(reply.get("id"))
                if reply.get("id") == 2:
                    verdict = reply["result"]["content"][0]["text"]
            await proc.stdin.aclose()
    assert answered == [2]  # a cancelled request gets no answer
    assert verdict in ("never started", "cancelled")  # without the fix: "not cancelled" (it slept on)
