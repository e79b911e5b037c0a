"""The stdio gateway answers malformed JSON-RPC as a server must and keeps serving.

Every line here once either went unanswered or, with an unhashable id, took the gateway down.
"""

from __future__ import annotations

import json
from contextlib import suppress
from typing import Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from e2e_support import ConfigWriter, gateway_env, upstream_entry
from helpers import cli_argv
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY

pytestmark = pytest.mark.anyio

META = {
    PROTOCOL_VERSION_META_KEY: "2026-07-28",
    CLIENT_INFO_META_KEY: {"name": "raw-client", "version": "1.0.0"},
    CLIENT_CAPABILITIES_META_KEY: {},
}
MALFORMED: list[tuple[bytes, Any]] = [
    (b"{not json", {"code": -32700, "id": None}),
    (b"[]", {"code": -32600, "id": None}),  # MCP has no batches
    (b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]', {"code": -32600, "id": None}),
    (b'"text"', {"code": -32600, "id": None}),
    (b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"}', {"code": -32600, "id": None}),
    (b'{"jsonrpc": "2.0", "id": [1], "method": "ping"}', {"code": -32600, "id": None}),
    (b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', {"code": -32600, "id": None}),
    (b'{"jsonrpc": "2.0", "id": 7, "method": 123}', {"code": -32600, "id": 7}),
    # Params that are not an object once took the stdio gateway down (they were read as one).
    (b'{"jsonrpc": "2.0", "id": 11, "method": "tools/call", "params": "x"}', {"code": -32600, "id": 11}),
    (b'{"jsonrpc": "2.0", "id": 12, "method": "tools/list", "params": [1, 2]}', {"code": -32600, "id": 12}),
    (b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": "x"}', {"code": -32600, "id": None}),
    # Silently ignored: notifications whose ids are not ids, and answers nobody asked for.
    (b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": {"x": 1}}}', None),
    (b'{"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": [1], "progress": 1}}', None),
    (b'{"jsonrpc": "2.0", "id": {"a": 1}, "result": {}}', None),
]


async def test_malformed_lines_get_json_rpc_errors_and_the_gateway_keeps_serving(write_config: ConfigWriter) -> None:
    config = write_config({"upstreams": {"e2e": upstream_entry()}})
    final = {"jsonrpc": "2.0", "id": "last", "method": "tools/call"}
    final["params"] = {"name": "echo", "arguments": {"text": "still serving"}, "_meta": META}
    chunk = b"".join(line + b"\n" for line, _ in MALFORMED) + json.dumps(final).encode() + b"\n"
    replies: list[dict[str, Any]] = []
    with anyio.fail_after(60):
        async with await anyio.open_process(cli_argv("gateway", "--config", str(config)), env=gateway_env()) as proc:
            assert proc.stdin is not None and proc.stdout is not None
            await proc.stdin.send(chunk)
            reader = BufferedByteReceiveStream(proc.stdout)
            while not replies or replies[-1].get("id") != "last":
                replies.append(json.loads(await reader.receive_until(b"\n", 1 << 20)))
            await proc.stdin.aclose()
            assert await proc.wait() == 0
    errors = [{"code": reply["error"]["code"], "id": reply["id"]} for reply in replies[:-1]]
    assert errors == [expected for _, expected in MALFORMED if expected is not None]
    assert replies[-1]["result"]["content"][0]["text"] == "still serving"


async def test_a_request_with_an_integer_past_the_doubles_is_answered(write_config: ConfigWriter) -> None:
    """Valid JSON (numbers have no size limit) once got `Parse error` with id null: the caller waited forever."""
    config = write_config({"upstreams": {"e2e": upstream_entry()}})
    request = {"jsonrpc": "2.0", "id": "big", "method": "tools/call"}
    request["params"] = {"name": "echo", "arguments": {"text": "big", "n": 10**400}, "_meta": META}
    with anyio.fail_after(60):
        async with await anyio.open_process(cli_argv("gateway", "--config", str(config)), env=gateway_env()) as proc:
            assert proc.stdin is not None and proc.stdout is not None
            await proc.stdin.send(json.dumps(request).encode() + b"\n")
            reply = json.loads(await BufferedByteReceiveStream(proc.stdout).receive_until(b"\n", 1 << 20))
            await proc.stdin.aclose()
            assert await proc.wait() == 0
    assert reply["id"] == "big"
    assert reply["result"]["content"][0]["text"] == "big"


SERVE_MALFORMED: list[tuple[bytes, Any]] = [
    *MALFORMED[:8],
    (b'{"jsonrpc": "2.0", "id": 8, "method": "interceptors/list", "params": []}', {"code": -32600, "id": 8}),
    (b'{"jsonrpc": "1.0", "id": 9, "method": "interceptors/list"}', {"code": -32600, "id": 9}),
    (b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": {"x": 1}}}', None),
    (b'{"jsonrpc": "2.0", "id": 10, "result": {}}', None),
]


async def test_serve_answers_every_malformed_request_and_keeps_serving() -> None:
    """mcp's server drops a line its models reject (and reads an object id as a notification): the
    client would wait for an answer forever."""
    initialize = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
    lines = [
        json.dumps({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": initialize}).encode(),
        b'{"jsonrpc": "2.0", "method": "notifications/initialized"}',
        *(line for line, _ in SERVE_MALFORMED),
        json.dumps({"jsonrpc": "2.0", "id": "last", "method": "interceptors/list", "params": {}}).encode(),
    ]
    replies: list[dict[str, Any]] = []
    with anyio.fail_after(60):
        async with await anyio.open_process(cli_argv("serve", "--guard", "secrets"), env=gateway_env()) as proc:
            assert proc.stdin is not None and proc.stdout is not None
            await proc.stdin.send(b"".join(line + b"\n" for line in lines))
            reader = BufferedByteReceiveStream(proc.stdout)
            while not replies or replies[-1].get("id") != "last":
                replies.append(json.loads(await reader.receive_until(b"\n", 1 << 20)))
            await proc.stdin.aclose()
            assert await proc.wait() == 0
    by_id = {reply["id"]: reply for reply in replies if reply["id"] in ("init", "last")}
    assert "result" in by_id["init"]
    assert [d["name"] for d in by_id["last"]["result"]["interceptors"]] == ["secrets"]
    # Refusals are written as lines are read, so they may overtake the answers the server is composing.
    errors = [(reply["error"]["code"], str(reply["id"])) for reply in replies if reply["id"] not in ("init", "last")]
    expected = [(e["code"], str(e["id"])) for _, e in SERVE_MALFORMED if e is not None]
    assert sorted(errors) == sorted(expected)


async def test_a_line_over_the_stdio_limit_is_refused_and_the_gateway_hangs_up(write_config: ConfigWriter) -> None:
    """A client line that never ended once grew the gateway's memory without bound."""
    config = write_config({"upstreams": {"e2e": upstream_entry()}, "stdio": {"max_message_bytes": 4096}})
    fine = {"jsonrpc": "2.0", "id": "fine", "method": "tools/call"}
    fine["params"] = {"name": "echo", "arguments": {"text": "fits"}, "_meta": META}
    huge = b'{"jsonrpc": "2.0", "id": "huge", "method": "tools/call", "params": {"text": "' + b"x" * 8192
    replies: list[dict[str, Any]] = []
    with anyio.fail_after(60):
        async with await anyio.open_process(cli_argv("gateway", "--config", str(config)), env=gateway_env()) as proc:
            assert proc.stdin is not None and proc.stdout is not None
            await proc.stdin.send(json.dumps(fine).encode() + b"\n")
            reader = BufferedByteReceiveStream(proc.stdout)
            replies.append(json.loads(await reader.receive_until(b"\n", 1 << 20)))
            await proc.stdin.send(huge)  # no newline: it never ends
            with suppress(anyio.IncompleteRead):
                while True:
                    replies.append(json.loads(await reader.receive_until(b"\n", 1 << 20)))
            assert await proc.wait() == 0  # it hung up by itself, stdin still open
    assert replies[0]["result"]["content"][0]["text"] == "fits"
    assert replies[1:] == [
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32600,
                "message": "Invalid Request: a message longer than the limit of 4096 bytes",
                "data": {"limitBytes": 4096, "setting": "stdio.max_message_bytes"},
            },
        }
    ]


async def test_requests_past_the_in_flight_limit_or_reusing_an_id_in_flight_are_refused(
    write_config: ConfigWriter,
) -> None:
    """Each request in flight held ~15 KB of the gateway's memory with no limit on how many (20,000 slow
    calls: 290 MB); a reused id overwrote the first request's cancellation handle."""
    config = write_config({"upstreams": {"e2e": upstream_entry()}, "stdio": {"max_requests_in_flight": 2}})

    def call(request_id: str, name: str, arguments: dict[str, Any]) -> bytes:
        params = {"name": name, "arguments": arguments, "_meta": META}
        return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}).encode()

    def cancel(request_id: str) -> bytes:
        params = {"requestId": request_id}
        return json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}).encode()

    slow = {"seconds": 30}
    first = [call("a", "sleep", slow), call("a", "sleep", slow), call("b", "sleep", slow), call("c", "sleep", slow)]
    replies: list[dict[str, Any]] = []
    with anyio.fail_after(60):
        async with await anyio.open_process(cli_argv("gateway", "--config", str(config)), env=gateway_env()) as proc:
            assert proc.stdin is not None and proc.stdout is not None
            reader = BufferedByteReceiveStream(proc.stdout)
            await proc.stdin.send(b"".join(line + b"\n" for line in first))
            for _ in range(2):
                replies.append(json.loads(await reader.receive_until(b"\n", 1 << 20)))
            then = [cancel("a"), cancel("b"), call("last", "echo", {"text": "room again"})]
            await proc.stdin.send(b"".join(line + b"\n" for line in then))
            replies.append(json.loads(await reader.receive_until(b"\n", 1 << 20)))
            await proc.stdin.aclose()
            assert await proc.wait() == 0
    assert replies[0] == {
        "jsonrpc": "2.0",
        "id": "a",
        "error": {
            "code": -32600,
            "message": "Invalid Request: id already in use by a request in flight",
            "data": {"field": "id"},
        },
    }
    assert replies[1] == {
        "jsonrpc": "2.0",
        "id": "c",
        "error": {
            "code": -32603,
            "message": "too many requests in flight (the limit is 2); retry when one has ended",
            "data": {"reason": "too_many_requests_in_flight", "limit": 2, "setting": "stdio.max_requests_in_flight"},
        },
    }
    assert replies[2]["id"] == "last"
    assert replies[2]["result"]["content"][0]["text"] == "room again"
