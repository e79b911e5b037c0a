"""No message stops the stdio gateway: each one that fails the JSON-RPC shape check gets its error, alone.

A `tools/call` whose params were an array, string or number, sent to an idle gateway (read by the pipe
reader's early path), once raised inside the reader and ended the gateway with exit status 0. Messages with
a wrong or missing `jsonrpc`, or neither a method nor a result, were dropped without an answer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream
from e2e_support import ConfigWriter, gateway_env, upstream_entry
from helpers import cli_argv

pytestmark = pytest.mark.anyio

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": "init",
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
}


class RawStdio:
    """A handshake-era client writing raw lines to a stdio gateway and reading its answers by id."""

    def __init__(self, proc: Process) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self.reader = BufferedByteReceiveStream(proc.stdout)

    async def send(self, message: Any) -> None:
        assert self.proc.stdin is not None
        line = message if isinstance(message, bytes) else json.dumps(message).encode()
        await self.proc.stdin.send(line + b"\n")

    async def answer(self, request_id: Any = ...) -> dict[str, Any]:
        """The next answer (with `request_id`, if given), skipping notifications."""
        while True:
            reply = json.loads(await self.reader.receive_until(b"\n", 1 << 20))
            if "method" not in reply and (request_id is ... or reply.get("id") == request_id):
                return dict(reply)

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        await self.send(message)
        return await self.answer(message["id"])


@asynccontextmanager
async def idle_stdio_gateway(config: Any) -> AsyncIterator[RawStdio]:
    """A stdio gateway past its handshake, waiting for input; on exit its input closes and it must exit 0."""
    with anyio.fail_after(90):
        async with await anyio.open_process(cli_argv("gateway", "--config", str(config)), env=gateway_env()) as proc:
            client = RawStdio(proc)
            assert "result" in await client.request(INITIALIZE)
            await client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            assert (await client.request({"jsonrpc": "2.0", "id": "warm", "method": "tools/list"}))["result"]["tools"]
            yield client
            assert proc.stdin is not None
            await proc.stdin.aclose()
            assert await proc.wait() == 0


async def test_a_call_whose_params_are_not_an_object_leaves_an_idle_stdio_gateway_serving(
    write_config: ConfigWriter,
) -> None:
    """Each sent alone while the gateway waits for input, so its pipe reader's early path reads it."""
    config = write_config({"upstreams": {"e2e": upstream_entry()}})
    async with idle_stdio_gateway(config) as client:
        for index, params in enumerate([[1, 2], "x", 3, True, None]):
            bad: dict[str, Any] = {"jsonrpc": "2.0", "id": f"bad-{index}", "method": "tools/call", "params": params}
            reply = await client.request(bad)
            if params is None:  # null params read as none: the call is refused for its missing name
                assert reply["error"]["code"] == -32602, reply
            else:
                assert reply["error"]["code"] == -32600, reply
                assert reply["error"]["data"] == {"field": "params"}
            assert (await client.request({"jsonrpc": "2.0", "id": f"p-{index}", "method": "ping"}))["result"] == {}
        call = {"name": "echo", "arguments": {"text": "still serving"}}
        answer = await client.request({"jsonrpc": "2.0", "id": "c", "method": "tools/call", "params": call})
        assert answer["result"]["content"][0]["text"] == "still serving"


ENVELOPES: list[tuple[dict[str, Any], Any, str]] = [
    ({"id": 5, "method": "ping"}, 5, "jsonrpc"),
    ({"jsonrpc": "1.0", "id": 6, "method": "tools/list"}, 6, "jsonrpc"),
    ({"jsonrpc": 2.0, "id": 7, "method": "tools/list"}, 7, "jsonrpc"),
    ({"jsonrpc": "2.0", "id": 8}, 8, "method"),
    ({"jsonrpc": "2.0"}, None, "method"),
    ({"method": "notifications/roots/list_changed"}, None, "jsonrpc"),
    ({"jsonrpc": "2.0", "id": True, "method": "ping"}, None, "id"),
    ({"jsonrpc": "2.0", "id": None, "method": "ping"}, None, "id"),
]


async def test_a_message_off_the_json_rpc_envelope_gets_32600_naming_the_field(write_config: ConfigWriter) -> None:
    config = write_config({"upstreams": {"e2e": upstream_entry()}})
    async with idle_stdio_gateway(config) as client:
        for index, (message, answer_id, field) in enumerate(ENVELOPES):
            await client.send(message)
            reply = await client.answer()
            assert (reply["id"], reply["error"]["code"], reply["error"]["data"]) == (
                answer_id,
                -32600,
                {"field": field},
            )
            assert (await client.request({"jsonrpc": "2.0", "id": f"p-{index}", "method": "ping"}))["result"] == {}
