"""An upstream that supports MCP tasks (2025-11-25, experimental; stdio, or `--http PORT`).

mcp 2.3 has the tasks types but no server for them, so this one is hand-made: it advertises
`capabilities.tasks` in the handshake era and the `io.modelcontextprotocol/tasks` extension in
2026-07-28, answers a task-augmented `tools/call` with a `CreateTaskResult` (the call has run by
then: the task is `completed`, its status message a credential), and serves `tasks/get`, `tasks/result`,
`tasks/list` and `tasks/cancel` on any task, whoever asks (so only the gateway keeps a task to its owner).
Its `leak` tool answers with a credential, so a guard that never sees the result of `tasks/result` lets it
through. `calls` counts the tool calls that reached it; `cancelled` lists the task ids `tasks/cancel`
reached; `client_capabilities` shows what the client was presented as; `report_status` sends a
`notifications/tasks/status`; `sample_as_task` asks the client for a task-augmented `sampling/createMessage`
(server-to-client tasks) and answers with what came back.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import (
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    RequestParams,
    SamplingMessage,
    TaskMetadata,
    TaskStatusNotification,
    TaskStatusNotificationParams,
    TextContent,
)
from pydantic import BaseModel, ConfigDict

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
#: Assembled here, so it comes from the upstream and never crossed the request chain.
LEAK = "key AKIA" + "IOSFODNN7EXAMPLQ"
#: task id -> (the task, the result of the call it ran)
TASKS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
CALLS: list[str] = []
CANCELLED: list[str] = []


class AnyParams(RequestParams):
    model_config = ConfigDict(extra="allow")


def _as_dict(result: HandlerResult) -> dict[str, Any]:
    if isinstance(result, BaseModel):
        return result.model_dump(by_alias=True, exclude_none=True, mode="json")
    return dict(result or {})


def _task_of(ctx: ServerRequestContext[Any, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    task_id = (ctx.params or {}).get("taskId")
    if task_id not in TASKS:
        raise MCPError(-32602, f"Unknown task: {task_id}", {"taskId": task_id})
    return TASKS[task_id]


class Tasks(Extension):
    identifier = TASKS_EXTENSION

    def methods(self) -> Sequence[MethodBinding]:
        return [
            MethodBinding("tasks/get", AnyParams, self._get),
            MethodBinding("tasks/result", AnyParams, self._result),
            MethodBinding("tasks/list", AnyParams, self._list),
            MethodBinding("tasks/cancel", AnyParams, self._cancel),
        ]

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: AnyParams) -> dict[str, Any]:
        return dict(_task_of(ctx)[0])

    async def _result(self, ctx: ServerRequestContext[Any, Any], params: AnyParams) -> dict[str, Any]:
        return dict(_task_of(ctx)[1])

    async def _list(self, ctx: ServerRequestContext[Any, Any], params: AnyParams) -> dict[str, Any]:
        return {"tasks": [task for task, _ in TASKS.values()]}

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: AnyParams) -> dict[str, Any]:
        CANCELLED.append(str((ctx.params or {}).get("taskId")))
        raise MCPError(-32602, "Cannot cancel a completed task", {"taskId": (ctx.params or {}).get("taskId")})


server = MCPServer("tasks-upstream", version="1.0.0", extensions=[Tasks()])


@server.tool(description="Answer with a credential (as a task, when asked for one).")
async def leak() -> str:
    CALLS.append("leak")
    return LEAK


@server.tool(description="How many tool calls reached this server (this one excluded).")
async def calls() -> str:
    return str(len(CALLS))


@server.tool(description="The task ids tasks/cancel reached, as JSON.")
async def cancelled() -> str:
    return json.dumps(CANCELLED)


@server.tool(description="The capabilities the client was presented to this server with, as JSON.")
async def client_capabilities(ctx: Context) -> str:
    capabilities = ctx.client_capabilities
    return json.dumps(capabilities.model_dump(by_alias=True, exclude_none=True) if capabilities else {})


@server.tool(description="Ask the client for a task-augmented sampling/createMessage; answer with what came back.")
async def sample_as_task(ctx: Context) -> str:
    message = SamplingMessage(role="user", content=TextContent(type="text", text="hello"))
    params = CreateMessageRequestParams(messages=[message], max_tokens=5, task=TaskMetadata(ttl=60000))
    try:
        answer = await ctx.session.send_request(CreateMessageRequest(params=params), CreateMessageResult)
    except MCPError as exc:
        return json.dumps({"error": {"code": exc.error.code, "message": exc.error.message, "data": exc.error.data}})
    return json.dumps({"result": answer.model_dump(by_alias=True, exclude_none=True, mode="json")})


@server.tool(description="Send a task's status (its message leaks), then a log line, then answer.")
async def report_status(ctx: Context, task_id: str = "t1") -> str:
    now = datetime.now(UTC).isoformat()
    status = TaskStatusNotificationParams(
        task_id=task_id, status="working", status_message=LEAK, created_at=now, last_updated_at=now, ttl=None
    )
    await ctx.session.send_notification(TaskStatusNotification(params=status), related_request_id=ctx.request_id)
    await ctx.info("status sent", logger_name="tasks")
    return "reported"


async def tasks_support(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    raw = ctx.params or {}
    if ctx.method == "tools/call" and isinstance(raw.get("task"), dict):
        result = _as_dict(await call_next(ctx))
        now = datetime.now(UTC).isoformat()
        task = {
            "taskId": uuid.uuid4().hex,
            "status": "completed",
            "statusMessage": f"done with {LEAK}",
            "createdAt": now,
            "lastUpdatedAt": now,
        }
        TASKS[task["taskId"]] = ({**task, "ttl": None}, result)
        return {"task": {**task, "ttl": None}}
    result = await call_next(ctx)
    if ctx.method == "initialize":
        answered = _as_dict(result)
        tasks = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
        answered["capabilities"] = {**answered.get("capabilities", {}), "tasks": tasks}
        return answered
    return result


server.middleware.insert(0, tasks_support)

if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", port=int(sys.argv[2]))
    else:
        server.run("stdio")
