"""What the gateway's `initialize` and `server/discover` results advertise: the upstreams' merged capabilities,
the interceptors extension with the events the gateway enforces, and, with one upstream, its extensions
and `instructions`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp_interceptors.gateway.connections import Connections
from mcp_interceptors.gateway.host_methods import enforced_descriptors
from mcp_interceptors.gateway.scrub import Scrubber
from mcp_interceptors.gateway.sessions import Sessions
from mcp_interceptors.gateway.tasks import (
    GOVERNED_TASKS,
    TASKS_EXTENSION,
    offers_extension_tasks,
    offers_tasks,
    without_tasks,
)
from mcp_interceptors.invoker import Chain
from mcp_interceptors.protocol.descriptors import supported_events
from mcp_interceptors.protocol.events import EXTENSION_ID

_CAPABILITY_KEYS = ("tools", "prompts", "resources", "logging", "completions")


class Advertiser:
    """Patches the handshake results mcp's server makes."""

    def __init__(
        self,
        chain: Chain,
        connections: Connections,
        sessions: Sessions,
        scrubber: Scrubber | None,
        *,
        extension: bool = True,
    ) -> None:
        self.chain = chain
        #: Whether the interceptors extension is advertised (not when its methods are off for clients).
        self.extension = extension
        self.connections = connections
        self.sessions = sessions
        self.scrubber = scrubber

    def advertise(self, result: dict[str, Any], *, legacy: bool) -> None:
        """Patch the handshake result: merged upstream capabilities plus our extension."""
        shared = self.connections.shared
        merged: dict[str, Any] = {}
        for name, conn in shared.items():
            caps = conn.info.capabilities if conn.info is not None else {}
            for key in _CAPABILITY_KEYS:
                if key in caps:
                    mine = merged.setdefault(key, {})
                    for flag, value in (caps[key] or {}).items():
                        if key == "resources" and flag == "subscribe" and self._unrelayed_subscribe(name, legacy):
                            continue
                        mine[flag] = bool(mine.get(flag)) or value
        settings = {"supportedEvents": supported_events(enforced_descriptors(self.chain))}
        capabilities = {**merged, **{k: v for k, v in (result.get("capabilities") or {}).items() if k not in merged}}
        for key in _CAPABILITY_KEYS:
            if key not in merged:
                capabilities.pop(key, None)
        only = next(iter(shared.values())).info if len(shared) == 1 else None
        if only is not None:
            # One upstream: its extension methods are forwarded, so its extensions are advertised as it
            # advertises them (`extensions` only where the era's wire has them); ours wins on our own id.
            for key in ("experimental",) if legacy else ("experimental", "extensions"):
                if isinstance(theirs := only.capabilities.get(key), Mapping) and theirs:
                    capabilities[key] = {**theirs, **(capabilities.get(key) or {})}
        if self.extension:
            key = "experimental" if legacy else "extensions"
            capabilities[key] = {**(capabilities.get(key) or {}), EXTENSION_ID: settings}
        # Only the tasks the gateway governs (gateway/tasks.py): tool calls, when an upstream the client reaches in
        # its own era runs them as tasks; never what an upstream advertises as it is.
        result["capabilities"] = without_tasks(capabilities)
        if legacy and any(
            conn.info is not None and offers_tasks(conn.info.capabilities) and not self._bridges_handshake(name)
            for name, conn in shared.items()
        ):
            result["capabilities"]["tasks"] = GOVERNED_TASKS
        if not legacy and any(
            conn.era == "2026-07-28" and conn.info is not None and offers_extension_tasks(conn.info.capabilities)
            for conn in shared.values()
        ):  # a 2026-07-28 client's tool calls an upstream of that era turns into tasks (gateway/task_extension.py)
            advertised = result["capabilities"]
            advertised["extensions"] = {**(advertised.get("extensions") or {}), TASKS_EXTENSION: {}}
        if only is not None and only.instructions:
            # No event carries the handshake: the scrub (D18) stands in for the guards.
            scrubber = self.scrubber
            result["instructions"] = only.instructions if scrubber is None else scrubber.result(only.instructions)

    def _unrelayed_subscribe(self, upstream: str, legacy: bool) -> bool:
        """Whether `upstream`'s `resources.subscribe` flag would promise what the gateway cannot relay.

        On a 2026-07-28 connection it promises `resourceSubscriptions` on subscriptions/listen, which the gateway
        asks of no upstream: so for 2026-07-28 clients, and for handshake-era clients bridged to it. A
        handshake-era client with upstream sessions of its own is promised it once one of them showed that the
        upstream serves `resources/subscribe` (mcp's servers set the 2026-07-28 flag whenever they serve listen).
        """
        conn = self.connections.shared.get(upstream)
        if conn is None or conn.era != "2026-07-28":
            return False
        return not legacy or self._bridges_handshake(upstream) or upstream not in self.connections.handshake_subscribe

    def _bridges_handshake(self, upstream: str) -> bool:
        """Whether handshake-era clients reach `upstream` through its 2026-07-28 connection: a stdio
        gateway's client adopts it; an HTTP gateway's clients do once the upstream refused a session
        of their own (the first such client is advertised before its sessions open)."""
        conn = self.connections.shared.get(upstream)
        if conn is None or conn.era != "2026-07-28":
            return False
        return self.sessions.serves_stdio or upstream in self.connections.handshake_refused
