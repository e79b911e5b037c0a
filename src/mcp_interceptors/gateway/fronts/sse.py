"""The legacy SSE endpoint (handshake era): GET /sse opens a session's stream, POST /messages/ carries its
requests; each stream is a session of its own, whose upstream sessions end with it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.auth.settings import AuthSettings
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

from mcp_interceptors.gateway.auth import current_principal
from mcp_interceptors.gateway.fronts.bodies import REFUSED, json_response, shape_checked
from mcp_interceptors.gateway.jsonrpc.framing import INTERNAL_ERROR, error_response, id_in_use
from mcp_interceptors.gateway.session_slots import SessionRefusedError
from mcp_interceptors.gateway.sessions import SSE_SESSION_PREFIX

if TYPE_CHECKING:
    from mcp_interceptors.gateway.gateway import Gateway


class SseRequestIds:
    """The read side of a legacy `/sse` session: a request reusing the id of one still in flight is answered
    with -32600 (`data: {field: "id"}`) on the stream and never reaches the server, as on stdio and
    Streamable HTTP (ids `1` and `"1"` count as one, as there): two answers with one id could not be told
    apart, nor the first cancelled (mcp keys a request by its id).

    A request is in flight from its arrival until its answer goes out (`writer`), or its
    `notifications/cancelled` arrives (a cancelled request is never answered).
    """

    def __init__(self, read: Any, write: Any) -> None:
        self._read = read
        self._write = write
        self.in_flight: set[str] = set()
        self.writer = _SseAnswers(write, self.in_flight)

    @property
    def last_context(self) -> Any:
        """The POST's context (its principal): mcp runs the handler in it."""
        return getattr(self._read, "last_context", None)

    async def receive(self) -> Any:
        while True:
            item = await self._read.receive()
            message = getattr(item, "message", None)  # an Exception is a message mcp could not parse
            if isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
                cancelled = cancelled_request_id_from_params(message.params)
                if cancelled is not None:
                    self.in_flight.discard(str(cancelled))
            if not isinstance(message, JSONRPCRequest):
                return item
            key = str(message.id)
            if key not in self.in_flight:
                self.in_flight.add(key)
                return item
            await self._write.send(SessionMessage(JSONRPCError.model_validate(id_in_use(message.id))))

    async def aclose(self) -> None:
        await self._read.aclose()

    def __aiter__(self) -> SseRequestIds:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> SseRequestIds:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _SseAnswers:
    """The write side of a legacy `/sse` session: an answer ends its request's time in flight."""

    def __init__(self, write: Any, in_flight: set[str]) -> None:
        self._write = write
        self._in_flight = in_flight

    async def send(self, item: Any, /) -> None:
        message = getattr(item, "message", None)  # an Exception is a message mcp could not parse
        try:
            await self._write.send(item)
        finally:
            if isinstance(message, (JSONRPCResponse, JSONRPCError)) and message.id is not None:
                self._in_flight.discard(str(message.id))

    async def aclose(self) -> None:
        await self._write.aclose()

    async def __aenter__(self) -> _SseAnswers:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


#: The first event of an SSE stream names the session: `data: /messages/?session_id=<hex>`.
_SSE_SESSION_ID = re.compile(rb"session_id=([0-9a-fA-F]+)")


def sse_routes(
    gateway: Gateway, security: TransportSecuritySettings, max_body: int, auth: AuthSettings | None = None
) -> list[Any]:
    """The handshake-era SSE endpoint: GET /sse opens the stream, POST /messages/ carries requests.

    With `auth`, both need a valid bearer token, as the Streamable HTTP path does: mcp wraps only
    that path in its auth check, and the app-wide middleware merely reads the token.
    """
    from mcp.server.auth.middleware.bearer_auth import RequireAuthMiddleware
    from mcp.server.auth.routes import build_resource_metadata_url
    from mcp.server.sse import SseServerTransport
    from starlette.routing import Mount, Route

    transport = SseServerTransport("/messages/", security_settings=security, max_request_body_size=max_body)
    server = gateway.server

    class SseEndpoint:
        """An ASGI endpoint: the SSE transport needs the raw `send` callable. Each SSE connection is its
        own handshake-era session (keyed by the `session_id` the stream announces): when the stream ends,
        so do that session's upstream sessions."""

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            try:  # a stream is a session: it counts against `http.max_sessions` until it ends
                slot = gateway.sessions.take_slot(current_principal())
            except SessionRefusedError as exc:
                refused = error_response(None, INTERNAL_ERROR, exc.message, exc.data)
                await json_response(503, refused)(scope, receive, send)
                return
            announced: list[str] = []

            async def watch(message: Any) -> None:
                if not announced and message.get("type") == "http.response.body":
                    found = _SSE_SESSION_ID.search(bytes(message.get("body", b"")))
                    if found is not None:
                        announced.append(found.group(1).decode())
                await send(message)

            try:
                async with transport.connect_sse(scope, receive, watch) as (read, write):
                    guard = SseRequestIds(read, write)
                    await server.run(guard, guard.writer, server.create_initialization_options())
            finally:
                gateway.sessions.release_slot(slot)
                if announced:
                    gateway.sessions.close(SSE_SESSION_PREFIX + announced[0])

    stream: Any = SseEndpoint()
    messages: Any = _without_session_header(transport.handle_post_message, max_body)
    if auth is not None:
        metadata = build_resource_metadata_url(auth.resource_server_url) if auth.resource_server_url else None
        scopes = auth.required_scopes or []
        stream = RequireAuthMiddleware(stream, scopes, metadata)
        messages = RequireAuthMiddleware(messages, scopes, metadata)
    return [Route("/sse", endpoint=stream, methods=["GET"]), Mount("/messages/", app=messages)]


def _without_session_header(app: Any, max_body: int) -> Any:
    """A `/messages/` POST names its session in `?session_id=`, which mcp checks against the caller; an
    `Mcp-Session-Id` header there would name a Streamable HTTP session nobody checked, so it is dropped.
    Its body passes the shape check first (`bodies.shape_checked`)."""

    async def messages(scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") == "http" and scope.get("method") == "POST":
            message, receive = await shape_checked(scope, receive, send, max_body)
            if message is REFUSED:
                return
        headers = [(name, value) for name, value in scope.get("headers") or [] if name.lower() != b"mcp-session-id"]
        await app({**scope, "headers": headers}, receive, send)

    return messages
