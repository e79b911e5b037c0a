"""One downstream client's state: its era, its upstream sessions, what it was shown, its calls in flight.

A `DownstreamSession` holds data and no behaviour that reaches outside it: `forward.Forwarder` serves its
requests, `sessions.Sessions` keeps it by key, `connections.Connections` opens its upstream sessions.
Handshake-era clients get upstream sessions of their own; 2026-07-28 requests share the gateway's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import anyio
from mcp import MCPError
from mcp_types import CONNECTION_CLOSED

from mcp_interceptors.gateway.auth import current_principal
from mcp_interceptors.gateway.routing import Catalog, advertised_keys
from mcp_interceptors.gateway.upstream.connection import UpstreamConnection
from mcp_interceptors.protocol.invoke import InvocationContext, Principal, now_iso

Era = Literal["legacy", "2026-07-28"]
#: The one handshake-era session of a stdio gateway (a transport with no session ids). Guards see it as the
#: gateway's `stdio_session_id`, drawn per process: gateways sharing guard state (a rate limit's Redis) each
#: serve a client of their own, whose counts must not add up.
STDIO_SESSION_KEY = "default"


class Downstream(Protocol):
    """The client side of one in-flight request: how to reach the client from the gateway."""

    async def request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]: ...

    async def notify(self, method: str, params: dict[str, Any] | None) -> None: ...

    async def progress(self, progress: float, total: float | None, message: str | None) -> None: ...

    async def notify_related(self, method: str, params: dict[str, Any] | None) -> None:
        """A notification about this request, on its own stream (logging, say)."""
        ...


@dataclass
class DownstreamSession:
    """Per-client state. `key` is the transport's session id (or one fixed key for stdio); `guard_id` is
    the `sessionId` guards see for it (the key, but for the stdio client's per-process id)."""

    key: str
    era: Era
    principal: Principal | None = None
    client_params: dict[str, Any] | None = None
    guard_id: str = ""
    upstreams: dict[str, UpstreamConnection] = field(default_factory=dict)
    #: The upstream sessions being opened for it (not yet in `upstreams`): ending the session closes them too.
    opening: list[UpstreamConnection] = field(default_factory=list)
    #: Closed (`Sessions.close`): it opens no upstream session any more.
    ended: bool = False
    catalog: Catalog | None = None
    advertised: dict[str, set[str]] = field(default_factory=dict)
    #: What each page of a paginated listing showed, by the cursor it was asked with (None: the first page):
    #: listing a page again replaces that page's items, never those of the other pages.
    shown_pages: dict[str, dict[str | None, set[str]]] = field(default_factory=dict)
    inflight: list[Downstream] = field(default_factory=list)
    standalone: Downstream | None = None
    last_used: float = 0.0
    #: Why the client ended the session with calls in flight (`end_calls`): those calls, and any after, answer it.
    end_reason: str | None = None
    #: Held while its own upstream sessions open (`Connections.of`), so they open once.
    opening_lock: anyio.Lock = field(default_factory=anyio.Lock)
    _call_scopes: set[anyio.CancelScope] = field(default_factory=set)

    def __post_init__(self) -> None:
        if not self.guard_id:
            self.guard_id = self.key

    def context(self, upstream: str | None, request_id: Any = None) -> InvocationContext:
        # Every value is ours and of its field's type already: built without validation, one per message
        # (`bench/gateway_overhead.py`).
        return InvocationContext.trusted(
            {
                # The request's own token: a session outlives tokens, and a later one may carry other claims.
                "principal": current_principal() or self.principal,
                "session_id": self.guard_id,
                "server": upstream,
                "trace_id": None if request_id is None else str(request_id),
                "timestamp": now_iso(),  # stamped once here rather than copied per chain
            }
        )

    # ------------------------------------------------------------------ what it was shown

    def invalidate(self, list_method: str | None = None) -> None:
        """Forget listings (and what was advertised) after a `list_changed`."""
        self.catalog = None
        if list_method is None:
            self.advertised.clear()
            self.shown_pages.clear()
        else:
            self.forget_shown(list_method)

    def forget_shown(self, list_method: str) -> None:
        """A listing that failed shows nothing: nothing listed before stays callable."""
        self.advertised.pop(list_method, None)
        self.shown_pages.pop(list_method, None)

    def shown(self, list_method: str, cursor: str | None, result: Mapping[str, Any]) -> None:
        """Note what one page of a listing showed (after its response chain)."""
        pages = self.shown_pages.setdefault(list_method, {})
        pages[cursor] = advertised_keys(list_method, result)
        self.advertised[list_method] = set().union(*pages.values())

    def was_advertised(self, shown: Mapping[str, set[str]], list_method: str, key: str) -> bool:
        """Whether `key` is among what `shown` (a copy of `advertised`) lists, or a template listed there matches."""
        if key in shown.get(list_method, set()):
            return True
        if list_method != "resources/list" or self.catalog is None:
            return False
        templates = shown.get("resources/templates/list", set())
        if key in templates:  # a template's own text (a completion's `ref/resource`)
            return True
        return any(tpl.match(key) is not None for text, tpl, _ in self.catalog.templates if text in templates)

    # ------------------------------------------------------------------ its calls

    @property
    def ends_calls(self) -> bool:
        """Whether the client can end this session with calls in flight (`end_calls`): a handshake-era HTTP
        client can (`DELETE`); a 2026-07-28 client has no session to end, and a stdio client ends its
        session only by closing its input, whose calls the stdio front drains."""
        return self.era == "legacy" and self.key != STDIO_SESSION_KEY

    def target(self) -> Downstream | None:
        """Where a request an upstream sends goes: the newest call's stream, else the session's own."""
        return self.inflight[-1] if self.inflight else self.standalone

    def end_calls(self, why: str) -> bool:
        """The client is ending the session: every request in flight is cancelled (an upstream request with
        `notifications/cancelled`) and answered -32000 with `why`, as is any that comes after. Whether there
        was any in flight."""
        if not self.ends_calls:
            return False
        self.end_reason = why
        for scope in self._call_scopes:
            scope.cancel()
        return bool(self._call_scopes)

    def ended_error(self) -> MCPError | None:
        """What a request of a session `end_calls` ended is answered (None: the session goes on)."""
        if self.end_reason is None:
            return None
        message = f"{self.end_reason}: this request was cancelled"
        return MCPError(CONNECTION_CLOSED, message, {"reason": "session_ended"})

    def call_scope(self) -> anyio.CancelScope:
        """A scope `end_calls` cancels, for one call of a handshake-era client (`forget_call_scope` after)."""
        scope = anyio.CancelScope()
        self._call_scopes.add(scope)
        return scope

    def forget_call_scope(self, scope: anyio.CancelScope) -> None:
        self._call_scopes.discard(scope)
