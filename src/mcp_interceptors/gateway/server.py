"""The gateway's mcp `Server`: the handshake, discovery, ping, listen and the interceptor-host methods are its
own; its one middleware hands every other request mcp's transports deliver to the forwarder.

This is where requests read by mcp's transports (Streamable HTTP, `/sse`, and the stdio front's handshake)
enter the gateway. The server is a bare low-level `Server`, so every serving transport and both eras work.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import anyio
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.server.subscriptions import ListenHandler
from mcp.shared.message import ServerMessageMetadata
from mcp_types import Notification, Request, Result
from mcp_types import methods as wire_methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, ValidationError

from mcp_interceptors.gateway.advertise import Advertiser
from mcp_interceptors.gateway.auth import current_principal
from mcp_interceptors.gateway.forward import Forwarder
from mcp_interceptors.gateway.host_methods import HostMethods
from mcp_interceptors.gateway.listings import Listings
from mcp_interceptors.gateway.notifications import Notifications
from mcp_interceptors.gateway.sessions import Sessions, era_and_transport_session, session_key
from mcp_interceptors.gateway.upstream.connection import UpstreamConnection
from mcp_interceptors.protocol.errors import InterceptorsError
from mcp_interceptors.protocol.invoke import EXECUTE_CHAIN_METHOD, INVOKE_METHOD, LIST_METHOD

logger = logging.getLogger(__name__)

#: Requests the gateway's own `Server` answers instead of forwarding.
LOCAL_METHODS = frozenset(
    {"initialize", "server/discover", "ping", "subscriptions/listen", LIST_METHOD, INVOKE_METHOD, EXECUTE_CHAIN_METHOD}
)
#: Tool schemas whose `x-mcp-header` check is remembered (all are forgotten past it: listings are refreshed).
_HEADER_SCHEMAS_KEPT = 4096


class RawRequest(Request[dict[str, Any] | None, str]):
    method: str
    params: dict[str, Any] | None = None


class RawNotification(Notification[dict[str, Any] | None, str]):
    method: str
    params: dict[str, Any] | None = None


class RawResult(Result):
    model_config = ConfigDict(extra="allow")


class ServerSessionDownstream:
    """Reaches the client through mcp's `ServerSession`: on the request's own stream when in flight."""

    def __init__(self, ctx: ServerRequestContext[Any, Any], *, scoped: bool = True) -> None:
        self.ctx = ctx
        self.scoped = scoped and ctx.request_id is not None

    async def request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        metadata = ServerMessageMetadata(related_request_id=self.ctx.request_id) if self.scoped else None
        raw = await self.ctx.session.send_request(
            RawRequest(method=method, params=params),  # type: ignore[arg-type]
            RawResult,
            metadata=metadata,
        )
        return raw.model_dump(by_alias=True, mode="json", exclude_unset=True)

    async def notify(self, method: str, params: dict[str, Any] | None) -> None:
        await self.ctx.session.send_notification(RawNotification(method=method, params=params))  # type: ignore[arg-type]

    async def notify_related(self, method: str, params: dict[str, Any] | None) -> None:
        notification = RawNotification(method=method, params=params)
        await self.ctx.session.send_notification(notification, related_request_id=self.ctx.request_id)  # type: ignore[arg-type]

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        await self.ctx.session.report_progress(progress, total, message)


def new_server(name: str, version: str, notifications: Notifications) -> Server[Any]:
    """A bare mcp `Server` whose `subscriptions/listen` streams carry the relayed list changes."""
    # serverInfo needs a version: clients warn on an empty one.
    return Server(name, version=version, on_subscriptions_listen=ListenHandler(notifications.bus))


class GatewayServer:
    """The middleware of the gateway's mcp `Server` (installed on `server` as its only one)."""

    def __init__(
        self,
        server: Server[Any],
        *,
        sessions: Sessions,
        forwarder: Forwarder,
        listings: Listings,
        notifications: Notifications,
        advertiser: Advertiser,
        host_methods: HostMethods,
    ) -> None:
        self.sessions = sessions
        self.forwarder = forwarder
        self.listings = listings
        self.notifications = notifications
        self.advertiser = advertiser
        self.host_methods = host_methods
        self.server = server
        # mcp installs a tracing middleware by default; it costs on every forwarded message
        # (`bench/gateway_overhead.py`, HTTP cells) and the gateway records its own decisions, so the
        # gateway's middleware is the only one.
        self.server.middleware[:] = [self.middleware]
        # mcp validates `Mcp-Param-*` headers (SEP-2243) against the called tool's schema before dispatch.
        self.server.get_tool_input_schema = self.tool_input_schema
        host_methods.register(self.server)
        #: (upstream, uri) -> listen streams of 2026-07-28 clients subscribed to it there
        self._listen_subscriptions: dict[tuple[str, str], int] = {}
        #: id(inputSchema) -> (that schema, whether it declares an `x-mcp-header`): see `tool_input_schema`
        self._header_schemas: dict[int, tuple[Mapping[str, Any], bool]] = {}

    # ------------------------------------------------------------------ the middleware

    async def middleware(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        method = ctx.method
        if ctx.request_id is None:
            if method in wire_methods.SPEC_CLIENT_METHODS:
                # A request whose id mcp's models cannot read (null, a fraction, an object) comes as a notification:
                # relayed, a `tools/call` reached the upstream past the chain. A direct server ignores it too.
                logger.warning("ignored a %s without a usable id (a string or an integer)", method)
            elif method not in ("notifications/cancelled", "notifications/initialized"):
                params = dict(ctx.params) if ctx.params is not None else None
                await self.notifications.from_client(self.sessions.for_context(ctx), method, params)
            return await call_next(ctx)
        key = self._http_session_key(ctx)
        if key is None:
            return await self._request(ctx, call_next)
        self.sessions.claim_request_slot(key)
        try:
            return await self._request(ctx, call_next)
        finally:
            self.sessions.release_request_slot(key)

    def _http_session_key(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        """What an HTTP request counts against for `http.max_requests_in_flight`: the key of its
        `DownstreamSession`, and for a 2026-07-28 request without a token, the address it came from (those share
        one session, but one client's slow calls must not use up every other client's budget). None off HTTP
        (the stdio front counts its own) and for a handshake-era request without a session yet (an
        `initialize`: `http.max_sessions` bounds those)."""
        if ctx.request is None:
            return None
        era, transport_session = era_and_transport_session(ctx)
        if era == "legacy" and transport_session is None:
            return None
        principal = current_principal()
        key = session_key(era, transport_session, principal)
        if era != "legacy" and principal is None:
            peer = ctx.request.client
            key += f"@{peer.host if peer is not None else 'unknown'}"
        return key

    async def _request(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        method = ctx.method
        if method == "subscriptions/listen" and ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return await self._listen(ctx, call_next)
        if method in LOCAL_METHODS:
            result: HandlerResult = await call_next(ctx)
            if method in ("initialize", "server/discover") and isinstance(result, dict):
                self.advertiser.advertise(result, legacy=method == "initialize")
            return result
        params = dict(ctx.params) if ctx.params is not None else None
        check_surface(method, ctx.protocol_version, params)
        session = self.sessions.for_context(ctx)
        if session.standalone is None:
            # What the upstreams send outside any call (roots/list after a list_changed, say) goes on the
            # connection's own channel (the GET stream on HTTP): a request's stream closes with its request.
            session.standalone = ServerSessionDownstream(ctx, scoped=False)
        try:
            telemetry = self.forwarder.telemetry
            if telemetry is not None and ctx.request is not None:  # tracing: the request's headers may carry a trace
                with telemetry.headers_context(ctx.request.headers):
                    return await self.forwarder.handle(
                        session, method, params, ServerSessionDownstream(ctx), ctx.request_id
                    )
            return await self.forwarder.handle(session, method, params, ServerSessionDownstream(ctx), ctx.request_id)
        except InterceptorsError as exc:
            raise MCPError(exc.code, exc.message, exc.data) from None

    # ------------------------------------------------------------------ subscriptions/listen

    async def _listen(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """A 2026-07-28 `subscriptions/listen`: its `resourceSubscriptions` are the client's
        `resources/subscribe` (that era has no such request), governed and sent to each resource's
        handshake-era upstream, which sends updates only for what it was subscribed to. The upstream
        is unsubscribed when the last stream that wanted a resource ends."""
        # A malformed listen gets an error naming the field, not mcp's bare one.
        check_surface(ctx.method, ctx.protocol_version, ctx.params)
        notifications = (ctx.params or {}).get("notifications")
        wanted = notifications.get("resourceSubscriptions") if isinstance(notifications, Mapping) else None
        if not isinstance(wanted, list) or not wanted:
            return await call_next(ctx)
        session = self.sessions.for_context(ctx)
        subscribed: list[tuple[UpstreamConnection, str]] = []
        try:
            for uri in dict.fromkeys(uri for uri in wanted if isinstance(uri, str)):
                conn = await self._subscription_owner(session, uri)
                if conn is None:
                    continue
                # Counted before the upstream is asked, so a stream ending meanwhile does not unsubscribe it.
                key = (conn.name, uri)
                self._listen_subscriptions[key] = self._listen_subscriptions.get(key, 0) + 1
                subscribed.append((conn, uri))
                # Governed, recorded and forwarded as the `resources/subscribe` that era lacks.
                params = {"uri": uri}
                await self.forwarder.call(
                    session, "resources/subscribe", params, ServerSessionDownstream(ctx), ctx.request_id
                )
            return await call_next(ctx)
        except InterceptorsError as exc:
            raise MCPError(exc.code, exc.message, exc.data) from None
        finally:
            with anyio.CancelScope(shield=True):
                for conn, uri in subscribed:
                    await self._listen_unsubscribe(conn, uri)

    async def _subscription_owner(self, session: Any, uri: str) -> UpstreamConnection | None:
        """Where a `resourceSubscriptions` entry goes: refused as its `resources/subscribe` would be (not
        advertised to it), and None unless the owner's connection is in the handshake era and can subscribe
        (a 2026-07-28 upstream connection: see Known limits in the README)."""
        route = await self.listings.route(session, "resources/subscribe", {"uri": uri}, check=True)
        conn = (await self.forwarder.connections.of(session))[route.upstream]
        resources = conn.info.capabilities.get("resources") if conn.info is not None else None
        if conn.era != "legacy" or not isinstance(resources, Mapping) or not resources.get("subscribe"):
            return None
        return conn

    async def _listen_unsubscribe(self, conn: UpstreamConnection, uri: str) -> None:
        key = (conn.name, uri)
        left = self._listen_subscriptions.get(key, 1) - 1
        if left > 0:
            self._listen_subscriptions[key] = left
            return
        self._listen_subscriptions.pop(key, None)
        try:
            with anyio.fail_after(conn.config.timeout_ms / 1000):
                await conn.request("resources/unsubscribe", {"uri": uri})
        except (MCPError, TimeoutError) as exc:
            logger.info("upstream %r: resources/unsubscribe %s failed: %s", conn.name, uri, exc)

    # ------------------------------------------------------------------ Mcp-Param-* headers

    def tool_input_schema(self, name: str) -> Mapping[str, Any] | None:
        """The `inputSchema` of an exposed tool, from the freshest listing any session holds; None when it
        declares no `x-mcp-header` (mcp then has no header to check, and skips walking the schema)."""
        catalogs = [session.catalog for session in reversed(self.sessions.by_key.values())] + [self.listings.startup]
        for catalog in catalogs:
            tool = catalog.item("tools/list", name) if catalog is not None else None
            if tool is not None and isinstance(tool.get("inputSchema"), Mapping):
                schema: Mapping[str, Any] = tool["inputSchema"]
                return schema if self._declares_headers(schema) else None
        return None

    def _declares_headers(self, schema: Mapping[str, Any]) -> bool:
        """Whether `x-mcp-header` appears anywhere in `schema`, remembered per listed schema (by identity:
        a listing's items are not changed in place, only replaced)."""
        known = self._header_schemas.get(id(schema))
        if known is not None and known[0] is schema:
            return known[1]
        if len(self._header_schemas) >= _HEADER_SCHEMAS_KEPT:
            self._header_schemas.clear()
        declares = _mentions(schema, "x-mcp-header")
        self._header_schemas[id(schema)] = (schema, declares)
        return declares


def check_surface(method: str, version: str, params: Mapping[str, Any] | None) -> None:
    """Answer malformed or era-foreign spec requests as a direct server would."""
    if method not in wire_methods.SPEC_CLIENT_METHODS:
        return
    try:
        wire_methods.validate_client_request(method, version, params)
    except KeyError:
        raise MCPError(-32601, "Method not found", method) from None
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        field = ".".join(str(part) for part in error["loc"][1:]) or "params"
        raise MCPError(-32602, f"Invalid request parameters: {field}: {error['msg']}", {"field": field}) from None
    except ValueError:
        return


def _mentions(value: Any, key: str) -> bool:
    """Whether a mapping with `key` appears anywhere in the JSON value `value`."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            if key in node:
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False
