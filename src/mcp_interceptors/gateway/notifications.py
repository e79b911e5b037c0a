"""Notifications both ways: an upstream's go to the sessions they concern (a `list_changed` also drops what
those were shown), a handshake-era client's go to each of its upstream sessions.

No chain runs on notifications (the spec intercepts none, §1.2); relayed text is scrubbed by the upstream
connection (`scrub.notifications`); a task's status goes only to a session of the task's owner. 2026-07-28
clients get list changes on their `subscriptions/listen` stream, through mcp's subscription bus.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
)

from mcp_interceptors.gateway.connections import Connections
from mcp_interceptors.gateway.routing import LISTS
from mcp_interceptors.gateway.session import DownstreamSession
from mcp_interceptors.gateway.sessions import Sessions
from mcp_interceptors.gateway.task_relay import TaskRegistry, owner_of
from mcp_interceptors.gateway.tasks import TASK_STATUS
from mcp_interceptors.gateway.upstream.connection import OnUpstreamNotify


class Notifications:
    """Relays notifications; `bus` carries the events of 2026-07-28 clients' listen streams."""

    def __init__(self, sessions: Sessions, connections: Connections, tasks: TaskRegistry | None = None) -> None:
        self.sessions = sessions
        self.connections = connections
        self.tasks = tasks
        self.bus = InMemorySubscriptionBus()

    async def from_upstream(
        self, session: DownstreamSession, upstream: str, method: str, params: dict[str, Any] | None
    ) -> None:
        """Relay an upstream notification to `session`; `list_changed` also drops what it was shown."""
        if method.endswith("/list_changed"):
            list_method = method.removeprefix("notifications/").replace("list_changed", "list")
            session.invalidate(list_method if list_method in LISTS else None)
        if session.era != "legacy" or method.startswith("notifications/subscriptions/"):
            return  # 2026-07-28 clients get events on their own subscriptions/listen stream
        if method == TASK_STATUS and not await self._owns_task(session, params):
            return  # a task's status goes to its owner only (a task the gateway did not relay has none)
        target = session.standalone
        if target is not None:
            await target.notify(method, params)

    async def _owns_task(self, session: DownstreamSession, params: Mapping[str, Any] | None) -> bool:
        if self.tasks is None:
            return False
        return await self.tasks.owned_by((params or {}).get("taskId"), owner_of(session)) is not None

    def shared_handler(self, upstream: str) -> OnUpstreamNotify:
        """A notification on a shared connection: to every session that uses it, and to the listen streams."""

        async def handle(method: str, params: dict[str, Any] | None) -> None:
            event = _bus_event(method, params)
            shared = self.connections.shared.get(upstream)
            for session in list(self.sessions.by_key.values()):
                if session.era != "legacy" or session.upstreams.get(upstream) is shared:
                    await self.from_upstream(session, upstream, method, params)
            if event is not None:
                await self.bus.publish(event)

        return handle

    async def announce(self, methods: Iterable[str]) -> None:
        """The gateway's own listings changed (a reload changed the upstream set): every session is told."""
        for method in methods:
            for session in list(self.sessions.by_key.values()):
                await self.from_upstream(session, "", method, None)
            event = _bus_event(method, None)
            if event is not None:
                await self.bus.publish(event)

    async def from_client(self, session: DownstreamSession, method: str, params: dict[str, Any] | None) -> None:
        """A handshake-era client's notification goes to each of its upstream sessions."""
        if method in ("notifications/initialized", "notifications/cancelled") or session.era != "legacy":
            return
        for conn in (await self.connections.of(session)).values():
            await conn.notify(method, params)


def _bus_event(method: str, params: Mapping[str, Any] | None) -> ServerEvent | None:
    if method == "notifications/tools/list_changed":
        return ToolsListChanged()
    if method == "notifications/prompts/list_changed":
        return PromptsListChanged()
    if method == "notifications/resources/list_changed":
        return ResourcesListChanged()
    if method == "notifications/resources/updated" and isinstance((params or {}).get("uri"), str):
        return ResourceUpdated(uri=str((params or {})["uri"]))
    return None
