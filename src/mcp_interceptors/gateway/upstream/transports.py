"""How the gateway reaches an upstream: a stdio server through our lean peer, Streamable HTTP and legacy SSE
through mcp's transports under its `JSONRPCDispatcher`, each message capped at `max_message_bytes`.

The wire stays raw: params and results are plain dicts, so unknown methods and fields survive. The
routing headers a Streamable HTTP upstream needs are stamped here too (`routing_headers`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urljoin, urlparse

import anyio
import anyio.abc
import httpx2
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import CallOptions
from mcp.shared.inbound import (
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    NAME_BEARING_METHODS,
    encode_header_value,
)
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.message import SessionMessage
from mcp_types import jsonrpc_message_adapter

from mcp_interceptors.gateway.config import TransportConfig
from mcp_interceptors.gateway.jsonrpc.pipes import stdio_peer
from mcp_interceptors.gateway.jsonrpc.spawn import Spawned
from mcp_interceptors.gateway.upstream.errors import EVENT_CUT, MESSAGE_CUT

logger = logging.getLogger(__name__)


class Wire(Protocol):
    """What a connection needs from its JSON-RPC layer: mcp's dispatcher, or our lean stdio peer."""

    async def run(self, on_request: Any, on_notify: Any, *, task_status: anyio.abc.TaskStatus[None]) -> None: ...

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]: ...

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None) -> None: ...


OnHttpError = Callable[[int, str], None]


@asynccontextmanager
async def open_wire(
    config: TransportConfig, on_http_error: OnHttpError | None = None, spawned: Spawned | None = None
) -> AsyncIterator[Wire]:
    """A stdio server gets the lean `JsonRpcPeer` (dicts end to end), on `spawned` if its process was started
    already (`early`); HTTP and SSE use mcp's transports under its `JSONRPCDispatcher`."""
    if config.command is not None:
        limit = config.max_message_bytes
        async with stdio_peer(
            config.command,
            list(config.args),
            env=config.env or None,
            cwd=config.cwd,
            max_line_bytes=limit,
            limit_setting="max_message_bytes",
            spawned=spawned,
        ) as peer:
            yield peer
        return
    if config.url is not None and config.transport == "sse":
        cut = _SseCut()
        async with _sse_transport(config.url, http_client_for(config, on_http_error), cut) as (read, write):
            yield _SseDispatcher(read, write, cut)
        return
    # The client is ours to close (mcp leaves a client it is given open): left open, each connection's
    # pooled sockets would stay behind in CLOSE-WAIT, one set per ended session or reconnect.
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
                kind, error = (EVENT_CUT, EventTooLongError) if self._events else (MESSAGE_CUT, MessageTooLongError)
                raise error(f"{kind} {self._limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


def routing_headers(era: str, protocol_version: str, method: str, body: Mapping[str, Any]) -> dict[str, str]:
    """`mcp-protocol-version` always; `mcp-method`/`mcp-name` in the 2026-07-28 era."""
    headers = {MCP_PROTOCOL_VERSION_HEADER: protocol_version}
    if era == "2026-07-28":
        headers[MCP_METHOD_HEADER] = method
        key = NAME_BEARING_METHODS.get(method)
        value = body.get(key) if key is not None else None
        if isinstance(value, str):
            headers[MCP_NAME_HEADER] = encode_header_value(value)
    return headers
