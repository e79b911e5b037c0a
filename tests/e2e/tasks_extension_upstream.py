"""A 2026-07-28 upstream that speaks the `io.modelcontextprotocol/tasks` extension (SEP-2663), stdio or `--http PORT`.

mcp 2.3 defines none of the extension, so this server is raw JSON-RPC, written from the wire the conformance
suite's tasks scenarios check (@modelcontextprotocol/conformance 0.2.0-alpha.12): `server/discover` advertises
the extension under `capabilities.extensions`; a `tools/call` of a task tool from a request whose `_meta`
client capabilities declare the extension is answered with a flat `CreateTaskResult` (`resultType: "task"`,
`taskId`, `status`, `createdAt`, `lastUpdatedAt`, `ttlMs`, `pollIntervalMs`); without the declaration the tool
runs at once (or `-32021` for a task-only tool). `tasks/get` answers the task with its `result` or `error`
inlined once it ended, or its `inputRequests` while `input_required`; `tasks/update` takes `inputResponses`
and `tasks/cancel` cancels, both acked with `{resultType: "complete"}`; an unknown task id is `-32602`; a
request not declaring the extension gets `-32021` for them; `tasks/result` and `tasks/list` are `-32601`.
It serves any task to whoever asks: only the gateway keeps a task to its owner.

Tools: `greet` (plain), `leak` (a task whose result and status message hold a credential), `slow_compute`
(a task sleeping `seconds`), `failing_job` (a task ending with a tool error), `protocol_error_job` (a task
ending `failed`), `confirm_delete` (a task asking an elicitation; its answer's `reason` is echoed),
`multi_input` (a task asking two), `test_tool_with_task` (an `input_required` round, then a task); `failing_job`
and `test_tool_with_task` are task only. `calls`, `cancelled`, `updates` and `client_capabilities` (what the
last `tools/call` declared) report. The conformance suite's tasks scenarios run against it
(docs/conformance.md, D19).
"""

from __future__ import annotations

import json
import sys
import uuid
from datetime import UTC, datetime
from typing import Any

import anyio

EXTENSION = "io.modelcontextprotocol/tasks"
CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
#: Assembled here, so it comes from the upstream and never crossed the request chain.
LEAK = "key AKIA" + "IOSFODNN7EXAMPLQ"
TASK_TOOLS = {"leak", "slow_compute", "failing_job", "protocol_error_job", "confirm_delete", "multi_input"}
#: Task only: called without the extension, they are `-32021`.
REQUIRED = {"failing_job", "test_tool_with_task"}
TASKS: dict[str, dict[str, Any]] = {}
CALLS: list[str] = []
CANCELLED: list[str] = []
UPDATES: list[Any] = []
SEEN: dict[str, Any] = {}


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def now() -> str:
    return datetime.now(UTC).isoformat()


def text(value: str, *, is_error: bool = False) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": value}]}
    if is_error:
        result["isError"] = True
    return result


def declares(params: dict[str, Any]) -> bool:
    capabilities = (params.get("_meta") or {}).get(CAPABILITIES_KEY) or {}
    return EXTENSION in (capabilities.get("extensions") or {})


def missing() -> RpcError:
    return RpcError(
        -32021, "Missing required client capability", {"requiredCapabilities": {"extensions": {EXTENSION: {}}}}
    )


def envelope(task: dict[str, Any]) -> dict[str, Any]:
    return {key: task[key] for key in ("taskId", "status", "statusMessage", "createdAt", "lastUpdatedAt", "ttlMs")}


def settle(task: dict[str, Any], status: str, **payload: Any) -> None:
    if task["status"] in ("completed", "failed", "cancelled"):
        return
    task.update(status=status, lastUpdatedAt=now(), **payload)
    task.pop("inputRequests", None)


async def run(task: dict[str, Any], name: str, arguments: dict[str, Any]) -> None:
    await anyio.sleep(float(arguments.get("seconds", 0.2)))
    if name == "leak":
        settle(task, "completed", result=text(LEAK), statusMessage=f"done with {LEAK}")
    elif name == "failing_job":
        settle(task, "completed", result=text("the job failed", is_error=True))
    elif name == "protocol_error_job":
        settle(task, "failed", error={"code": -32603, "message": f"the job crashed holding {LEAK}"})
    elif name == "confirm_delete":
        schema = {"type": "object", "properties": {"reason": {"type": "string"}}}
        params = {"mode": "form", "message": f"Delete it? ({LEAK})", "requestedSchema": schema}
        task.update(
            status="input_required", inputRequests={"confirm": {"method": "elicitation/create", "params": params}}
        )
    elif name == "multi_input":
        schema = {"type": "object", "properties": {"name": {"type": "string"}}}
        asked = {"method": "elicitation/create", "params": {"mode": "form", "message": "?", "requestedSchema": schema}}
        task.update(status="input_required", inputRequests={"first": asked, "second": asked})
    elif name == "test_tool_with_task":
        settle(task, "completed", result=text(f"Hello, {arguments['user_name']}!"))
    else:
        settle(task, "completed", result=text(f"computed {arguments.get('label', '')}"))


async def call_tool(params: dict[str, Any], tg: anyio.abc.TaskGroup) -> dict[str, Any]:
    name, arguments = params.get("name"), params.get("arguments") or {}
    if name not in {"calls", "cancelled", "updates", "client_capabilities"}:
        CALLS.append(str(name))
        SEEN["capabilities"] = (params.get("_meta") or {}).get(CAPABILITIES_KEY)
        SEEN["task_hint"] = "task" in params
    if name == "greet":
        return text(f"Hello, {arguments.get('name', 'World')}!")
    if name == "calls":
        return text(str(len(CALLS)))
    if name == "cancelled":
        return text(json.dumps(CANCELLED))
    if name == "updates":
        return text(json.dumps(UPDATES))
    if name == "client_capabilities":
        return text(json.dumps(SEEN))
    if name not in TASK_TOOLS | REQUIRED:
        raise RpcError(-32602, f"Unknown tool: {name}")
    if not declares(params):
        if name in REQUIRED:
            raise missing()
        return text(LEAK if name == "leak" else f"ran {name} at once")
    if name == "test_tool_with_task":  # asks first (an input_required round), then runs as a task
        answer = (params.get("inputResponses") or {}).get("user_name")
        if not isinstance(answer, dict):
            schema = {"type": "object", "properties": {"name": {"type": "string"}}}
            asked = {
                "method": "elicitation/create",
                "params": {"mode": "form", "message": "Name?", "requestedSchema": schema},
            }
            return {"resultType": "input_required", "inputRequests": {"user_name": asked}, "requestState": "round-1"}
        arguments = {**arguments, "user_name": (answer.get("content") or {}).get("name", "")}
    created = now()
    task = {
        "taskId": uuid.uuid4().hex,
        "status": "working",
        "statusMessage": f"working on {LEAK}",
        "createdAt": created,
        "lastUpdatedAt": created,
        "ttlMs": 60000,
    }
    TASKS[task["taskId"]] = task
    tg.start_soon(run, task, name, arguments)
    return {"resultType": "task", **envelope(task), "pollIntervalMs": 50}


def get_task(params: dict[str, Any]) -> dict[str, Any]:
    task = TASKS.get(params.get("taskId"))  # type: ignore[arg-type]
    if task is None:
        raise RpcError(-32602, f"Unknown task: {params.get('taskId')}")
    return task


def tools() -> list[dict[str, Any]]:
    names = ["greet", *sorted(TASK_TOOLS | REQUIRED), "calls", "cancelled", "updates", "client_capabilities"]
    listed = []
    for name in names:
        tool: dict[str, Any] = {"name": name, "inputSchema": {"type": "object"}}
        if name in TASK_TOOLS | REQUIRED:
            tool["execution"] = {"taskSupport": "required" if name in REQUIRED else "optional"}
        listed.append(tool)
    return listed


async def handle(method: str, params: dict[str, Any], tg: anyio.abc.TaskGroup) -> dict[str, Any]:
    if method == "server/discover":
        capabilities = {"tools": {}, "extensions": {EXTENSION: {}}}
        info = {"io.modelcontextprotocol/serverInfo": {"name": "tasks-extension-upstream", "version": "1.0.0"}}
        return {"supportedVersions": ["2026-07-28"], "capabilities": capabilities, "_meta": info}
    if method == "tools/list":
        return {"tools": tools(), "ttlMs": 0, "cacheScope": "private"}
    if method == "tools/call":
        return await call_tool(params, tg)
    if method in ("tasks/get", "tasks/update", "tasks/cancel"):
        if not declares(params):
            raise missing()
        task = get_task(params)
        if method == "tasks/get":
            return {**{key: value for key, value in task.items() if key != "answers"}, "pollIntervalMs": 50}
        if method == "tasks/cancel":
            CANCELLED.append(task["taskId"])
            settle(task, "cancelled")
            return {}
        UPDATES.append(params.get("inputResponses"))
        answers = params.get("inputResponses") or {}
        pending = task.get("inputRequests") or {}
        for key in [key for key in pending if isinstance(answers.get(key), dict)]:
            task.setdefault("answers", {})[key] = answers[key]
            del pending[key]
        if task["status"] == "input_required" and not pending:
            reason = ((task.get("answers") or {}).get("confirm", {}).get("content") or {}).get("reason", "")
            settle(task, "completed", result=text(f"deleted because {reason}"))
        return {}
    raise RpcError(-32601, f"Method not found: {method}")


async def answer(message: dict[str, Any], tg: anyio.abc.TaskGroup) -> dict[str, Any] | None:
    if "id" not in message or "method" not in message:
        return None  # notifications and responses: nothing to answer
    try:
        result = await handle(message["method"], message.get("params") or {}, tg)
    except RpcError as exc:
        error: dict[str, Any] = {"code": exc.code, "message": exc.message}
        if exc.data is not None:
            error["data"] = exc.data
        return {"jsonrpc": "2.0", "id": message["id"], "error": error}
    return {"jsonrpc": "2.0", "id": message["id"], "result": {"resultType": "complete", **result}}


async def serve_stdio() -> None:
    stdin, stdout = anyio.wrap_file(sys.stdin), anyio.wrap_file(sys.stdout)
    lock = anyio.Lock()
    async with anyio.create_task_group() as tg:

        async def reply(message: dict[str, Any]) -> None:
            response = await answer(message, tg)
            if response is not None:
                async with lock:
                    await stdout.write(json.dumps(response) + "\n")
                    await stdout.flush()

        async for line in stdin:
            if line.strip():
                tg.start_soon(reply, json.loads(line))
        tg.cancel_scope.cancel()


def serve_http(port: int) -> None:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    holder: dict[str, anyio.abc.TaskGroup] = {}

    async def mcp(request: Request) -> Response:
        message = await request.json()
        name = request.headers.get("mcp-name")
        if message.get("method", "").startswith("tasks/") and name != (message.get("params") or {}).get("taskId"):
            error = {"code": -32020, "message": "Mcp-Name header does not match params.taskId"}
            return JSONResponse({"jsonrpc": "2.0", "id": message.get("id"), "error": error}, status_code=400)
        response = await answer(message, holder["tg"])
        return Response(status_code=202) if response is None else JSONResponse(response)

    async def main() -> None:
        app = Starlette(routes=[Route("/mcp", mcp, methods=["POST"])])
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        async with anyio.create_task_group() as tg:
            holder["tg"] = tg
            await server.serve()
            tg.cancel_scope.cancel()

    anyio.run(main)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        serve_http(int(sys.argv[2]))
    else:
        anyio.run(serve_stdio)
