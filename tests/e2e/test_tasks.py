"""[OURS] The gateway refuses MCP tasks (docs/conformance.md D19; spec open question 4), in front of a real
tasks-capable upstream, over stdio and Streamable HTTP, in both eras.

A task-augmented `tools/call` is answered with a `CreateTaskResult` and its real result fetched later with
`tasks/result`: relayed, that result reached the client with the `secrets` guard never seeing it. mcp 2.3's
`Client` validates a `tools/call` answer as a `CallToolResult` (it cannot take a `CreateTaskResult`), so
these tests speak raw JSON-RPC over mcp's own transports and dispatcher.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from e2e_support import E2E_DIR, ERAS, ConfigWriter, gateway_env
from helpers import cli_argv, free_tcp_port, http_transport, running, stderr_log, stdio_transport
from mcp import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

TASKS_UPSTREAM = str(E2E_DIR / "tasks_upstream.py")
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
#: What a task-capable client declares: it would run sampling as a task for the server.
CLIENT_TASKS = {"list": {}, "cancel": {}, "requests": {"sampling": {"createMessage": {}}}}
SAMPLED = {"role": "assistant", "content": {"type": "text", "text": "42"}, "model": "raw-model"}


class RawClient:
    """A client sending requests as they are written (mcp's `Client` refuses a `CreateTaskResult`)."""

    def __init__(self, dispatcher: JSONRPCDispatcher[Any], era: str) -> None:
        self.dispatcher = dispatcher
        self.era = era
        self.asked: list[tuple[str, Any]] = []
        self.notified: list[tuple[str, Any]] = []
        self.logged = anyio.Event()
        self.capabilities: dict[str, Any] = {}
        #: The handshake's result (`initialize`, or `server/discover`).
        self.opened: dict[str, Any] = {}

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        body = dict(params or {})
        headers = {"mcp-protocol-version": "2025-11-25"}
        if self.era == "2026-07-28":
            body["_meta"] = {
                PROTOCOL_VERSION_META_KEY: "2026-07-28",
                CLIENT_INFO_META_KEY: {"name": "raw-client", "version": "1.0.0"},
                CLIENT_CAPABILITIES_META_KEY: {"tasks": CLIENT_TASKS},
            }
            headers = {"mcp-protocol-version": "2026-07-28", "mcp-method": method}
            if isinstance(body.get("name"), str):
                headers["mcp-name"] = body["name"]
        return await self.dispatcher.send_raw_request(method, body, {"timeout": 30, "headers": headers})

    async def call_text(self, name: str) -> str:
        result = await self.request("tools/call", {"name": name, "arguments": {}})
        text: str = result["content"][0]["text"]
        return text


@asynccontextmanager
async def raw_gateway(transport: str, config: Path, era: str) -> AsyncIterator[RawClient]:
    """A raw client of the real gateway CLI, handshaken (`initialize` declaring tasks, or `server/discover`)."""
    argv = cli_argv("gateway", "--config", str(config))
    async with AsyncExitStack() as stack:
        if transport == "stdio":
            log = stack.enter_context(stderr_log("stdio gateway"))
            streams = stdio_transport(argv, log, env=gateway_env())
        else:
            port = free_tcp_port()
            argv += ["--http", f"127.0.0.1:{port}"]
            await stack.enter_async_context(running(argv, port=port, env=gateway_env(), label="HTTP gateway"))
            streams = http_transport(f"http://127.0.0.1:{port}/mcp")
        read, write = await stack.enter_async_context(streams)
        dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(read, write)
        client = RawClient(dispatcher, era)

        async def answer(dctx: Any, method: str, params: Any) -> dict[str, Any]:
            client.asked.append((method, params))
            return SAMPLED

        async def note(dctx: Any, method: str, params: Any) -> None:
            client.notified.append((method, params))
            if method == "notifications/message":
                client.logged.set()

        tg = await stack.enter_async_context(anyio.create_task_group())
        await tg.start(dispatcher.run, answer, note)
        stack.callback(tg.cancel_scope.cancel)
        if era == "legacy":
            capabilities = {"sampling": {}, "tasks": CLIENT_TASKS}
            info = {"name": "raw-client", "version": "1.0.0"}
            handshake = {"protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": info}
            opened = await dispatcher.send_raw_request("initialize", handshake, {"timeout": 30})
            await dispatcher.notify("notifications/initialized", None)
        else:
            opened = await client.request("server/discover")
        client.capabilities = opened["capabilities"]
        client.opened = opened
        yield client


def tasks_config(write_config: ConfigWriter) -> Path:
    return write_config(
        {
            "upstreams": {"tasks": {"command": sys.executable, "args": [TASKS_UPSTREAM]}},
            "interceptors": {"guards": [{"name": "secrets", "config": {"action": "redact"}}]},
        }
    )


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_task_augmented_call_is_refused_before_it_reaches_the_upstream(
    write_config: ConfigWriter, transport: str, era: str
) -> None:
    """Fixed: the call was forwarded, and `tasks/result` handed the client the tool's credential unredacted."""
    with anyio.fail_after(60):
        async with raw_gateway(transport, tasks_config(write_config), era) as client:
            with pytest.raises(MCPError) as refused:
                await client.request("tools/call", {"name": "leak", "arguments": {}, "task": {"ttl": 60000}})
            fetched: dict[str, MCPError] = {}
            for method in ("tasks/get", "tasks/result", "tasks/cancel", "tasks/list"):
                with pytest.raises(MCPError) as failed:
                    await client.request(method, {} if method == "tasks/list" else {"taskId": "any"})
                fetched[method] = failed.value
            reached = await client.call_text("calls")
            governed = await client.call_text("leak")
    error = refused.value.error
    assert (error.code, error.data["field"]) == (-32602, "task")
    assert "tasks/result" in error.data["reason"] and "params.task" in error.message
    assert reached == "0"  # refused before the request chain and the upstream
    assert {method: exc.error.code for method, exc in fetched.items()} == dict.fromkeys(fetched, -32601)
    assert "AKIA" not in governed and "[REDACTED:aws_access_key]" in governed  # untasked, the guard still sees it
    # What the upstream advertises (`tasks`, or the 2026-07-28 tasks extension) is not promised to the client.
    assert "tasks" not in client.capabilities
    assert TASKS_EXTENSION not in (client.capabilities.get("extensions") or {})
    assert TASKS_EXTENSION not in (client.capabilities.get("experimental") or {})


async def test_an_upstream_is_offered_no_client_tasks_and_its_task_augmented_request_is_refused(
    write_config: ConfigWriter,
) -> None:
    """Server-to-client tasks: a client's sampling answer fetched with `tasks/result` would skip the chain.

    Fixed: the client's `tasks` capability reached the upstream, and its task-augmented
    `sampling/createMessage` reached the client."""
    with anyio.fail_after(60):
        async with raw_gateway("stdio", tasks_config(write_config), "legacy") as client:
            presented = json.loads(await client.call_text("client_capabilities"))
            answered = json.loads(await client.call_text("sample_as_task"))
    assert "tasks" not in presented and "sampling" in presented
    assert answered["error"]["code"] == -32602
    assert answered["error"]["data"]["field"] == "task"
    assert client.asked == []


async def test_an_upstreams_task_status_notification_is_not_relayed(write_config: ConfigWriter) -> None:
    """Fixed: `notifications/tasks/status` (its `statusMessage` unscrubbed) reached the client."""
    with anyio.fail_after(60):
        async with raw_gateway("stdio", tasks_config(write_config), "legacy") as client:
            assert await client.call_text("report_status") == "reported"
            await client.logged.wait()  # sent after the status, which had its chance to arrive first
    assert [method for method, _ in client.notified] == ["notifications/message"]
