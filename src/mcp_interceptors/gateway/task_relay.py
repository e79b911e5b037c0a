"""Governed tool-call tasks (2025-11-25): who owns each task, and the `tasks/*` requests served for its owner.

A task-augmented `tools/call` runs the request chain like a plain one; its `CreateTaskResult` passes as is,
and the task is remembered in the state store (any replica finds it): its upstream, its owner (the
principal that created it, or its session when there is no principal) and its audit call id. `tasks/get`,
`tasks/list` and `tasks/cancel` go to that upstream for the owner only; another caller is told the task does
not exist. `tasks/result` runs the response chain on the final result, recorded on the creating call, so
a task is one audit call from creation to result.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from mcp import MCPError

from mcp_interceptors.gateway.connections import Connections
from mcp_interceptors.gateway.recording import CallRecord
from mcp_interceptors.gateway.reply import Replies
from mcp_interceptors.gateway.session import Downstream, DownstreamSession
from mcp_interceptors.protocol.errors import INTERNAL_ERROR, INVALID_PARAMS
from mcp_interceptors.state import StateStore

if TYPE_CHECKING:
    from mcp_interceptors.gateway.governor import Governor
    from mcp_interceptors.gateway.upstream.connection import UpstreamConnection

#: How long a task is remembered when its upstream keeps it without limit (`ttl: null`) or names no ttl.
DEFAULT_TASK_MEMORY_S = 24 * 3600.0
_KEY_PREFIX = "gateway:task:"


@dataclass(frozen=True)
class OwnedTask:
    """What the gateway remembers of a task it relayed."""

    owner: str
    upstream: str
    call_id: str
    #: The era of the client that created it: a task is served only on the requests of that era.
    era: str = "legacy"


def owner_of(session: DownstreamSession) -> str:
    """The principal a task belongs to: the request's (or session's) principal, else the session itself."""
    principal = session.context(None).principal
    if principal is not None and principal.id is not None:
        return f"{principal.type}:{principal.id}"
    return f"session:{session.guard_id}"


class TaskRegistry:
    """Task id -> `OwnedTask`, in the state store replicas share."""

    def __init__(self, state: StateStore) -> None:
        self.state = state

    async def remember(self, task: Mapping[str, Any], owned: OwnedTask) -> None:
        """Remember a task just created; a task id already owned by someone else fails closed (-32603)."""
        ttl_ms = task.get("ttl", task.get("ttlMs"))  # 2025-11-25 `ttl`, 2026-07-28 `ttlMs`
        ttl_s = ttl_ms / 1000 if isinstance(ttl_ms, int | float) and ttl_ms > 0 else DEFAULT_TASK_MEMORY_S
        stored = {"owner": owned.owner, "upstream": owned.upstream, "call_id": owned.call_id, "era": owned.era}
        value = json.dumps(stored)
        key = _KEY_PREFIX + str(task["taskId"])
        kept = await self.state.put(key, "task", value, ttl_s=ttl_s, only_new=True)
        if kept != value:
            raise MCPError(
                INTERNAL_ERROR,
                f"tools/call: upstream {owned.upstream!r} created a task whose id is already in use",
                {"reason": "task_id_in_use", "taskId": task["taskId"]},
            )

    async def find(self, task_id: str) -> OwnedTask | None:
        value = (await self.state.fields(_KEY_PREFIX + task_id)).get("task")
        if value is None:
            return None
        stored = json.loads(value)
        return OwnedTask(stored["owner"], stored["upstream"], stored["call_id"], stored.get("era", "legacy"))

    async def owned_by(self, task_id: Any, owner: str, era: str = "legacy") -> OwnedTask | None:
        """The task if `owner` created it from a client of `era` (None too for a task id that is no string)."""
        if not isinstance(task_id, str):
            return None
        found = await self.find(task_id)
        return found if found is not None and found.owner == owner and found.era == era else None

    async def asked(self, task_id: str) -> dict[str, str]:
        """The input requests a 2026-07-28 task showed so far: key -> method."""
        value = (await self.state.fields(_KEY_PREFIX + task_id)).get("asked")
        return dict(json.loads(value)) if value is not None else {}

    async def remember_asked(self, task_id: str, methods: Mapping[str, str]) -> None:
        merged = {**await self.asked(task_id), **methods}
        await self.state.put(_KEY_PREFIX + task_id, "asked", json.dumps(merged), ttl_s=DEFAULT_TASK_MEMORY_S)

    async def first_to_settle(self, task_id: str) -> bool:
        """Whether this caller is the first to see the task end (its record is closed once; any replica)."""
        mine = uuid.uuid4().hex
        kept = await self.state.put(_KEY_PREFIX + task_id, "settled", mine, ttl_s=DEFAULT_TASK_MEMORY_S, only_new=True)
        return kept == mine


def unknown_task(method: str, task_id: Any) -> MCPError:
    """What a caller who does not own the task hears: exactly what an unknown task id gets."""
    return MCPError(INVALID_PARAMS, f"{method}: unknown task {task_id!r}", {"field": "taskId", "taskId": task_id})


class EraTasks(Protocol):
    """The tasks of another era's clients (`task_extension.ExtensionTasks`: 2026-07-28)."""

    async def created(
        self,
        session: DownstreamSession,
        conn: UpstreamConnection,
        method: str,
        params: Mapping[str, Any],
        result: dict[str, Any],
        record: CallRecord,
    ) -> dict[str, Any] | None: ...

    async def serve(
        self,
        governor: Governor,
        session: DownstreamSession,
        method: str,
        params: dict[str, Any] | None,
        downstream: Downstream,
        request_id: Any,
    ) -> dict[str, Any]: ...


class TaskRelay:
    """Serves a handshake-era client's `tasks/*` requests on its own tasks (a 2026-07-28 client's: `extension`)."""

    def __init__(
        self,
        registry: TaskRegistry,
        connections: Connections,
        replies: Replies,
        extension: EraTasks | None = None,
    ) -> None:
        self.registry = registry
        self.connections = connections
        self.replies = replies
        #: Serves 2026-07-28 clients' tasks (`task_extension`).
        self.extension = extension

    async def created(
        self, session: DownstreamSession, upstream: str, task: Mapping[str, Any], record: CallRecord
    ) -> None:
        await self.registry.remember(task, OwnedTask(owner_of(session), upstream, record.call_id))

    async def serve(
        self,
        governor: Governor,
        session: DownstreamSession,
        method: str,
        params: dict[str, Any] | None,
        downstream: Downstream,
        request_id: Any,
    ) -> dict[str, Any]:
        if session.era != "legacy" and self.extension is not None:
            return await self.extension.serve(governor, session, method, params, downstream, request_id)
        owner = owner_of(session)
        if method == "tasks/list":
            return await self._list(session, owner, params)
        task_id = (params or {}).get("taskId")
        owned = await self.registry.owned_by(task_id, owner)
        conn = (await self.connections.of(session)).get(owned.upstream) if owned is not None else None
        if owned is None or conn is None:
            raise unknown_task(method, task_id)
        if method != "tasks/result":
            result = await conn.request(method, params, on_notify=downstream.notify_related)
            return self.scrubbed(result)
        context = session.context(owned.upstream, request_id)
        record = self.replies.continued_record(context, owned.call_id)
        try:
            result = await conn.request(method, params, on_notify=downstream.notify_related)
        except MCPError as exc:
            await self.replies.failed(record, "tools/call", exc)
        governed = await governor.govern_response("tools/call", result, context, record)
        return await self.replies.settled(governed, record)

    async def _list(self, session: DownstreamSession, owner: str, params: dict[str, Any] | None) -> dict[str, Any]:
        """The owner's tasks, from every upstream that lists tasks (a cursor is passed on only with one)."""
        conns = [
            conn
            for conn in (await self.connections.of(session)).values()
            if conn.era == "legacy"
            and conn.info is not None
            and isinstance(tasks := conn.info.capabilities.get("tasks"), Mapping)
            and "list" in tasks
        ]
        shown: list[Any] = []
        cursor: Any = None
        for conn in conns:
            asked = params if len(conns) == 1 else {k: v for k, v in (params or {}).items() if k != "cursor"}
            listed = await conn.request("tasks/list", asked)
            for task in listed.get("tasks") or ():
                if isinstance(task, Mapping) and await self.registry.owned_by(task.get("taskId"), owner):
                    shown.append(task)
            if len(conns) == 1:
                cursor = listed.get("nextCursor")
        result: dict[str, Any] = {"tasks": shown}
        if cursor is not None:
            result["nextCursor"] = cursor
        return self.scrubbed(result)

    def scrubbed(self, result: dict[str, Any]) -> dict[str, Any]:
        """A task's status, its words scrubbed as a result no event covers is (D18), its task ids kept as they
        are (the client names the task with them)."""
        scrubbed = self.replies.scrub_result(result)
        if scrubbed is result:
            return result
        if "taskId" in result:
            scrubbed["taskId"] = result["taskId"]
        if isinstance(task := result.get("task"), Mapping) and isinstance(scrubbed.get("task"), dict):
            scrubbed["task"]["taskId"] = task.get("taskId")
        listed, kept = result.get("tasks"), scrubbed.get("tasks")
        if isinstance(listed, list) and isinstance(kept, list):
            for original, task in zip(listed, kept, strict=True):
                if isinstance(original, Mapping) and isinstance(task, dict):
                    task["taskId"] = original.get("taskId")
        return scrubbed
