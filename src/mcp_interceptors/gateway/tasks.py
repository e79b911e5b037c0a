"""Which MCP tasks the gateway governs, and which it refuses (docs/conformance.md, D19).

A task is answered with a `CreateTaskResult`, and the real result is fetched later. The gateway governs the
two cases it can follow from creation to result, in each era between a client and an upstream of that era:
a handshake-era (2025-11-25) client's task-augmented `tools/call` (its `tasks/get`, `tasks/result`,
`tasks/list` and `tasks/cancel` served by `task_relay`), and a 2026-07-28 client's `tools/call` that a
2026-07-28 upstream turns into a task of the `io.modelcontextprotocol/tasks` extension (SEP-2663: its
`tasks/get`, `tasks/update` and `tasks/cancel` served by `task_extension`). Everything else is refused, as a
server without tasks refuses it: `params.task` on any other request, a 2026-07-28 `resultType: "task"` on
anything but such a `tools/call`, `tasks/result` and `tasks/list` from a 2026-07-28 client (the extension has
neither), tasks across the bridge between eras, and server-to-client tasks (no client tasks are presented
upstream, an upstream's task-augmented request gets `-32602`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp_types import CLIENT_CAPABILITIES_META_KEY
from mcp_types import methods as wire_methods

from mcp_interceptors.protocol.errors import INVALID_PARAMS, METHOD_NOT_FOUND
from mcp_interceptors.protocol.events import CLIENT_INITIATED_EVENTS, SERVER_INITIATED_EVENTS

#: The 2026-07-28 extension that carries tasks (SEP-2663; mcp 2.3 reserves its `resultType: "task"`, defines
#: none of it: the gateway handles its messages as the raw dicts they are).
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
_TASK_PREFIXES = ("tasks/", "notifications/tasks/")
#: The requests a handshake-era client sends about its tasks, which the gateway serves (`task_relay`).
TASK_REQUESTS = frozenset({"tasks/get", "tasks/result", "tasks/list", "tasks/cancel"})
#: The requests a 2026-07-28 client sends about its tasks, which the gateway serves (`task_extension`).
EXTENSION_TASK_REQUESTS = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})
TASK_STATUS = "notifications/tasks/status"
#: What a handshake-era client is promised when an upstream runs tool calls as tasks: what the gateway governs.
GOVERNED_TASKS: dict[str, Any] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
#: Why any other task is refused (in the errors a client reads).
_GOVERNED_ONLY = (
    "the gateway governs only tools/call tasks: a handshake-era (2025-11-25) client's, and 2026-07-28 "
    f"{TASKS_EXTENSION} ones (tasks/get, tasks/update, tasks/cancel), not tasks a server asks of the client"
)
#: The spec's requests, either way. A `task` in another method's params is a custom method's own field: unknown
#: methods pass through untouched.
_SPEC_REQUESTS = CLIENT_INITIATED_EVENTS | SERVER_INITIATED_EVENTS | wire_methods.SPEC_CLIENT_METHODS


def is_task_method(method: str) -> bool:
    """`tasks/get`, `tasks/result`, `tasks/list`, `tasks/cancel`, `tasks/update`, `notifications/tasks/status`, the
    2026-07-28 `notifications/tasks`, and any later one."""
    return method.startswith(_TASK_PREFIXES) or method == "notifications/tasks"


def task_refusal(
    method: str, params: Mapping[str, Any] | None, *, governed: bool = False, era: str = "legacy"
) -> MCPError | None:
    """The error answering a request the gateway must not relay because of tasks, or None to relay it.

    `governed`: the gateway serves the tasks of the client's `era` (its tool-call tasks)."""
    if governed and era == "legacy" and (method in TASK_REQUESTS or (method == "tools/call" and params is not None)):
        return None
    if governed and era != "legacy" and method in EXTENSION_TASK_REQUESTS:
        return None
    if is_task_method(method):
        return MCPError(METHOD_NOT_FOUND, f"Method not found: {method} ({_GOVERNED_ONLY})", method)
    if params is not None and "task" in params and method in _SPEC_REQUESTS:
        return MCPError(
            INVALID_PARAMS,
            f"{method}: this task-augmented request is refused by the gateway; send it without params.task",
            {
                "field": "task",
                "reason": f"{_GOVERNED_ONLY}: this task's result, fetched later with tasks/result, "
                "would bypass the interceptor chain",
            },
        )
    return None


def declares_tasks(params: Mapping[str, Any] | None) -> bool:
    """Whether a 2026-07-28 request's `_meta` client capabilities declare the tasks extension."""
    meta = (params or {}).get("_meta")
    capabilities = meta.get(CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, Mapping) else None
    listed = capabilities.get("extensions") if isinstance(capabilities, Mapping) else None
    return isinstance(listed, Mapping) and TASKS_EXTENSION in listed


def without_task_hint(params: dict[str, Any] | None) -> dict[str, Any] | None:
    """A 2026-07-28 `tools/call` without a handshake-era `task` hint, which SEP-2663 tolerates and ignores (the
    upstream alone decides whether a call becomes a task)."""
    if params is None or "task" not in params:
        return params
    return {key: value for key, value in params.items() if key != "task"}


def is_task_augmented(params: Mapping[str, Any] | None) -> bool:
    return params is not None and "task" in params


def created_task(result: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The `task` of a `CreateTaskResult` (an upstream may run a task-augmented call at once instead)."""
    task = result.get("task")
    if isinstance(task, Mapping) and isinstance(task.get("taskId"), str) and "content" not in result:
        return task
    return None


def offers_tasks(capabilities: Mapping[str, Any]) -> bool:
    """Whether an upstream runs tool calls as tasks (`tasks.requests.tools.call`, or the tasks extension)."""
    tasks = capabilities.get("tasks")
    requests = tasks.get("requests") if isinstance(tasks, Mapping) else None
    tools = requests.get("tools") if isinstance(requests, Mapping) else None
    if isinstance(tools, Mapping) and "call" in tools:
        return True
    return any(
        isinstance(listed, Mapping) and TASKS_EXTENSION in listed
        for listed in (capabilities.get("extensions"), capabilities.get("experimental"))
    )


def task_name_mismatch(message: Any, header: bytes | None) -> str | None:
    """Why a 2026-07-28 HTTP `tasks/get`, `tasks/update` or `tasks/cancel` is refused with `-32020` (SEP-2663 asks its
    `Mcp-Name` header to name `params.taskId`), or None when it does or the message is no such request."""
    if not isinstance(message, Mapping) or message.get("method") not in EXTENSION_TASK_REQUESTS:
        return None
    params = message.get("params")
    task_id = params.get("taskId") if isinstance(params, Mapping) else None
    if not isinstance(task_id, str):
        return None  # malformed: the gateway answers it (-32602)
    if header is not None and decode_header_value(header.decode("latin-1")) == task_id:
        return None
    return f"{MCP_NAME_HEADER} header does not match the request body's 'taskId' parameter"


def offers_extension_tasks(capabilities: Mapping[str, Any]) -> bool:
    """Whether a 2026-07-28 upstream advertises the tasks extension (under `extensions`)."""
    listed = capabilities.get("extensions")
    return isinstance(listed, Mapping) and TASKS_EXTENSION in listed


def unbridged_task(method: str) -> MCPError:
    """A handshake-era client's task-augmented call routed to an upstream reached in the 2026-07-28 era."""
    return MCPError(
        INVALID_PARAMS,
        f"{method}: this upstream is reached in the 2026-07-28 era, whose tasks the gateway does not govern; "
        "send it without params.task",
        {"field": "task", "reason": "the gateway governs tasks of handshake-era (2025-11-25) upstream sessions only"},
    )


def untasked_upstream(method: str, upstream: str) -> MCPError:
    """A task-augmented call routed to an upstream that does not run tool calls as tasks: it would answer with a
    plain result where the client waits for a task."""
    return MCPError(
        INVALID_PARAMS,
        f"{method}: upstream {upstream!r} does not run tool calls as tasks; send it without params.task",
        {"field": "task", "reason": f"upstream {upstream!r} advertises no tasks.requests.tools.call"},
    )


def routed_task_refusal(
    params: Mapping[str, Any] | None, upstream: str, era: str, offered: Mapping[str, Any] | None
) -> MCPError | None:
    """The error for a task-augmented `tools/call` the upstream it was routed to cannot run as a governed task."""
    if not is_task_augmented(params):
        return None
    if era != "legacy":
        return unbridged_task("tools/call")
    if offered is None or not offers_tasks(offered):
        return untasked_upstream("tools/call", upstream)
    return None


def without_tasks(capabilities: Mapping[str, Any], *, keep_extension: bool = False) -> dict[str, Any]:
    """`capabilities` minus tasks (`tasks`, and the tasks extension under `extensions` or `experimental`;
    `keep_extension` keeps it under `extensions`)."""
    kept = {key: value for key, value in capabilities.items() if key != "tasks"}
    for key in ("experimental",) if keep_extension else ("extensions", "experimental"):
        listed = kept.get(key)
        if isinstance(listed, Mapping) and TASKS_EXTENSION in listed:
            kept[key] = {name: value for name, value in listed.items() if name != TASKS_EXTENSION}
    return kept
