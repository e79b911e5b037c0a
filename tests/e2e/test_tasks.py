"""[OURS] MCP tasks through the gateway (docs/conformance.md D19; spec open question 4), in front of a real
tasks-capable upstream, over stdio and Streamable HTTP, in both eras.

A task-augmented `tools/call` is answered with a `CreateTaskResult` and its real result fetched later with
`tasks/result`. A handshake-era client's tool-call tasks are governed: the result gets the response chain when
`tasks/result` delivers it, and a task is its creator's only. The rest is refused. mcp 2.3's
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
from e2e_support import E2E_DIR, ConfigWriter, gateway_env
from helpers import cli_argv, free_tcp_port, http_transport, run_cli, running, stderr_log, stdio_transport
from mcp import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY
from test_audit_call_ends import calls

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
        self.status = anyio.Event()
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
            elif method.startswith("tasks/") and isinstance(body.get("taskId"), str):
                headers["mcp-name"] = body["taskId"]  # SEP-2663: a task request names its task
        return await self.dispatcher.send_raw_request(method, body, {"timeout": 30, "headers": headers})

    async def call_text(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        result = await self.request("tools/call", {"name": name, "arguments": arguments or {}})
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
        yield await stack.enter_async_context(raw_client(streams, era))


@asynccontextmanager
async def raw_client(streams: Any, era: str) -> AsyncIterator[RawClient]:
    """A raw client on `streams` (a transport context), handshaken."""
    async with AsyncExitStack() as stack:
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
            if method == "notifications/tasks/status":
                client.status.set()

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


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_2026_07_28_requests_handshake_era_task_hint_is_ignored_and_tasks_without_the_extension_refused(
    write_config: ConfigWriter, tmp_path: Path, transport: str
) -> None:
    """A 2026-07-28 client's `params.task` (the handshake era's hint) is tolerated and not passed on, as SEP-2663
    asks of a server: the call runs plainly and its result is governed. Its `tasks/result` and `tasks/list`
    (which the extension removed) are `-32601`; `tasks/get` and `tasks/cancel` from a request that does not
    declare the extension are `-32021`, before the upstream (tests/e2e/test_tasks_extension.py: governed)."""
    era = "2026-07-28"
    config = audited_tasks_config(write_config, tmp_path)
    with anyio.fail_after(60):
        async with raw_gateway(transport, config, era) as client:
            hinted = await client.request("tools/call", {"name": "leak", "arguments": {}, "task": {"ttl": 60000}})
            fetched: dict[str, MCPError] = {}
            for method in ("tasks/get", "tasks/result", "tasks/cancel", "tasks/list"):
                with pytest.raises(MCPError) as failed:
                    await client.request(method, {} if method == "tasks/list" else {"taskId": "any"})
                fetched[method] = failed.value
            reached = json.loads(await client.call_text("cancelled"))
    assert "task" not in hinted and hinted["content"][0]["text"] == f"key {REDACTED}"
    codes = {method: exc.error.code for method, exc in fetched.items()}
    assert codes == {"tasks/get": -32021, "tasks/result": -32601, "tasks/cancel": -32021, "tasks/list": -32601}
    assert fetched["tasks/get"].error.data == {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}
    assert TASKS_EXTENSION in fetched["tasks/list"].error.message
    assert reached == []  # no tasks/cancel reached the upstream
    assert "tasks" not in client.capabilities  # the handshake era's capability is never a 2026-07-28 client's
    leak_call = next(iter(calls(tmp_path / "audit.db", "tools/call").values()))
    assert [leg["phase"] for leg in leak_call] == ["request", "response"]
    assert "AKIA" not in json.dumps(leak_call)
    assert "open calls" not in await verified(config)


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


# ---------------------------------------------------------------------- governed: handshake-era tool-call tasks

REDACTED = "[REDACTED:aws_access_key]"
GOVERNED_TASKS = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
TASKED_LEAK = {"name": "leak", "arguments": {}, "task": {"ttl": 60000}}


def audited_tasks_config(write_config: ConfigWriter, tmp_path: Path, **extra: Any) -> Path:
    audit = {"enabled": True, "store": str(tmp_path / "audit.db"), "key_file": str(tmp_path / "audit-key")}
    return write_config(
        {
            "upstreams": {"tasks": {"command": sys.executable, "args": [TASKS_UPSTREAM]}},
            "interceptors": {"guards": [{"name": "secrets", "config": {"action": "redact"}}]},
            "audit": audit,
            **extra,
        }
    )


async def verified(config: Path) -> str:
    done = await run_cli("audit", "verify", "--config", str(config), env=gateway_env())
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    return done.stdout.decode()


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_tasks_result_is_governed_as_a_plain_calls_result(
    write_config: ConfigWriter, tmp_path: Path, transport: str
) -> None:
    """A handshake-era task: the `CreateTaskResult` passes (its status message scrubbed), `tasks/get` and
    `tasks/list` show it scrubbed, and `tasks/result` runs the response chain: the credential the tool answers
    with is redacted exactly as in a plain call. One audit call from the creation to the result."""
    config = audited_tasks_config(write_config, tmp_path)
    with anyio.fail_after(60):
        async with raw_gateway(transport, config, "legacy") as client:
            created = await client.request("tools/call", TASKED_LEAK)
            task_id = created["task"]["taskId"]
            got = await client.request("tasks/get", {"taskId": task_id})
            listed = await client.request("tasks/list", {})
            fetched = await client.request("tasks/result", {"taskId": task_id})
            plain = await client.call_text("leak")
            assert await client.call_text("report_status", {"task_id": task_id}) == "reported"
            await client.status.wait()
    assert client.capabilities["tasks"] == GOVERNED_TASKS
    assert "content" not in created and created["task"]["status"] == "completed"
    assert created["task"]["statusMessage"] == f"done with key {REDACTED}"
    assert (got["taskId"], got["statusMessage"]) == (task_id, f"done with key {REDACTED}")
    assert [task["taskId"] for task in listed["tasks"]] == [task_id]
    assert "AKIA" not in json.dumps(listed)
    assert fetched["content"][0]["text"] == plain == f"key {REDACTED}"
    [status] = [params for method, params in client.notified if method == "notifications/tasks/status"]
    assert (status["taskId"], status["statusMessage"]) == (task_id, f"key {REDACTED}")
    # The task's call: its request recorded at creation, its response (redacted) at tasks/result, one receipt.
    recorded = calls(tmp_path / "audit.db", "tools/call")
    task_call, plain_call, _report_call = recorded.values()  # in the order their requests were recorded
    assert plain_call[0]["executed_hash"] != task_call[0]["executed_hash"]  # the task's request carried params.task
    assert [(leg["phase"], leg["decision"]) for leg in task_call] == [("request", "allow"), ("response", "allow")]
    assert task_call[-1]["receipt"]
    assert "AKIA" not in json.dumps(task_call)
    assert "open calls" not in await verified(config)


async def test_another_principal_cannot_get_read_list_or_cancel_a_task(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    """Two bearer tokens on the HTTP front, one upstream process serving any task to anyone: only the
    gateway keeps Alice's task hers. Bob is told it does not exist, and nothing of his reaches the upstream."""
    upstream_port, port = free_tcp_port(), free_tcp_port()
    config = audited_tasks_config(
        write_config,
        tmp_path,
        upstreams={"tasks": {"url": f"http://127.0.0.1:{upstream_port}/mcp"}},
        auth={"tokens": ["alice-token-5d1e", "bob-token-8a0c"]},
    )
    url = f"http://127.0.0.1:{port}/mcp"
    argv = cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}")
    upstream_argv = [sys.executable, TASKS_UPSTREAM, "--http", str(upstream_port)]
    refused: dict[str, MCPError] = {}
    with anyio.fail_after(90):
        async with (
            running(upstream_argv, port=upstream_port, label="tasks upstream"),
            running(argv, port=port, env=gateway_env(), label="HTTP gateway"),
            raw_client(http_transport(url, headers={"Authorization": "Bearer alice-token-5d1e"}), "legacy") as alice,
            raw_client(http_transport(url, headers={"Authorization": "Bearer bob-token-8a0c"}), "legacy") as bob,
        ):
            task_id = (await alice.request("tools/call", TASKED_LEAK))["task"]["taskId"]
            for method in ("tasks/get", "tasks/result", "tasks/cancel"):
                with pytest.raises(MCPError) as failed:
                    await bob.request(method, {"taskId": task_id})
                refused[method] = failed.value
            with pytest.raises(MCPError) as unknown:
                await bob.request("tasks/get", {"taskId": "no-such-task"})
            bobs_list = await bob.request("tasks/list", {})
            reached_cancel = json.loads(await bob.call_text("cancelled"))
            alices_list = await alice.request("tasks/list", {})
            alices_result = await alice.request("tasks/result", {"taskId": task_id})
            with pytest.raises(MCPError) as alices_cancel:
                await alice.request("tasks/cancel", {"taskId": task_id})
            cancelled = json.loads(await alice.call_text("cancelled"))
    for method, exc in refused.items():
        assert exc.error.code == -32602
        assert exc.error.message == f"{method}: unknown task {task_id!r}"  # the gateway's, as for any unknown id
        assert exc.error.data == {"field": "taskId", "taskId": task_id}
    assert unknown.value.error.message == "tasks/get: unknown task 'no-such-task'"
    assert bobs_list == {"tasks": []}
    assert reached_cancel == []  # Bob's cancel never reached the upstream
    assert [task["taskId"] for task in alices_list["tasks"]] == [task_id]
    assert alices_result["content"][0]["text"] == f"key {REDACTED}"
    assert alices_cancel.value.error.message == "Cannot cancel a completed task"  # the upstream's own answer
    assert cancelled == [task_id]
    recorded = calls(tmp_path / "audit.db", "tools/call")
    principals = {legs[0]["principal"]["id"] for legs in recorded.values() if len(legs) == 2}
    assert "static-token-1" in principals
    await verified(config)
