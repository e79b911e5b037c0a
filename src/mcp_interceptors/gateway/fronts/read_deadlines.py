"""Deadlines on reading an HTTP request: its headers within `http.header_timeout_s`, its body within
`http.body_timeout_s`, or the connection is closed (uvicorn bounds only the idle time between requests).

Two parts meet here. `deadline_protocol` wraps uvicorn's own HTTP protocol (h11 or httptools): it arms
the header deadline when a connection opens or a request's first byte arrives, and closes the socket when
one passes. `ReadDeadlinesApp`, the outermost ASGI app, tells that connection (found by the client
address uvicorn puts in the scope) when the request's headers were read and when its body was: a slow
client is cut off before any auth check, and an app that answers without reading a body asks to close.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar

from uvicorn.protocols.http.auto import AutoHTTPProtocol
from uvicorn.protocols.utils import get_remote_addr

logger = logging.getLogger(__name__)


class _Connection(asyncio.Protocol):
    """One HTTP connection: uvicorn's protocol inside, and the deadline being waited on (None: the app is
    serving a request whose body was read, or the connection is idle between requests)."""

    inner_class: type[asyncio.Protocol] = AutoHTTPProtocol
    header_s: float = 10.0
    body_s: float = 30.0
    #: client address -> its connection, while open: how the ASGI side finds it
    open: ClassVar[dict[Any, _Connection]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.inner = self.inner_class(*args, **kwargs)
        self.loop: asyncio.AbstractEventLoop = kwargs.get("_loop") or asyncio.get_event_loop()
        self.transport: asyncio.Transport | None = None
        self.address: Any = None
        self._timer: asyncio.TimerHandle | None = None
        self._serving = False

    # ------------------------------------------------------------------ asyncio's calls, passed on

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.address = get_remote_addr(transport)
        if self.address is not None:
            self.open[self.address] = self
        self._arm(self.header_s, "headers")
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self._serving and self._timer is None:  # a new request's first bytes
            self._arm(self.header_s, "headers")
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self.address is not None and self.open.get(self.address) is self:
            del self.open[self.address]
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def shutdown(self) -> None:  # uvicorn's graceful shutdown calls it on each connection it tracks
        self.inner.shutdown()  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ what the ASGI side reports

    def headers_read(self, has_body: bool) -> None:
        self._serving = True
        self._disarm()
        if has_body:
            self._arm(self.body_s, "body")

    def body_read(self) -> None:
        self._disarm()

    def request_done(self, body_pending: bool) -> None:
        """The app returned; a body it did not read keeps its deadline (its response asked to close)."""
        self._serving = False
        if not body_pending:
            self._disarm()

    # ------------------------------------------------------------------ the deadline

    def _arm(self, seconds: float, what: str) -> None:
        self._disarm()
        self._timer = self.loop.call_later(seconds, self._expired, what, seconds)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self, what: str, seconds: float) -> None:
        self._timer = None
        if self.transport is not None and not self.transport.is_closing():
            logger.info("closing a connection from %s: its request's %s took over %g s", self.address, what, seconds)
            self.transport.close()


def deadline_protocol(header_s: float, body_s: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class with these read deadlines (give it as `uvicorn.Config(http=...)`)."""
    return type("DeadlineHTTPProtocol", (_Connection,), {"header_s": header_s, "body_s": body_s, "open": {}})


def _declares_body(scope: Any) -> bool:
    for name, value in scope.get("headers") or ():
        if name == b"content-length":
            return value.strip() not in (b"0", b"")
        if name == b"transfer-encoding":
            return True
    return False


class ReadDeadlinesApp:
    """The outermost ASGI app: reports each request's progress to its connection's deadlines."""

    def __init__(self, app: Any, protocol: type[asyncio.Protocol]) -> None:
        self.app = app
        self.connections: dict[Any, _Connection] = getattr(protocol, "open", {})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        conn = self.connections.get(scope.get("client")) if scope.get("type") == "http" else None
        if conn is None:
            await self.app(scope, receive, send)
            return
        pending = _declares_body(scope)
        conn.headers_read(pending)

        async def receiving() -> Any:
            nonlocal pending
            message = await receive()
            if pending and (message.get("type") != "http.request" or not message.get("more_body", False)):
                pending = False
                conn.body_read()
            return message

        async def sending(message: Any) -> None:
            if pending and message.get("type") == "http.response.start":
                # Answered before its body was read (a 401, say): the rest of it is not waited for.
                message = {**message, "headers": [*message.get("headers", ()), (b"connection", b"close")]}
            await send(message)

        try:
            await self.app(scope, receiving if pending else receive, sending if pending else send)
        finally:
            conn.request_done(pending)
