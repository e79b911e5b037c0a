"""The Streamable HTTP endpoint: mcp's session manager behind mcp's bearer auth, with the gateway's own checks of
a handshake-era session's requests (`SessionRequests`: a reused request id, a `DELETE` with calls in flight)
between the two, so they only ever see a request mcp's auth let through. `serve.http_app` builds the rest of
the app around it; the requests themselves enter the gateway at the server's middleware (`server.py`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import (
    AuthenticatedUser,
    BearerAuthBackend,
    RequireAuthMiddleware,
    authorization_context,
)
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.routes import build_resource_metadata_url, create_protected_resource_routes
from mcp.server.auth.settings import AuthSettings
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp_types import HEADER_MISMATCH
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import Request
from starlette.routing import BaseRoute, Route

from mcp_interceptors.gateway.auth import current_principal
from mcp_interceptors.gateway.fronts.bodies import REFUSED, json_response, shape_checked
from mcp_interceptors.gateway.fronts.resume import Resumer, ScopedEvents, resumer_for, scoped
from mcp_interceptors.gateway.jsonrpc.framing import INTERNAL_ERROR, error_response, id_in_use, is_request_id
from mcp_interceptors.gateway.session_slots import SessionRefusedError, Slot, owner_of
from mcp_interceptors.gateway.tasks import task_name_mismatch
from mcp_interceptors.state.events import new_scope

if TYPE_CHECKING:
    from mcp_interceptors.gateway.gateway import Gateway

#: How long a request reusing an answered request's id waits for mcp to be done with that one.
_ANSWERED_GRACE_S = 2.0
#: How long a `DELETE` waits for the session's calls it ended to send their error before mcp ends the session
#: (and with it their streams); recording a cancelled call in the audit trail is bounded well within it.
_ENDED_CALLS_GRACE_S = 3.0


def streamable_http_app(
    gateway: Gateway,
    security: TransportSecuritySettings,
    auth: AuthSettings | None,
    verifier: TokenVerifier | None,
    routes: list[BaseRoute],
) -> McpPathFirst:
    """`Server.streamable_http_app` assembled from the same public parts, with `SessionRequests` inside the auth
    check: there, nothing of an unauthenticated request's body is read (it gets its 401 at once), and the
    checks know who is asking. mcp's own assembly admits nothing between its auth and its transport."""
    http = gateway.config.http
    resumer = resumer_for(gateway.config, gateway.state)
    manager = StreamableHTTPSessionManager(
        app=gateway.server,
        # `json_response` stays off: see `serve.http_app`.
        event_store=ScopedEvents(resumer) if resumer is not None else None,
        security_settings=security,
        max_request_body_size=http.max_body_bytes,
        session_idle_timeout=http.session_idle_s,
    )
    endpoint: Any = SessionRequests(StreamableHTTPASGIApp(manager), gateway, security, resumer)
    middleware: list[Middleware] = []
    extra: list[BaseRoute] = []
    direct = endpoint
    if auth is not None and verifier is not None:
        # The verifier checks `aud` itself (see `auth.build_auth`): no resource check here.
        backend = BearerAuthBackend(verifier)
        middleware = [Middleware(AuthenticationMiddleware, backend=backend), Middleware(AuthContextMiddleware)]
        metadata = build_resource_metadata_url(auth.resource_server_url) if auth.resource_server_url else None
        endpoint = RequireAuthMiddleware(endpoint, auth.required_scopes or [], metadata)
        direct = AuthenticationMiddleware(AuthContextMiddleware(endpoint), backend=backend)
        if auth.resource_server_url:
            extra = list(
                create_protected_resource_routes(
                    resource_url=auth.resource_server_url,
                    authorization_servers=[auth.issuer_url],
                    scopes_supported=auth.required_scopes,
                )
            )
    app = Starlette(
        routes=[Route(http.path, endpoint=endpoint), *extra, *routes],
        middleware=middleware,
        lifespan=lambda app: _serving(manager, resumer),
    )
    return McpPathFirst(app, http.path, direct)


@contextlib.asynccontextmanager
async def _serving(manager: StreamableHTTPSessionManager, resumer: Resumer | None) -> AsyncIterator[None]:
    try:
        async with manager.run():
            yield
    finally:
        if resumer is not None:
            await resumer.aclose()


class McpPathFirst:
    """ASGI app: an HTTP request for exactly the MCP path goes to its endpoint (behind the same auth middleware),
    everything else (the lifespan, the other routes, `/mcp/`'s redirect) to the Starlette app.

    Starlette's layers (its error and exception middleware, the router's matching, a wrapper around every `send`)
    do nothing there and cost a measurable share of each call (`bench/gateway_overhead.py`, HTTP cells): the
    endpoint accepts every method and raises no `HTTPException`, and an exception it raises still gets uvicorn's
    bare 500, as Starlette's would be."""

    def __init__(self, app: Starlette, path: str, endpoint: Any) -> None:
        self.app = app
        self.path = path
        self.endpoint = endpoint

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == self.path and not scope.get("root_path"):
            await self.endpoint(scope, receive, send)
        else:
            await self.app(scope, receive, send)


class SessionRequests:
    """ASGI wrapper of mcp's Streamable HTTP transport for a handshake-era session's requests (those naming an
    `Mcp-Session-Id`, in a handshake-era version or none), once mcp's auth let them through.

    - A POST reusing the id of a request in flight gets -32600 (`data: {field: "id"}`), as on stdio: mcp keys
      a POST's answer stream by `str(id)` (`1` and `"1"` collide), so the second would take the first's stream.
      One reusing an id whose answer is already out waits briefly for mcp to be done with it.
    - A GET's `Last-Event-ID` is checked against the session's events (`resume.Resumer`) when streams are
      resumable, else dropped: there are no event ids to resume from.
    - A DELETE of the session ends its calls in flight first (-32000 on their streams, cancelled upstream),
      then lets mcp end the session, which would close their streams empty.

    Ids are kept per session and per caller (mcp's `authorization_context`): a caller naming someone else's
    session gets mcp's own 404. The body is parsed here and again by mcp: by the time mcp hands the parsed
    request on (the server's middleware), it has already given its id's stream away.
    """

    def __init__(
        self, app: Any, gateway: Gateway, security: TransportSecuritySettings, resumer: Resumer | None = None
    ) -> None:
        self.app = app
        self.resumer = resumer
        self.gateway = gateway
        self.checks = TransportSecurityMiddleware(security)
        self.max_body = gateway.config.http.max_body_bytes
        #: (session id, caller) -> str(request id) -> that request, while mcp serves it
        self.in_flight: dict[tuple[str, Any], dict[str, _InFlight]] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers") or []) if scope.get("type") == "http" else {}
        message: Any = None
        if scope.get("method") == "POST":
            message, receive = await shape_checked(scope, receive, send, self.max_body)
            if message is REFUSED:
                return
        session = headers.get(b"mcp-session-id")
        version = headers.get(b"mcp-protocol-version")
        if version is not None and version.decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS:
            if (mismatch := task_name_mismatch(message, headers.get(b"mcp-name"))) is not None:
                await json_response(400, error_response(_request_id(message), HEADER_MISMATCH, mismatch))(
                    scope, receive, send
                )
                return
            await self.app(scope, receive, send)  # a 2026-07-28 request: mcp's alone
            return
        if session is None:
            await self._open(message, scope, receive, send)
            return
        slot = self.gateway.sessions.slots.started(session.decode("latin-1"), owner_of(current_principal()))
        try:
            with scoped(slot.stream_scope if slot is not None else None):
                key = (session.decode("latin-1"), _caller(scope))
                await self._in_session(key, slot, message, scope, receive, send)
        finally:
            if slot is not None:
                self.gateway.sessions.slot_done(slot)

    async def _in_session(
        self, key: tuple[str, Any], slot: Slot | None, message: Any, scope: Any, receive: Any, send: Any
    ) -> None:
        headers = dict(scope.get("headers") or [])
        if scope.get("method") == "POST":
            await self._post(key, message, scope, receive, send)
        elif scope.get("method") == "DELETE":
            await self._delete(key, scope, receive, send)
        elif scope.get("method") == "GET" and b"last-event-id" in headers and self.resumer is not None:
            last = headers[b"last-event-id"].decode("latin-1")
            owner = owner_of(current_principal())
            if not await self.resumer.resume(last, key[0], slot, owner, scope, receive, send):
                await self.app(scope, receive, send)
        elif scope.get("method") == "GET" and b"last-event-id" in headers:
            # Without an event store mcp answers such a GET with nothing at all; the gateway sends no event ids,
            # so there is nothing to resume from: the header is ignored, as the TypeScript SDK does.
            kept = [(name, value) for name, value in scope["headers"] if name.lower() != b"last-event-id"]
            await self.app({**scope, "headers": kept}, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _open(self, message: Any, scope: Any, receive: Any, send: Any) -> None:
        """A request naming no session, for which mcp would open one: it takes a slot first (`http.max_sessions`
        and the caller's share) or gets 503 with -32603. The slot holds the session mcp answers it with, and is
        given back at once when it opened none."""
        sessions = self.gateway.sessions
        try:
            slot = sessions.take_slot(current_principal())
        except SessionRefusedError as exc:
            refused = error_response(_request_id(message), INTERNAL_ERROR, exc.message, exc.data)
            await json_response(503, refused)(scope, receive, send)
            return

        stream_scope = new_scope() if self.resumer is not None else None

        async def watch(message: Any) -> None:
            if message.get("type") == "http.response.start" and int(message.get("status", 500)) < 400:
                opened = dict(message.get("headers") or ()).get(b"mcp-session-id")
                if opened is not None:
                    sessions.slots.bind(slot, bytes(opened).decode("latin-1"))
                    if self.resumer is not None and stream_scope is not None:
                        slot.stream_scope = stream_scope
                        await self.resumer.bind(stream_scope, bytes(opened).decode("latin-1"), slot.owner)
            await send(message)

        try:
            with scoped(stream_scope):  # mcp's tasks for the session it opens inherit it
                await self.app(scope, receive, watch)
        finally:
            sessions.slot_done(slot)
            if slot.key is None:
                sessions.release_slot(slot)

    async def _post(self, key: tuple[str, Any], message: Any, scope: Any, receive: Any, send: Any) -> None:
        """A POST of session `key`; `message` is its body, parsed (None: not read, or not JSON)."""
        request_id = _request_id(message)
        if request_id is None:
            await self.app(scope, receive, send)
            return
        ids = self.in_flight.setdefault(key, {})
        held = ids.get(str(request_id))
        if held is not None and held.answered:
            with anyio.move_on_after(_ANSWERED_GRACE_S):  # answered: mcp is closing its stream
                await held.done.wait()
            held = ids.get(str(request_id))
        if held is not None:
            await json_response(400, id_in_use(request_id))(scope, receive, send)
            return
        ids[str(request_id)] = entry = _InFlight()

        async def sending(message: Any) -> None:
            if message.get("type") == "http.response.body" and not message.get("more_body", False):
                entry.answered = True  # before the last bytes go out: the client cannot send the next sooner
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            if ids.get(str(request_id)) is entry:
                del ids[str(request_id)]
            if not ids and self.in_flight.get(key) is ids:
                del self.in_flight[key]
            entry.done.set()

    async def _delete(self, key: tuple[str, Any], scope: Any, receive: Any, send: Any) -> None:
        """End the session's calls (if this caller may end the session), then the session."""
        session_id = key[0]
        refused = await self.checks.validate_request(Request(scope, receive))
        if refused is None and self.gateway.sessions.end_calls(session_id, current_principal()):
            with anyio.move_on_after(_ENDED_CALLS_GRACE_S):
                for entry in list(self.in_flight.get(key, {}).values()):
                    await entry.done.wait()
        status = 0

        async def watch(message: Any) -> None:
            nonlocal status
            if message.get("type") == "http.response.start":
                status = int(message.get("status", 0))
            await send(message)

        await self.app(scope, receive, watch)
        if 200 <= status < 300:
            self.gateway.sessions.close(session_id)
            if (slot := self.gateway.sessions.slots.by_key.get(session_id)) is not None:
                self.gateway.sessions.release_slot(slot)
                if self.resumer is not None and slot.stream_scope is not None:
                    await self.resumer.forget(slot.stream_scope)


class _InFlight:
    """A request holding its id: whether its answer is all sent, and when mcp is done with it."""

    def __init__(self) -> None:
        self.answered = False
        self.done = anyio.Event()


def _caller(scope: Any) -> Any:
    """Who is asking, as mcp tells a session's owner from others (None without auth)."""
    user = scope.get("user")
    if not isinstance(user, AuthenticatedUser):
        return None
    return tuple(sorted(authorization_context(user).items()))


def _request_id(message: Any) -> Any:
    """The id of the request `message` is, else None (a notification, an answer: mcp's)."""
    if not isinstance(message, dict) or not isinstance(message.get("method"), str):
        return None
    request_id = message.get("id")
    return request_id if is_request_id(request_id) else None
