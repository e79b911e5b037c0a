"""[OURS] 2026-07-28 tasks (`io.modelcontextprotocol/tasks`, SEP-2663) governed through the real gateway CLI
(docs/conformance.md D19), in front of a real upstream that speaks the extension (`tasks_extension_upstream.py`),
over the stdio and Streamable HTTP fronts.

The upstream turns a `tools/call` into a task for a request that declares the extension; the client polls
`tasks/get`, whose inlined `result` must get the response chain as a plain call's result does, and answers an
`input_required` task with `tasks/update`. mcp 2.3 has none of these messages, so the client here speaks raw
JSON-RPC over mcp's own transports and dispatcher.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from e2e_support import E2E_DIR, ConfigWriter, gateway_env
from helpers import cli_argv, free_tcp_port, http_transport, running, stderr_log, stdio_transport
from mcp import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY
from test_audit_call_ends import calls
from test_tasks import verified

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

UPSTREAM = str(E2E_DIR / "tasks_extension_upstream.py")
EXTENSION = "io.modelcontextprotocol/tasks"
REDACTED = "[REDACTED:aws_access_key]"
DECLARED = {"elicitation": {"form": {}}, "extensions": {EXTENSION: {}}}


class TasksClient:
    """A stateless 2026-07-28 client; each request declares the extension unless told otherwise."""

    def __init__(self, dispatcher: JSONRPCDispatcher[Any]) -> None:
        self.dispatcher = dispatcher
        self.capabilities: dict[str, Any] = {}

    async def request(
        self, method: str, params: dict[str, Any] | None = None, *, declare: bool = True
    ) -> dict[str, Any]:
        body = dict(params or {})
        body["_meta"] = {
            PROTOCOL_VERSION_META_KEY: "2026-07-28",
            CLIENT_INFO_META_KEY: {"name": "tasks-client", "version": "1.0.0"},
            CLIENT_CAPABILITIES_META_KEY: DECLARED if declare else {"elicitation": {"form": {}}},
        }
        headers = {"mcp-protocol-version": "2026-07-28", "mcp-method": method}
        name = body.get("taskId") if method.startswith("tasks/") else body.get("name")
        if isinstance(name, str):
            headers["mcp-name"] = name
        return await self.dispatcher.send_raw_request(method, body, {"timeout": 30, "headers": headers})

    async def call_text(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        result = await self.request("tools/call", {"name": name, "arguments": arguments or {}})
        text: str = result["content"][0]["text"]
        return text

    async def until(self, task_id: str, *statuses: str) -> dict[str, Any]:
        """`tasks/get` until the task shows one of `statuses`."""
        while True:
            got = await self.request("tasks/get", {"taskId": task_id})
            if got["status"] in statuses:
                return got
            await anyio.sleep(0.05)


@asynccontextmanager
async def tasks_client(streams: Any) -> AsyncIterator[TasksClient]:
    async with AsyncExitStack() as stack:
        read, write = await stack.enter_async_context(streams)
        dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(read, write)

        async def answer(dctx: Any, method: str, params: Any) -> dict[str, Any]:
            raise MCPError(-32601, "a 2026-07-28 client is sent no requests")

        async def note(dctx: Any, method: str, params: Any) -> None:
            return None

        tg = await stack.enter_async_context(anyio.create_task_group())
        await tg.start(dispatcher.run, answer, note)
        stack.callback(tg.cancel_scope.cancel)
        client = TasksClient(dispatcher)
        client.capabilities = (await client.request("server/discover"))["capabilities"]
        yield client


@asynccontextmanager
async def gateway_client(transport: str, config: Path) -> AsyncIterator[TasksClient]:
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
        yield await stack.enter_async_context(tasks_client(streams))


def config_for(write_config: ConfigWriter, tmp_path: Path, **extra: Any) -> Path:
    audit = {"enabled": True, "store": str(tmp_path / "audit.db"), "key_file": str(tmp_path / "audit-key")}
    upstream = {"command": sys.executable, "args": [UPSTREAM], "era": "2026-07-28"}
    return write_config(
        {
            "upstreams": {"tasks": upstream},
            "interceptors": {"guards": [{"name": "secrets", "config": {"action": "redact"}}]},
            "audit": audit,
            **extra,
        }
    )


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_2026_07_28_tasks_inlined_result_is_governed_as_a_plain_calls_result(
    write_config: ConfigWriter, tmp_path: Path, transport: str
) -> None:
    """The gateway advertises the extension; a task tool's call comes back as a flat `CreateTaskResult` (its
    status message scrubbed), and the result `tasks/get` inlines once the task completed has the credential the
    tool answered with redacted, exactly as a plain call's; every later poll too. One audit call from creation
    to result, and the trail verifies. A handshake-era `task` hint is tolerated and not passed on."""
    config = config_for(write_config, tmp_path)
    with anyio.fail_after(60):
        async with gateway_client(transport, config) as client:
            created = await client.request("tools/call", {"name": "leak", "arguments": {}, "task": {"ttl": 1000}})
            task_id = created["taskId"]
            working = await client.request("tasks/get", {"taskId": task_id})
            done = await client.until(task_id, "completed")
            again = await client.request("tasks/get", {"taskId": task_id})
            plain = await client.call_text("greet", {"name": "you"})
            seen = json.loads(await client.call_text("client_capabilities"))
    assert client.capabilities["extensions"][EXTENSION] == {}
    assert "tasks" not in client.capabilities
    assert created["resultType"] == "task" and created["status"] == "working"
    assert created["statusMessage"] == f"working on key {REDACTED}" and "content" not in created
    assert (working["taskId"], working["resultType"]) == (task_id, "complete")
    assert "AKIA" not in json.dumps(working)
    assert done["result"]["content"][0]["text"] == f"key {REDACTED}"
    assert done["statusMessage"] == f"done with key {REDACTED}"
    assert again["result"]["content"][0]["text"] == f"key {REDACTED}"
    assert plain == "Hello, you!"
    assert seen["capabilities"]["extensions"] == {EXTENSION: {}} and seen["task_hint"] is False
    task_call, _greet = list(calls(tmp_path / "audit.db", "tools/call").values())[:2]
    assert [(leg["phase"], leg["decision"]) for leg in task_call] == [("request", "allow"), ("response", "allow")]
    assert task_call[-1]["receipt"]
    assert "AKIA" not in json.dumps(task_call)
    assert "open calls" not in await verified(config)


async def test_a_tasks_failure_cancellation_and_blocked_result_close_its_call(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    """A task ending `failed` shows its inlined error scrubbed, and its call closes with that error; a
    `tasks/cancel` is acked (again on the ended task) and the next `tasks/get` shows it `cancelled`, closing
    its call `cancelled`. A tool error stays `completed` with `isError`, governed as a result."""
    config = config_for(write_config, tmp_path)
    with anyio.fail_after(60):
        async with gateway_client("stdio", config) as client:
            crashed = (await client.request("tools/call", {"name": "protocol_error_job", "arguments": {}}))["taskId"]
            failed = await client.until(crashed, "failed")
            erred = (await client.request("tools/call", {"name": "failing_job", "arguments": {}}))["taskId"]
            tool_error = await client.until(erred, "completed")
            slow = (await client.request("tools/call", {"name": "slow_compute", "arguments": {"seconds": 60}}))[
                "taskId"
            ]
            ack = await client.request("tasks/cancel", {"taskId": slow})
            cancelled = await client.until(slow, "cancelled")
            again = await client.request("tasks/cancel", {"taskId": slow})
            reached = json.loads(await client.call_text("cancelled"))
    assert failed["error"]["code"] == -32603 and "result" not in failed
    assert failed["error"]["message"] == f"the job crashed holding key {REDACTED}"
    assert tool_error["result"]["isError"] is True
    assert (ack["resultType"], again["resultType"]) == ("complete", "complete") and "taskId" not in ack
    assert cancelled["status"] == "cancelled" and reached == [slow, slow]
    recorded = list(calls(tmp_path / "audit.db", "tools/call").values())
    crash_call, error_call, slow_call = recorded[:3]
    assert [(leg["phase"], leg["decision"]) for leg in crash_call] == [("request", "allow"), ("response", "error")]
    assert crash_call[-1]["error"]["code"] == -32603 and "AKIA" not in json.dumps(crash_call)
    assert [(leg["phase"], leg["decision"]) for leg in error_call] == [("request", "allow"), ("response", "allow")]
    assert [(leg["phase"], leg["status"]) for leg in slow_call][-1] == ("response", "cancelled")
    assert "open calls" not in await verified(config)


async def test_a_task_result_a_guard_blocks_shows_the_task_failed_with_the_blocks_error(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    """`secrets` with `action: deny`: the completed task's result is blocked as a plain call's would be; the
    client sees the task `failed` with the guard's error (never the result) and the call's record is the deny."""
    config = config_for(
        write_config, tmp_path, interceptors={"guards": [{"name": "secrets", "config": {"action": "deny"}}]}
    )
    with anyio.fail_after(60):
        async with gateway_client("http", config) as client:
            task_id = (await client.request("tools/call", {"name": "leak", "arguments": {}}))["taskId"]
            shown = await client.until(task_id, "completed", "failed")
            again = await client.request("tasks/get", {"taskId": task_id})
    assert shown["status"] == again["status"] == "failed" and "result" not in shown
    assert shown["error"]["code"] == -32602 and shown["error"]["data"]["interceptor"] == "secrets"
    assert "AKIA" not in json.dumps(shown)
    task_call = next(iter(calls(tmp_path / "audit.db", "tools/call").values()))
    assert [(leg["phase"], leg["decision"]) for leg in task_call] == [("request", "allow"), ("response", "deny")]
    assert "open calls" not in await verified(config)


async def test_another_principal_cannot_get_update_or_cancel_a_2026_07_28_task(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    """Two bearer tokens on the HTTP front, one HTTP upstream serving any task to anyone (it checks the
    `Mcp-Name` header names the task): only the gateway keeps Alice's task hers. Bob hears exactly what an
    unknown task id gets, and none of his requests reaches the upstream; a request that does not declare the
    extension is `-32021`; `tasks/result` and `tasks/list`, which the extension has not, are `-32601`."""
    upstream_port, port = free_tcp_port(), free_tcp_port()
    config = config_for(
        write_config,
        tmp_path,
        upstreams={"tasks": {"url": f"http://127.0.0.1:{upstream_port}/mcp", "era": "2026-07-28"}},
        auth={"tokens": ["alice-token-5d1e", "bob-token-8a0c"]},
    )
    url = f"http://127.0.0.1:{port}/mcp"
    argv = cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}")
    refused: dict[str, MCPError] = {}
    with anyio.fail_after(90):
        async with (
            running([sys.executable, UPSTREAM, "--http", str(upstream_port)], port=upstream_port, label="upstream"),
            running(argv, port=port, env=gateway_env(), label="HTTP gateway"),
            tasks_client(http_transport(url, headers={"Authorization": "Bearer alice-token-5d1e"})) as alice,
            tasks_client(http_transport(url, headers={"Authorization": "Bearer bob-token-8a0c"})) as bob,
        ):
            task_id = (await alice.request("tools/call", {"name": "slow_compute", "arguments": {"seconds": 60}}))[
                "taskId"
            ]
            for method in ("tasks/get", "tasks/update", "tasks/cancel"):
                with pytest.raises(MCPError) as failed:
                    await bob.request(method, {"taskId": task_id, "inputResponses": {}})
                refused[method] = failed.value
            with pytest.raises(MCPError) as unknown:
                await bob.request("tasks/get", {"taskId": "no-such-task"})
            with pytest.raises(MCPError) as undeclared:
                await alice.request("tasks/get", {"taskId": task_id}, declare=False)
            removed: dict[str, int] = {}
            for method in ("tasks/result", "tasks/list"):
                with pytest.raises(MCPError) as failed:
                    await alice.request(method, {"taskId": task_id})
                removed[method] = failed.value.error.code
            reached = json.loads(await bob.call_text("cancelled"))
            working = await alice.request("tasks/get", {"taskId": task_id})
            await alice.request("tasks/cancel", {"taskId": task_id})
            cancelled = json.loads(await alice.call_text("cancelled"))
    for method, exc in refused.items():
        assert exc.error.code == -32602
        assert exc.error.message == f"{method}: unknown task {task_id!r}"  # the gateway's, as for any unknown id
        assert exc.error.data == {"field": "taskId", "taskId": task_id}
    assert unknown.value.error.message == "tasks/get: unknown task 'no-such-task'"
    assert undeclared.value.error.code == -32021
    assert removed == {"tasks/result": -32601, "tasks/list": -32601}
    assert reached == []  # Bob's cancel never reached the upstream
    assert working["status"] == "working" and cancelled == [task_id]
    principals = {legs[0]["principal"]["id"] for legs in calls(tmp_path / "audit.db", "tools/call").values()}
    assert len(principals) == 2
    await verified(config)


async def test_an_input_required_tasks_question_and_answer_are_governed(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    """A task asking for input: the elicitation `tasks/get` shows runs its request chain (the credential in its
    message redacted), the answer `tasks/update` brings runs the response chain before the upstream sees it
    (the credential the user typed redacted), and the task completes with a governed result; the question and
    the answer are recorded inside the task's call, and the trail verifies."""
    config = config_for(write_config, tmp_path)
    answer = {"confirm": {"action": "accept", "content": {"reason": "key AKIA" + "IOSFODNN7EXAMPLQ"}}}
    with anyio.fail_after(60):
        async with gateway_client("stdio", config) as client:
            task_id = (await client.request("tools/call", {"name": "confirm_delete", "arguments": {}}))["taskId"]
            asked = await client.until(task_id, "input_required")
            again = await client.request("tasks/get", {"taskId": task_id})
            ack = await client.request("tasks/update", {"taskId": task_id, "inputResponses": answer})
            done = await client.until(task_id, "completed")
            updates = json.loads(await client.call_text("updates"))
    question = asked["inputRequests"]["confirm"]
    assert question["method"] == "elicitation/create"
    assert question["params"]["message"] == f"Delete it? (key {REDACTED})"
    assert again["inputRequests"] == asked["inputRequests"]
    assert ack["resultType"] == "complete"
    assert updates == [{"confirm": {"action": "accept", "content": {"reason": f"key {REDACTED}"}}}]
    assert done["result"]["content"][0]["text"] == f"deleted because key {REDACTED}"
    recorded = calls(tmp_path / "audit.db", "tools/call")
    task_call = next(iter(recorded.values()))
    assert [(leg["phase"], leg["decision"]) for leg in task_call] == [("request", "allow"), ("response", "allow")]
    elicited = calls(tmp_path / "audit.db", "elicitation/create")
    # Asked once however often it was polled, and answered: one call, its request and its answer.
    assert [[(leg["phase"], leg["decision"]) for leg in legs] for legs in elicited.values()] == [
        [("request", "allow"), ("response", "allow")]
    ]
    assert "AKIA" not in json.dumps([recorded, elicited])
    assert "open calls" not in await verified(config)


async def test_a_task_request_whose_mcp_name_header_does_not_name_its_task_gets_32020(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    """SEP-2663 over Streamable HTTP: `tasks/get`, `tasks/update` and `tasks/cancel` carry `Mcp-Name: <taskId>`;
    the HTTP front refuses one that is missing or names another task with `-32020` and HTTP 400, as mcp does for
    a tool's name."""
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(config_for(write_config, tmp_path)), "--http", f"127.0.0.1:{port}")
    meta = {PROTOCOL_VERSION_META_KEY: "2026-07-28", CLIENT_CAPABILITIES_META_KEY: DECLARED}
    answers = []
    with anyio.fail_after(60):
        async with running(argv, port=port, env=gateway_env(), label="HTTP gateway"), httpx2.AsyncClient() as http:
            for name in ("another-task", None):
                headers = {"mcp-protocol-version": "2026-07-28", "mcp-method": "tasks/get"}
                if name is not None:
                    headers["mcp-name"] = name
                body = {"jsonrpc": "2.0", "id": 7, "method": "tasks/get", "params": {"taskId": "t-1", "_meta": meta}}
                answers.append(await http.post(f"http://127.0.0.1:{port}/mcp", json=body, headers=headers))
    for answer in answers:
        assert answer.status_code == 400
        assert answer.json()["id"] == 7 and answer.json()["error"]["code"] == -32020
        assert "taskId" in answer.json()["error"]["message"]
