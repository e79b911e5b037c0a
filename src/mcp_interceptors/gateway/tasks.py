"""The gateway refuses MCP tasks (2025-11-25, experimental; the `io.modelcontextprotocol/tasks` extension in
2026-07-28), in both directions.

A task-augmented request is answered with a `CreateTaskResult`, and the real result is fetched later with
`tasks/result`: relayed, it would reach the client (or, for a client's task-augmented sampling answer, the
upstream) without the response chain, the tool policy or the audit trail. So the gateway advertises no
tasks either way, refuses a request carrying `params.task` before anything is sent, refuses `tasks/*`
requests as a server without tasks does, and drops `notifications/tasks/status` (docs/conformance.md, D19).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp import MCPError
from mcp_types import methods as wire_methods

from mcp_interceptors.protocol.errors import INVALID_PARAMS, METHOD_NOT_FOUND
from mcp_interceptors.protocol.events import CLIENT_INITIATED_EVENTS, SERVER_INITIATED_EVENTS

#: The 2026-07-28 extension that carries tasks (mcp 2.3 reserves its `resultType: "task"`, serves none of it).
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
_TASK_PREFIXES = ("tasks/", "notifications/tasks/")
#: The spec's requests, either way. A `task` in another method's params is a custom method's own field: unknown
#: methods pass through untouched.
_SPEC_REQUESTS = CLIENT_INITIATED_EVENTS | SERVER_INITIATED_EVENTS | wire_methods.SPEC_CLIENT_METHODS


def is_task_method(method: str) -> bool:
    """`tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel`, `notifications/tasks/status`, and any later one."""
    return method.startswith(_TASK_PREFIXES)


def task_refusal(method: str, params: Mapping[str, Any] | None) -> MCPError | None:
    """The error answering a request the gateway must not relay because of tasks, or None to relay it."""
    if is_task_method(method):
        return MCPError(METHOD_NOT_FOUND, f"Method not found: {method} (the gateway does not relay MCP tasks)", method)
    if params is not None and "task" in params and method in _SPEC_REQUESTS:
        return MCPError(
            INVALID_PARAMS,
            f"{method}: task-augmented requests are not supported through the gateway; send it without params.task",
            {
                "field": "task",
                "reason": "the gateway does not relay MCP tasks: a task's result, fetched later with tasks/result, "
                "would bypass the interceptor chain",
            },
        )
    return None


def without_tasks(capabilities: Mapping[str, Any]) -> dict[str, Any]:
    """`capabilities` minus tasks (`tasks`, and the tasks extension under `extensions` or `experimental`)."""
    kept = {key: value for key, value in capabilities.items() if key != "tasks"}
    for key in ("extensions", "experimental"):
        listed = kept.get(key)
        if isinstance(listed, Mapping) and TASKS_EXTENSION in listed:
            kept[key] = {name: value for name, value in listed.items() if name != TASKS_EXTENSION}
    return kept
