"""One session with one upstream MCP server: connect once, reuse, reconnect with backoff.

The wire stays raw: stdio servers speak through our lean `JsonRpcPeer`, HTTP ones through mcp's
transports under a `JSONRPCDispatcher`; params and results are plain dicts so unknown methods and
fields survive. The connection performs the era's handshake itself (`initialize` or
`server/discover`) and stamps the routing headers a Streamable-HTTP upstream needs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol
from urllib.parse import urljoin, urlparse

import anyio
import anyio.abc
import httpx2
from mcp import MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import CallOptions, DispatchContext
from mcp.shared.inbound import (
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    NAME_BEARING_METHODS,
    encode_header_value,
)
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.message import SessionMessage
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    LOG_LEVEL_META_KEY,
    PARSE_ERROR,
    PROTOCOL_VERSION_META_KEY,
    REQUEST_TIMEOUT,
    SERVER_INFO_META_KEY,
    jsonrpc_message_adapter,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION, LATEST_MODERN_VERSION

from mcp_interceptors.gateway.config import TransportConfig
from mcp_interceptors.gateway.jsonrpc import stdio_peer
from mcp_interceptors.gateway.scrub import Scrubber
from mcp_interceptors.gateway.tasks import is_task_method, task_refusal, without_tasks

logger = logging.getLogger(__name__)

Era = Literal["legacy", "2026-07-28"]
#: `legacy-first` is `auto` for a handshake-era client: `initialize` first, then `server/discover`.
EraPreference = Literal["auto", "legacy-first", "legacy", "2026-07-28"]
OnUpstreamRequest = Callable[[str, dict[str, Any] | None], Awaitable[dict[str, Any]]]
OnUpstreamNotify = Callable[[str, dict[str, Any] | None], Awaitable[None]]

#: The 2026-07-28 per-request envelope keys of `_meta`.
ENVELOPE_KEYS = frozenset(
    {PROTOCOL_VERSION_META_KEY, CLIENT_INFO_META_KEY, CLIENT_CAPABILITIES_META_KEY, LOG_LEVEL_META_KEY}
)
GATEWAY_CLIENT_INFO = {"name": "mcp-interceptors-gateway", "version": "0.1.0"}
#: What the gateway presents when it has no downstream client to speak for (an HTTP gateway's shared
#: connections, a stdio client that said nothing first): every client feature it can relay, so a server
#: offers all it would offer some client; a request the client cannot serve gets that client's own error.
DEFAULT_CLIENT_CAPABILITIES: dict[str, Any] = {
    "roots": {"listChanged": True},
    "sampling": {"context": {}, "tools": {}},
    "elicitation": {"form": {}, "url": {}},
}
_BACKOFF_FIRST_S = 0.2
#: Requests whose effect a handshake-era upstream keeps for the session (see `_restore_session_state`).
_SESSION_STATE_METHODS = frozenset({"resources/subscribe", "resources/unsubscribe", "logging/setLevel"})
_BACKOFF_MAX_S = 10.0
#: A connection up this long resets the backoff; one that dies sooner (a crash loop) keeps backing off.
_STABLE_S = 30.0
_CONNECT_WAIT_S = 10.0
#: How long a closed connection may take to end itself: calls cancelled a moment before tell the upstream, and
#: an HTTP session is ended with DELETE (cut short, a per-session upstream kept both its work and its session).
_CLOSE_GRACE_S = 3.0
#: Within that, how long calls still in flight on it get to settle (cancelled ones send `notifications/cancelled`).
_CLOSE_SETTLE_S = 0.5


@dataclass
class UpstreamInfo:
    """What the handshake told us about the upstream."""

    era: Era
    protocol_version: str
    server_info: dict[str, Any] | None = None
    capabilities: dict[str, Any] = field(default_factory=dict)
    instructions: str | None = None


class _Opened:
    """The task status `UpstreamConnection.open` hands `run`: set once its first handshake is done."""

    def __init__(self) -> None:
        self.event = anyio.Event()

    def started(self, value: None = None) -> None:
        self.event.set()


class _EraRefused(Exception):
    """The upstream refused the era tried first and fixed the connection to it: reconnect in the other."""


def _innermost(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def first_error(group: BaseExceptionGroup[MCPError]) -> MCPError:
    """The first `MCPError` of a task group's failures, to answer with as one error."""
    leaf: BaseException = group
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    assert isinstance(leaf, MCPError)
    return leaf


def describe_exception(exc: BaseException) -> str:
    """One line for logs and errors, looking inside exception groups."""
    exc = _innermost(exc)
    if isinstance(exc, MCPError):
        return f"{exc.message} (code {exc.code})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class UpstreamUnavailableError(MCPError):
    """The upstream is down or reconnecting; in-flight and new calls get this instead of hanging."""


class UpstreamTimeoutError(MCPError):
    """The upstream did not answer within the request's timeout (-32001; the request there is cancelled)."""


class Wire(Protocol):
    """What a connection needs from its JSON-RPC layer: mcp's dispatcher, or our lean stdio peer."""

    async def run(self, on_request: Any, on_notify: Any, *, task_status: anyio.abc.TaskStatus[None]) -> None: ...

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]: ...

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None) -> None: ...


OnHttpError = Callable[[int, str], None]


@asynccontextmanager
async def open_wire(config: TransportConfig, on_http_error: OnHttpError | None = None) -> AsyncIterator[Wire]:
    """A stdio server gets the lean `JsonRpcPeer` (dicts end to end); HTTP and SSE use mcp's
    transports under its `JSONRPCDispatcher`."""
    if config.command is not None:
        limit = config.max_message_bytes
        async with stdio_peer(
            config.command,
            list(config.args),
            env=config.env or None,
            cwd=config.cwd,
            max_line_bytes=limit,
            limit_setting="max_message_bytes",
        ) as peer:
            yield peer
        return
    if config.url is not None and config.transport == "sse":
        cut = _SseCut()
        async with _sse_transport(config.url, http_client_for(config, on_http_error), cut) as (read, write):
            yield _SseDispatcher(read, write, cut)
        return
    # The client is ours to close (mcp leaves a client it is given open): left open, each connection's
    # pooled sockets stayed behind in CLOSE-WAIT, one set per ended session or reconnect.
    async with (
        http_client_for(config, on_http_error) as client,
        open_transport(config, client) as (read, write),
    ):
        yield JSONRPCDispatcher(read, write)


def open_transport(config: TransportConfig, http_client: httpx2.AsyncClient) -> AbstractAsyncContextManager[Any]:
    """mcp's Streamable HTTP client transport to `config.url` on `http_client` (which it leaves open). One SSE
    event is capped by `_MessageLimitTransport` at `max_message_bytes`; mcp's own 1 MiB cap would refuse less."""
    assert config.url is not None
    return streamable_http_client(config.url, http_client=http_client, max_sse_event_size=None)


@dataclass
class _SseCut:
    """Why `_sse_transport` ended its event stream itself (an event over the limit), if it did."""

    reason: str | None = None


class _SseDispatcher(JSONRPCDispatcher[Any]):
    """mcp's dispatcher over `_sse_transport`, with the `close_reason` of `JsonRpcPeer`."""

    def __init__(self, read: Any, write: Any, cut: _SseCut) -> None:
        super().__init__(read, write)
        self._cut = cut

    @property
    def close_reason(self) -> str | None:
        return self._cut.reason


@asynccontextmanager
async def _sse_transport(url: str, http_client: httpx2.AsyncClient, cut: _SseCut) -> AsyncIterator[tuple[Any, Any]]:
    """A legacy SSE connection on our HTTP client, so one event is capped by the upstream's `max_message_bytes`
    (`_MessageLimitTransport`); mcp's `sse_client` caps it at 1 MiB whatever the config says. The server
    first names the endpoint to POST messages to; an event over the limit ends the stream (a legacy SSE
    server has no other), recording why in `cut`."""
    events_to_us, from_upstream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_upstream, messages_to_post = anyio.create_memory_object_stream[SessionMessage](0)
    async with (
        http_client as client,
        client.stream("GET", url, headers={"Accept": "text/event-stream", "Cache-Control": "no-store"}) as response,
    ):
        response.raise_for_status()  # the client follows no redirect: another origin's stream is never read

        async def read_events(*, task_status: anyio.abc.TaskStatus[str]) -> None:
            async with events_to_us:
                try:
                    async for event in httpx2.EventSource(response, max_event_size=None):
                        if event.event == "endpoint":
                            task_status.started(_same_origin_endpoint(url, event.data))
                        elif event.event == "message" and event.data:
                            try:
                                message = jsonrpc_message_adapter.validate_json(event.data, by_name=False)
                            except ValueError as exc:
                                await events_to_us.send(exc)
                                continue
                            await events_to_us.send(SessionMessage(message))
                except EventTooLongError as exc:
                    cut.reason = str(exc)

        async def post_messages(endpoint: str) -> None:
            async with messages_to_post:
                async for item in messages_to_post:
                    body = item.message.model_dump(by_alias=True, mode="json", exclude_unset=True)
                    try:
                        (await client.post(endpoint, json=body)).raise_for_status()
                    except httpx2.HTTPError as exc:
                        logger.warning("POST to %s failed: %s", endpoint, exc)

        async with from_upstream, to_upstream, anyio.create_task_group() as tg:
            endpoint = await tg.start(read_events)
            tg.start_soon(post_messages, endpoint)
            yield from_upstream, to_upstream
            tg.cancel_scope.cancel()


def _same_origin_endpoint(url: str, announced: str) -> str:
    """The message endpoint a legacy SSE server announced, which must be on the stream's own origin."""
    endpoint = urljoin(url, announced)
    if urlparse(endpoint)[:2] != urlparse(url)[:2]:
        raise ValueError(f"the SSE server announced a message endpoint on another origin: {endpoint}")
    return endpoint


def _http_headers(config: TransportConfig) -> dict[str, str]:
    headers = dict(config.headers)
    if config.bearer_token:
        headers["Authorization"] = f"Bearer {config.bearer_token}"
    return headers


def http_client_for(config: TransportConfig, on_http_error: OnHttpError | None = None) -> httpx2.AsyncClient:
    """An HTTP client with the server's configured headers and timeouts."""
    timeout = httpx2.Timeout(max(config.timeout_ms / 1000, 30.0), read=300.0)
    hooks: dict[str, list[Any]] = {}
    if on_http_error is not None:
        report = on_http_error

        async def heard(response: httpx2.Response) -> None:
            if response.status_code >= 400:
                report(response.status_code, response.reason_phrase)

        hooks["response"] = [heard]
    limit = config.max_message_bytes
    transport = _MessageLimitTransport(httpx2.AsyncHTTPTransport(), limit)
    return httpx2.AsyncClient(headers=_http_headers(config), timeout=timeout, event_hooks=hooks, transport=transport)


class MessageTooLongError(httpx2.StreamError):
    """An HTTP upstream's JSON answer grew past the message limit."""


class EventTooLongError(httpx2.SSEError):
    """One event of an HTTP upstream's SSE stream grew past the message limit."""


class _MessageLimitTransport(httpx2.AsyncBaseTransport):
    """Caps what one message from an HTTP upstream may hold in memory: a JSON body, or one SSE event
    (an SSE stream as a whole may run as long as it likes). mcp's client reads either whole."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        events = response.headers.get("content-type", "").startswith("text/event-stream")
        response.stream = _LimitedStream(response.stream, self._limit, events)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class _LimitedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, limit: int, events: bool) -> None:
        self._inner = inner
        self._limit = limit
        self._events = events

    async def __aiter__(self) -> AsyncIterator[bytes]:
        held = 0  # bytes of the current message (since the last blank line, for events)
        tail = b""
        async for chunk in self._inner:
            if self._events:
                seen = tail + chunk
                end = max(seen.rfind(b"\n\n"), seen.rfind(b"\r\n\r\n"))
                held = len(seen) - end - 2 if end >= 0 else held + len(chunk)
                tail = seen[-3:]
            else:
                held += len(chunk)
            if held > self._limit:
                kind, error = (_EVENT_CUT, EventTooLongError) if self._events else (_MESSAGE_CUT, MessageTooLongError)
                raise error(f"{kind} {self._limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class UpstreamConnection:
    """A supervised connection: `run` keeps it up, `request`/`notify` use it.

    `client_params` are the `initialize` params to present (a downstream client's, for a
    per-session legacy connection); server-initiated requests and notifications from the upstream
    go to `on_request` / `on_notify`.
    """

    def __init__(
        self,
        name: str,
        config: TransportConfig,
        *,
        era: EraPreference = "auto",
        client_params: Mapping[str, Any] | None = None,
        on_request: OnUpstreamRequest | None = None,
        on_notify: OnUpstreamNotify | None = None,
        role: str = "upstream",
    ) -> None:
        self.name = name
        #: What errors and logs call it: "upstream", or "interceptor server" for the gateway's remote hosts.
        self.role = role
        self.config = config
        self.era_preference: EraPreference = config.era if era == "auto" else era
        self.client_params = dict(client_params or {})
        #: The log level a handshake-era client asked of a 2026-07-28 connection, sent with each request.
        self.log_level: str | None = None
        self.on_request = on_request
        self.on_notify = on_notify
        self.info: UpstreamInfo | None = None
        self.restarts = 0
        #: What a handshake-era upstream was told that a restart makes it forget, sent again on reconnecting:
        #: its resource subscriptions (uri -> the params sent) and its last `logging/setLevel` params.
        self._subscriptions: dict[str, dict[str, Any]] = {}
        self._log_level_params: dict[str, Any] | None = None
        self._listens = 0
        self._receivers: dict[object, OnUpstreamNotify] = {}
        self._dispatcher: Wire | None = None
        #: Set to end the open connection (`run` then reconnects): its HTTP session is gone.
        self._ended: anyio.Event | None = None
        self._connected = anyio.Event()
        self._closed = False
        self._closing = anyio.Event()
        self._close_reason = "shutting down"
        #: Requests in flight on the shared dispatcher, which a graceful close lets settle first.
        self._inflight = 0
        self._settled = anyio.Event()  # set when the last of them settles after `close()`
        self._last_error: str | None = None
        self._scope: anyio.CancelScope | None = None
        #: The last HTTP error status the upstream answered with ("401 Unauthorized"), to explain mcp's -32603.
        self._http_error: str | None = None
        #: The HTTP client of the requests that take an exchange of their own (see `_private_request`).
        self._exchanges: httpx2.AsyncClient | None = None
        #: A listing was served without this upstream (it was down): its return announces `list_changed`.
        self.left_out = False
        #: Called with each request's duration in seconds (the gateway's metrics), when set.
        self.on_duration: Callable[[float], None] | None = None
        #: The gateway's scrub of relayed log lines and progress messages (`scrub.notifications`), if any.
        self.scrubber: Scrubber | None = None
        #: Called each time it reconnects after its connection ended or failed (the gateway's metrics), when set.
        self.on_restart: Callable[[], None] | None = None
        #: Called each time a connection is up, past its handshake (an interceptor server's listing is read again).
        self.on_connected: Callable[[], None] | None = None

    @property
    def is_http(self) -> bool:
        return self.config.url is not None

    @property
    def era(self) -> Era:
        return self.info.era if self.info is not None else "legacy"

    @property
    def up(self) -> bool:
        """Whether the connection is open and past its handshake now (not starting, backing off, or closed)."""
        return self._dispatcher is not None and self._connected.is_set()

    @property
    def closed(self) -> bool:
        """Whether `close()` stopped it for good."""
        return self._closed

    async def wait_up(self) -> bool:
        """Wait for a reconnection as a request would (a restart takes a moment); whether it is up now."""
        if not self.up:
            with anyio.move_on_after(min(_CONNECT_WAIT_S, self.config.timeout_ms / 1000)):
                await self._connected.wait()
        return self.up

    def unavailable(self) -> UpstreamUnavailableError:
        """The error a call to this upstream gets while it is down: -32000 naming it and why."""
        reason = self._last_error or "not connected"
        return UpstreamUnavailableError(
            CONNECTION_CLOSED, f"{self.role} {self.name!r} is unavailable ({reason})", {"upstream": self.name}
        )

    # ------------------------------------------------------------------ lifecycle

    async def run(
        self, *, retry_start: bool = False, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Connect, hand over readiness, and reconnect with backoff until cancelled.

        The first connection failure is raised (so a gateway fails at start with a clear error),
        unless `retry_start`; later failures are logged and retried.
        """
        started = False
        delay = _BACKOFF_FIRST_S
        ready_at: float | None = None

        def on_ready() -> None:
            nonlocal started, ready_at
            ready_at = anyio.current_time()
            if not started:
                started = True
                task_status.started()

        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                while not self._closed:
                    ready_at = None
                    try:
                        reason = await self._connect_once(on_ready)
                        self._last_error = f"the gateway closed it: it sent {reason}" if reason else "connection closed"
                    except Exception as exc:  # transport/handshake failure: report, then back off
                        if isinstance(_innermost(exc), _EraRefused):
                            continue  # reconnect at once on a fresh transport, in the handshake era
                        self._last_error = self._explain(describe_exception(exc), _innermost(exc))
                        if not started and not retry_start:
                            raise UpstreamUnavailableError(
                                CONNECTION_CLOSED,
                                f"{self.role} {self.name!r} failed to start: {self._last_error}",
                                {"upstream": self.name},
                            ) from exc
                    finally:
                        self._mark_down()
                    if self._closed:
                        break
                    if ready_at is not None and anyio.current_time() - ready_at >= _STABLE_S:
                        delay = _BACKOFF_FIRST_S  # it was up a while: a fresh failure, not a crash loop
                    logger.warning("%s %r: %s; reconnecting in %.1fs", self.role, self.name, self._last_error, delay)
                    self.restarts += 1
                    if self.on_restart is not None:  # the gateway's metrics
                        self.on_restart()
                    await anyio.sleep(delay)
                    delay = min(delay * 2, _BACKOFF_MAX_S)
        finally:
            if self._exchanges is not None:  # the HTTP client of private exchanges lives as long as this
                with anyio.CancelScope(shield=True):
                    await self._exchanges.aclose()
                self._exchanges = None

    async def open(self, tg: anyio.abc.TaskGroup) -> None:
        """`run` in `tg`, returning once its first handshake is done, as `tg.start(self.run)` does, except that
        a `close()` meanwhile raises at once (-32000 naming this upstream) while the connection's teardown (a
        stdio server's polite stop takes seconds) goes on in `tg`: the caller's client is answered before
        a shutting-down front ends its stream. Cancelling the caller closes the connection."""
        opened = _Opened()
        failed: list[UpstreamUnavailableError] = []

        async def run() -> None:
            try:
                await self.run(task_status=opened)
            except UpstreamUnavailableError as exc:  # raised only before it is ready: `run` retries later ones
                failed.append(exc)
            finally:
                opened.event.set()

        tg.start_soon(run)
        try:
            async with anyio.create_task_group() as race:

                async def until_closed() -> None:
                    await self._closing.wait()
                    race.cancel_scope.cancel()

                race.start_soon(until_closed)
                await opened.event.wait()
                race.cancel_scope.cancel()
        except BaseException:
            self.close()  # its caller is gone: nobody would use it
            raise
        if failed:
            raise failed[0]
        if self._closed:
            raise self.closed_error()

    def closed_error(self) -> UpstreamUnavailableError:
        """What a call to this connection gets once the gateway closed it (shutting down, the session ended)."""
        message = f"the gateway closed its connection to {self.role} {self.name!r} ({self._close_reason})"
        return UpstreamUnavailableError(CONNECTION_CLOSED, message, {"upstream": self.name})

    async def _connect_once(self, on_ready: Callable[[], None]) -> str | None:
        """One connection's life: open, handshake, serve until EOF (the upstream exited or hung up).
        Returns why the gateway closed it itself (a message over the line limit), else None."""
        async with open_wire(self.config, self._heard_http_error) as dispatcher:
            ended = self._ended = anyio.Event()
            async with anyio.create_task_group() as tg:
                await tg.start(self._pump, dispatcher, ended)
                self._dispatcher = dispatcher
                self.info = await self._handshake(dispatcher)
                await self._restore_session_state(dispatcher)
                self._connected.set()
                self._last_error = None
                if self.info.era == "2026-07-28" and self.on_notify is not None:
                    tg.start_soon(self._listen)
                if self.left_out:
                    self.left_out = False
                    tg.start_soon(self._announce_return)
                tg.start_soon(self._end_when_closed, ended)
                on_ready()
                if self.on_connected is not None:
                    self.on_connected()
                await ended.wait()
                self._mark_down()  # before the transport's teardown: new requests wait for the reconnect
                tg.cancel_scope.cancel()
        reason = getattr(dispatcher, "close_reason", None)
        return reason if isinstance(reason, str) else None

    async def _end_when_closed(self, ended: anyio.Event) -> None:
        """On `close()`, let the calls in flight settle a moment, then end the connection the ordinary way."""
        await self._closing.wait()
        if self._inflight:
            with anyio.move_on_after(_CLOSE_SETTLE_S):
                await self._settled.wait()
        ended.set()

    async def _restore_session_state(self, dispatcher: Wire) -> None:
        """After a restart, resubscribe a handshake-era upstream to what it was subscribed to and set its log
        level again, before any request reaches it: its clients' subscriptions outlive its process. What it
        now refuses is dropped, with a warning."""
        if self.era != "legacy":
            return
        restore = [("resources/subscribe", params) for params in self._subscriptions.values()]
        if self._log_level_params is not None:
            restore.append(("logging/setLevel", self._log_level_params))
        for method, params in restore:
            body, opts = self._prepare(method, params, None, None, None, None)
            try:
                await self._sent(dispatcher, method, body, opts, shared=dispatcher)
            except (UpstreamUnavailableError, UpstreamTimeoutError):
                raise  # down again: the next connection tries again
            except MCPError as exc:
                logger.warning("%s %r: %s %s after its restart failed: %s", self.role, self.name, method, params, exc)
                if method == "resources/subscribe":
                    self._subscriptions.pop(str(params.get("uri")), None)
                else:
                    self._log_level_params = None

    def _remember(self, method: str, params: Mapping[str, Any] | None) -> None:
        """Keep what `_restore_session_state` sends again (after the upstream accepted it)."""
        if self.era != "legacy" or params is None:
            return
        if method == "resources/subscribe":
            self._subscriptions[str(params.get("uri"))] = dict(params)
        elif method == "resources/unsubscribe":
            self._subscriptions.pop(str(params.get("uri")), None)
        elif method == "logging/setLevel":
            self._log_level_params = dict(params)

    async def _pump(self, dispatcher: Wire, ended: anyio.Event, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        try:
            await dispatcher.run(self._on_request, self._on_notify, task_status=task_status)
        finally:
            ended.set()

    async def _listen(self) -> None:
        """2026-07-28 upstreams send `list_changed` only on a `subscriptions/listen` stream: keep one open."""
        caps = self.info.capabilities if self.info is not None else {}
        wanted = {
            flag: True
            for flag, feature in (
                ("toolsListChanged", "tools"),
                ("promptsListChanged", "prompts"),
                ("resourcesListChanged", "resources"),
            )
            if (caps.get(feature) or {}).get("listChanged")
        }
        if not wanted:
            return
        self._listens += 1
        try:
            await self.request(
                "subscriptions/listen",
                {"notifications": wanted},
                request_id=f"gateway-listen-{self._listens}",
                timeout_s=365 * 24 * 3600.0,
            )
        except MCPError as exc:
            logger.info("%s %r: subscriptions/listen ended: %s", self.role, self.name, exc.message)

    async def _announce_return(self) -> None:
        """Back after listings went out without it: its items are listable again, so each list it serves
        changed (the gateway relays these as the upstream's own `list_changed`)."""
        logger.info("%s %r is back; announcing its listings", self.role, self.name)
        caps = self.info.capabilities if self.info is not None else {}
        if self.on_notify is None:
            return
        for feature in ("tools", "prompts", "resources"):
            if feature in caps:
                await self.on_notify(f"notifications/{feature}/list_changed", None)

    def _heard_http_error(self, status: int, reason: str) -> None:
        self._http_error = f"{status} {reason}".strip()

    def _explain(self, message: str, exc: BaseException) -> str:
        """mcp's stand-in for an HTTP error status, with the status it stands for."""
        if not (isinstance(exc, MCPError) and _is_http_error(exc)) or self._http_error is None:
            return message
        hint = f"; check the {self.role}'s bearer_token or headers" if self._http_error[:3] in ("401", "403") else ""
        return f"{message}: HTTP {self._http_error}{hint}"

    def _mark_down(self) -> None:
        """Forget the dead dispatcher; requests from now on wait for the next connection."""
        self._dispatcher = None
        if self._connected.is_set():  # replace only a spent event: waiters on an unset one stay valid
            self._connected = anyio.Event()

    def close(self, why: str = "shutting down") -> None:
        """Stop for good. An open connection ends itself (see `_CLOSE_GRACE_S`); one still connecting or backing
        off has nothing to end and stops at once. `why` ends the message calls still waiting on it get."""
        if not self._closed:
            self._close_reason = why
        self._closed = True
        self._closing.set()
        if self._scope is None:
            return
        if self.up:
            self._scope.deadline = min(self._scope.deadline, anyio.current_time() + _CLOSE_GRACE_S)
        else:
            self._scope.cancel()

    # ------------------------------------------------------------------ handshake

    async def _handshake(self, dispatcher: Wire) -> UpstreamInfo:
        preference = self.era_preference
        if preference == "legacy":
            return await self._initialize(dispatcher)
        if preference == "2026-07-28":
            return await self._discover(dispatcher)
        # `auto` tries 2026-07-28 first, `legacy-first` the handshake era; a refusal sets the other.
        legacy_first = preference == "legacy-first"
        first, second = (self._initialize, self._discover) if legacy_first else (self._discover, self._initialize)
        other: EraPreference = "2026-07-28" if legacy_first else "legacy"
        try:
            return await first(dispatcher)
        except MCPError as exc:
            logger.debug("%s %r: handshake failed (%s); trying the %s era", self.role, self.name, exc.message, other)
            self.era_preference = other
            if self.is_http:
                raise _EraRefused from None  # a fresh HTTP transport costs nothing
        try:
            # Most SDKs answer the other era's unknown method and go on: a stdio server is not started twice.
            return await second(dispatcher)
        except MCPError:
            # Some servers fix a connection's era with its first message: start over on a fresh one.
            raise _EraRefused from None

    async def _discover(self, dispatcher: Wire) -> UpstreamInfo:
        params = {"_meta": self.envelope()}
        opts: CallOptions = {"timeout": self.config.timeout_ms / 1000}
        if self.is_http:
            opts["headers"] = {MCP_PROTOCOL_VERSION_HEADER: LATEST_MODERN_VERSION, MCP_METHOD_HEADER: "server/discover"}
        result = await dispatcher.send_raw_request("server/discover", params, opts)
        versions = result.get("supportedVersions") or []
        if LATEST_MODERN_VERSION not in versions:
            raise MCPError(-32022, f"upstream supports {versions}, not {LATEST_MODERN_VERSION}")
        meta = result.get("_meta") or {}
        return UpstreamInfo(
            era="2026-07-28",
            protocol_version=LATEST_MODERN_VERSION,
            server_info=meta.get(SERVER_INFO_META_KEY),
            capabilities=dict(result.get("capabilities") or {}),
            instructions=result.get("instructions"),
        )

    async def _initialize(self, dispatcher: Wire) -> UpstreamInfo:
        params = {
            "protocolVersion": self.client_params.get("protocolVersion", LATEST_HANDSHAKE_VERSION),
            "capabilities": self._client_capabilities(self.client_params.get("capabilities")),
            "clientInfo": self.client_params.get("clientInfo", GATEWAY_CLIENT_INFO),
        }
        if params["protocolVersion"] not in HANDSHAKE_PROTOCOL_VERSIONS:
            params["protocolVersion"] = LATEST_HANDSHAKE_VERSION
        opts: CallOptions = {"timeout": self.config.timeout_ms / 1000, "cancel_on_abandon": False}
        result = await dispatcher.send_raw_request("initialize", params, opts)
        await dispatcher.notify("notifications/initialized", None)
        return UpstreamInfo(
            era="legacy",
            protocol_version=str(result.get("protocolVersion") or params["protocolVersion"]),
            server_info=result.get("serverInfo"),
            capabilities=dict(result.get("capabilities") or {}),
            instructions=result.get("instructions"),
        )

    def speak_for(self, client_params: Mapping[str, Any] | None) -> None:
        """Present a stdio gateway's one handshake-era client from now on: its identity and capabilities
        in every 2026-07-28 request and in the `initialize` of a reconnection, and its logs unfiltered
        (a handshake-era server may log before `logging/setLevel`) until it sets a level."""
        if client_params:
            self.client_params = dict(client_params)
        if self.log_level is None:
            self.log_level = "debug"

    def envelope(self, client_meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The 2026-07-28 `_meta` envelope: the downstream client's if it sent one, else the gateway's."""
        meta = dict(client_meta or {})
        if self.log_level is not None:
            meta.setdefault(LOG_LEVEL_META_KEY, self.log_level)
        meta.setdefault(PROTOCOL_VERSION_META_KEY, LATEST_MODERN_VERSION)
        meta.setdefault(CLIENT_INFO_META_KEY, self.client_params.get("clientInfo", GATEWAY_CLIENT_INFO))
        sent = meta.get(CLIENT_CAPABILITIES_META_KEY, self.client_params.get("capabilities"))
        meta[CLIENT_CAPABILITIES_META_KEY] = self._client_capabilities(sent)
        return meta

    @staticmethod
    def _client_capabilities(sent: Any) -> Any:
        """The client capabilities presented upstream (the gateway's if the client sent none), never with tasks:
        an upstream must not send task-augmented requests, which the gateway refuses (gateway/tasks.py)."""
        if sent is None:
            return without_tasks(DEFAULT_CLIENT_CAPABILITIES)
        return without_tasks(sent) if isinstance(sent, Mapping) else sent  # malformed: the upstream answers it

    # ------------------------------------------------------------------ traffic

    async def _ready(self) -> Wire:
        dispatcher = self._dispatcher
        if dispatcher is not None:
            return dispatcher
        with anyio.move_on_after(min(_CONNECT_WAIT_S, self.config.timeout_ms / 1000)):
            await self._connected.wait()
        if self._dispatcher is None:
            raise self.unavailable()
        return self._dispatcher

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        *,
        request_id: Any = None,
        on_progress: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        on_notify: OnUpstreamNotify | None = None,
    ) -> dict[str, Any]:
        """Send one request in this connection's era and return the raw result dict.

        Upstream JSON-RPC errors propagate as `MCPError` unchanged; a dropped connection becomes
        an error naming the upstream. `on_notify` receives the upstream's request-scoped
        notifications (logging, say) while this is the only request with a receiver in flight.
        """
        started = time.perf_counter()
        if self.scrubber is not None and on_progress is not None:  # only calls whose client asked for progress
            on_progress = self.scrubber.progress_relay(on_progress)
        try:
            if on_notify is None:
                return await self._request(method, params, request_id, on_progress, headers, timeout_s)
            if self._receivers and self._private_exchanges:
                # Another call waits for its notifications here, and one stream cannot say whose a log line is:
                # a 2026-07-28 HTTP request is self-contained, so this one takes an exchange of its own.
                return await self._private_request(method, params, on_progress, headers, timeout_s, on_notify)
            token = object()
            self._receivers[token] = on_notify
            try:
                return await self._request(method, params, request_id, on_progress, headers, timeout_s)
            finally:
                del self._receivers[token]
        finally:
            if self.on_duration is not None:  # the gateway's metrics
                self.on_duration(time.perf_counter() - started)

    @property
    def _private_exchanges(self) -> bool:
        """Whether a request can go on a transport of its own: a 2026-07-28 Streamable HTTP upstream."""
        return self.config.url is not None and self.config.transport == "streamable-http" and self.era == "2026-07-28"

    async def _private_request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        on_progress: Any,
        headers: Mapping[str, str] | None,
        timeout_s: float | None,
        on_notify: OnUpstreamNotify,
    ) -> dict[str, Any]:
        """One request on its own Streamable HTTP exchange, so its notifications are known to be its own."""
        await self._ready()
        body, opts = self._prepare(method, params, None, on_progress, headers, timeout_s)

        async def refuse(dctx: DispatchContext[Any], method: str, params: Mapping[str, Any] | None) -> Any:
            raise MCPError(-32601, "Method not found", method)  # 2026-07-28 servers send no requests

        async def relay(dctx: DispatchContext[Any], method: str, params: Mapping[str, Any] | None) -> None:
            if method not in ("notifications/progress", "notifications/cancelled") and not is_task_method(method):
                body = dict(params) if params is not None else None
                await on_notify(method, body if self.scrubber is None else self.scrubber.notification(method, body))

        if self._exchanges is None:
            self._exchanges = http_client_for(self.config, self._heard_http_error)
        async with (
            open_transport(self.config, self._exchanges) as (read, write),
            anyio.create_task_group() as tg,
        ):
            dispatcher = JSONRPCDispatcher(read, write)
            await tg.start(dispatcher.run, refuse, relay)
            try:
                result = await self._sent(dispatcher, method, body, opts, shared=None)
            finally:
                tg.cancel_scope.cancel()
        return result

    async def _request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        request_id: Any,
        on_progress: Any,
        headers: Mapping[str, str] | None,
        timeout_s: float | None,
    ) -> dict[str, Any]:
        dispatcher = await self._ready()
        body, opts = self._prepare(method, params, request_id, on_progress, headers, timeout_s)
        self._inflight += 1
        try:
            result = await self._sent(dispatcher, method, body, opts, shared=dispatcher)
            if method in _SESSION_STATE_METHODS:
                self._remember(method, params)
            return result
        except ValueError:
            if request_id is None:
                raise
            return await self._request(method, params, None, on_progress, headers, timeout_s)
        finally:
            self._inflight -= 1
            if self._closed and not self._inflight:
                self._settled.set()

    def _prepare(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        request_id: Any,
        on_progress: Any,
        headers: Mapping[str, str] | None,
        timeout_s: float | None,
    ) -> tuple[dict[str, Any], CallOptions]:
        """The body in this connection's era (its envelope, or none) and the call's options."""
        body = dict(params) if params is not None else {}
        if self.era == "2026-07-28":
            body["_meta"] = self.envelope(body.get("_meta"))
        elif isinstance(meta := body.get("_meta"), Mapping) and any(key in meta for key in ENVELOPE_KEYS):
            # A handshake-era upstream must not see a 2026-07-28 client's envelope (it would refuse it).
            kept = {key: value for key, value in meta.items() if key not in ENVELOPE_KEYS}
            if kept:
                body["_meta"] = kept
            else:
                del body["_meta"]
        opts: CallOptions = {"timeout": timeout_s if timeout_s is not None else self.config.timeout_ms / 1000}
        if request_id is not None:
            opts["request_id"] = request_id
        if on_progress is not None:
            opts["on_progress"] = on_progress
        if self.is_http:
            opts["headers"] = {**self._routing_headers(method, body), **(headers or {})}
        return body, opts

    async def _sent(
        self, dispatcher: Wire, method: str, body: dict[str, Any], opts: CallOptions, *, shared: Wire | None
    ) -> dict[str, Any]:
        """Send on `dispatcher`; mcp's local errors become errors naming the upstream. `shared` is the
        connection's own dispatcher (marked down when it closed), None for a private exchange."""
        try:
            return await dispatcher.send_raw_request(method, body or None, opts)
        except MCPError as exc:
            if _is_local_timeout(exc, method):  # our deadline, not an upstream's own -32001 error
                timeout_ms = opts["timeout"] * 1000
                raise UpstreamTimeoutError(
                    exc.code,
                    f"{self.role} {self.name!r} did not answer {method} within {timeout_ms:g} ms",
                    {"upstream": self.name, "timeoutMs": timeout_ms},
                ) from None
            if _is_local_close(exc):  # not an upstream's own -32000 error, which passes through
                if shared is not None and self._dispatcher is shared:
                    self._mark_down()
                if self._closed:
                    raise self.closed_error() from None
                reason = getattr(dispatcher, "close_reason", None)
                data: dict[str, Any] = {"upstream": self.name}
                if reason is not None:
                    message = f"the gateway closed its connection to {self.role} {self.name!r}: it sent {reason}"
                    data["reason"] = reason
                else:
                    message = f"{self.role} {self.name!r} closed the connection"
                raise UpstreamUnavailableError(CONNECTION_CLOSED, message, data) from None
            if shared is not None and self._session_lost(exc):
                # Streamable HTTP: a 404 to a request naming a session means the server no longer knows it (it
                # restarted): the client must start a new session. Kept, every later request got the same 404.
                if self._dispatcher is shared:
                    self._mark_down()
                    if self._ended is not None:
                        self._ended.set()
                message = f"{self.role} {self.name!r} no longer knows the gateway's session (HTTP 404): reconnecting"
                logger.warning("%s", message)
                data = {"upstream": self.name, "reason": "session not found"}
                raise UpstreamUnavailableError(CONNECTION_CLOSED, message, data) from None
            if _is_http_error(exc) and self._http_error is not None:
                message = self._explain(f"{self.role} {self.name!r} answered with an error", exc)
                raise MCPError(exc.code, message, {"upstream": self.name, "httpStatus": self._http_error}) from None
            reason = _too_long(exc)
            if reason is not None:
                message = f"{self.role} {self.name!r} sent {reason}"
                raise MCPError(INTERNAL_ERROR, message, {"upstream": self.name, "reason": reason}) from None
            if _is_lost_stream(exc):  # this call's HTTP response stream broke; the connection may live on
                message = f"{self.role} {self.name!r} closed the connection ({exc.message})"
                raise UpstreamUnavailableError(CONNECTION_CLOSED, message, {"upstream": self.name}) from None
            raise

    def _session_lost(self, exc: MCPError) -> bool:
        """A handshake-era HTTP session's 404: mcp's "Session terminated", or the server's own error in its body."""
        lost = self.is_http and self.era == "legacy" and exc.code == INVALID_REQUEST
        if not lost or self._http_error is None or not self._http_error.startswith("404"):
            return False
        self._http_error = None  # heard once: a later -32600 needs a 404 of its own
        return True

    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        dispatcher = self._dispatcher
        if dispatcher is None:
            return  # notifications to a down upstream are dropped: there is nobody to tell
        body = dict(params) if params is not None else None
        opts: CallOptions = {}
        if self.is_http:
            opts["headers"] = self._routing_headers(method, body or {})
        try:
            await dispatcher.notify(method, body, opts)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, MCPError):
            logger.debug("%s %r: notification %s dropped, connection closing", self.role, self.name, method)

    def _routing_headers(self, method: str, body: Mapping[str, Any]) -> dict[str, str]:
        """`mcp-protocol-version` always; `mcp-method`/`mcp-name` in the 2026-07-28 era."""
        info = self.info
        if info is None:
            return {}
        headers = {MCP_PROTOCOL_VERSION_HEADER: info.protocol_version}
        if info.era == "2026-07-28":
            headers[MCP_METHOD_HEADER] = method
            key = NAME_BEARING_METHODS.get(method)
            value = body.get(key) if key is not None else None
            if isinstance(value, str):
                headers[MCP_NAME_HEADER] = encode_header_value(value)
        return headers

    async def _on_request(self, dctx: DispatchContext[Any], method: str, params: Mapping[str, Any] | None) -> Any:
        if self.on_request is None:
            raise MCPError(-32601, "Method not found", method)
        if (refused := task_refusal(method, params)) is not None:
            raise refused  # a client's task result would reach this upstream ungoverned
        return await self.on_request(method, dict(params) if params is not None else None)

    async def _on_notify(self, dctx: DispatchContext[Any], method: str, params: Mapping[str, Any] | None) -> None:
        # Progress reaches the caller through `on_progress`; cancellation is applied by the dispatcher. The
        # gateway relays no tasks (gateway/tasks.py), so a task's status is about nothing its client asked for.
        if method in ("notifications/progress", "notifications/cancelled") or is_task_method(method):
            return
        body = dict(params) if params is not None else None
        # A request-scoped notification (a log line, say) goes to the one request waiting for them;
        # with several in flight it cannot be attributed, so it takes the connection-wide path.
        scoped = not method.endswith("list_changed") and not method.startswith("notifications/resources/")
        if self.scrubber is not None:
            body = self.scrubber.notification(method, body)
        if scoped and len(self._receivers) == 1:
            await next(iter(self._receivers.values()))(method, body)
            return
        if self.on_notify is not None:
            await self.on_notify(method, body)


#: Our words for what `_MessageLimitTransport` cut off; mcp's HTTP client reports the error it raised as
#: a -32700 (a JSON answer) or -32000 (an SSE event) whose message ends with them.
_MESSAGE_CUT = "a message longer than the limit of"
_EVENT_CUT = "an event longer than the limit of"


def _too_long(exc: MCPError) -> str | None:
    """The reason, if `exc` is mcp's report of a message our `_MessageLimitTransport` cut off."""
    if exc.code not in (PARSE_ERROR, CONNECTION_CLOSED) or exc.data is not None:
        return None
    for words in (_MESSAGE_CUT, _EVENT_CUT):
        at = exc.message.find(words)
        if at >= 0:
            return exc.message[at:]
    return None


def _is_local_timeout(exc: MCPError, method: str) -> bool:
    """The dispatcher's own timeout (ours and mcp's word it alike), not an error the upstream sent."""
    return exc.code == REQUEST_TIMEOUT and exc.message == f"Request {method!r} timed out" and exc.data is None


def _is_http_error(exc: MCPError) -> bool:
    """mcp's HTTP client's stand-in for a 4xx/5xx answer that carried no JSON-RPC error."""
    return exc.code == INTERNAL_ERROR and exc.message == "Server returned an error response" and exc.data is None


def _is_lost_stream(exc: MCPError) -> bool:
    """mcp's HTTP client giving up on one request's response stream ("SSE stream ended without a response")."""
    return exc.code == CONNECTION_CLOSED and exc.data is None and exc.message.startswith("SSE stream ")


def _is_local_close(exc: MCPError) -> bool:
    """The dispatcher's own "connection closed" outcome (an upstream may use -32000 for anything)."""
    return exc.code == CONNECTION_CLOSED and exc.message == "Connection closed" and exc.data is None
