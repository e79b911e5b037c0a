"""The gateway's stdio front, lean: requests the forwarder serves are read and answered as dicts by our peer.

`serve_stdio_fast` reads the client with a `JsonRpcPeer` (`jsonrpc/peer.py`), whose `run` reads each
message: `StdioFront.on_request` hands a request to the forwarder and the peer writes its answer. The
handshake, the gateway's own methods and anything before the handshake go to its mcp `Server` over
in-memory streams (`StdioFront.divert`), so the protocol's rules for those stay mcp's.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY

from mcp_interceptors.gateway.fronts.stdio_transport import HeldRequests, divert
from mcp_interceptors.gateway.jsonrpc.framing import INTERNAL_ERROR, encode_line, error_response, is_request_id, loads
from mcp_interceptors.gateway.jsonrpc.peer import JsonRpcPeer
from mcp_interceptors.gateway.jsonrpc.pipes import PipeChunks, pipe_reader, read_chunk, write_all
from mcp_interceptors.gateway.server import LOCAL_METHODS
from mcp_interceptors.protocol.errors import InterceptorsError

if TYPE_CHECKING:
    from mcp_interceptors.gateway.gateway import Gateway

#: How long a stdio gateway waits for its client's first message before connecting its upstreams.
FIRST_MESSAGE_WAIT_S = 2.0


class PeerDownstream:
    """The client of the lean stdio front, as the session sees it."""

    def __init__(self, peer: JsonRpcPeer, progress_token: Any = None) -> None:
        self.peer = peer
        self.progress_token = progress_token

    async def request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        return await self.peer.send_raw_request(method, params)

    async def notify(self, method: str, params: dict[str, Any] | None) -> None:
        await self.peer.notify(method, params)

    async def notify_related(self, method: str, params: dict[str, Any] | None) -> None:
        await self.peer.notify(method, params)  # stdio has one stream

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        if self.progress_token is None:
            return
        body: dict[str, Any] = {"progressToken": self.progress_token, "progress": progress}
        if total is not None:
            body["total"] = total
        if message is not None:
            body["message"] = message
        await self.peer.notify("notifications/progress", body)


class StdioFront:
    """The gateway on stdio with a lean hot path.

    Forwarded requests go straight from our `JsonRpcPeer` to the forwarder (`on_request`). The gateway's
    mcp `Server` still answers everything it owns (the handshake, discovery, ping, listen, the
    interceptor-host methods) and anything before the handshake, over in-memory streams, so the
    protocol's rules for those stay mcp's.
    """

    def __init__(self, gateway: Gateway, peer: JsonRpcPeer, to_server: MemoryObjectSendStream[Any]) -> None:
        self.sessions = gateway.sessions
        self.forwarder = gateway.forwarder
        self.notifications = gateway.notifications
        self.peer = peer
        self.to_server = to_server
        self.era: str | None = None
        self.client_params: dict[str, Any] | None = None
        self._initialize_id: Any = None
        self.held_by_server = HeldRequests()

    def leaves(self, message: dict[str, Any]) -> bool:
        """Whether `divert` leaves `message` to the peer, told without awaiting: our own answers, and the
        requests the session serves (not the handshake, the gateway's own methods, nor anything before
        the handshake). Notifications are never left this way: `divert` looks at each."""
        method = message.get("method")
        if method is None:
            return self.peer.is_pending(message.get("id"))
        if "id" not in message:
            return False
        return method != "initialize" and method not in LOCAL_METHODS and self._era_of(message) is not None

    async def divert(self, message: dict[str, Any]) -> bool:
        if self.leaves(message):
            return False
        method = message.get("method")
        if method is None:  # an answer to a request the mcp server sent
            return await self._to_server(message)
        if "id" not in message:
            if method == "notifications/cancelled":
                request_id = (message.get("params") or {}).get("requestId")
                return False if self.peer.is_serving(request_id) else await self._to_server(message)
            if method != "notifications/initialized":
                return False
            forwarded = await self._to_server(message)
            if self.era == "legacy":
                # The client can take requests now, before its first own request gives the session a channel.
                session = self.sessions.for_request("legacy", None, None, self.client_params)
                if session.standalone is None:
                    session.standalone = PeerDownstream(self.peer)
            self.sessions.stdio_client_ready()
            return forwarded
        if method == "initialize":
            self._initialize_id = message.get("id")
            params = message.get("params")
            self.client_params = params if isinstance(params, dict) else None
        return await self._to_server(message)  # the handshake, the gateway's own methods, or before the handshake

    def _era_of(self, message: dict[str, Any]) -> str | None:
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        if isinstance(meta, dict) and PROTOCOL_VERSION_META_KEY in meta:
            return "2026-07-28"
        return self.era

    async def _to_server(self, message: dict[str, Any]) -> bool:
        self.held_by_server.handed(message)
        try:
            parsed: Any = SessionMessage(types.jsonrpc_message_adapter.validate_python(message, by_name=False))
        except Exception as exc:  # let mcp answer malformed input the way it always does
            parsed = exc
        await self.to_server.send(parsed)
        return True

    async def from_server(self, receive: MemoryObjectReceiveStream[SessionMessage]) -> None:
        """Relay the mcp server's messages to the client; note the era its handshake settled."""
        async with receive:
            async for session_message in receive:
                body = session_message.message.model_dump(by_alias=True, mode="json", exclude_unset=True)
                if self._initialize_id is not None and body.get("id") == self._initialize_id and "result" in body:
                    self.era = "legacy"
                await self.peer.send_line(encode_line(body))
                if "method" not in body:
                    self.held_by_server.answered(body.get("id"))

    async def on_request(self, request_id: Any, method: str, params: dict[str, Any] | None) -> Any:
        """A client request the forwarder serves (the peer writes the answer, or the error)."""
        self.sessions.stdio_client_ready()  # a 2026-07-28 client makes no handshake: its first request counts
        era = self._era_of({"params": params})
        session = self.sessions.for_request(
            "2026-07-28" if era == "2026-07-28" else "legacy", None, None, self.client_params
        )
        meta = (params or {}).get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        try:
            return await self.forwarder.handle(session, method, params, PeerDownstream(self.peer, token), request_id)
        except InterceptorsError as exc:
            raise MCPError(exc.code, exc.message, exc.data) from None

    async def on_notify(self, request_id: Any, method: str, params: dict[str, Any] | None) -> None:
        era = self.era if self.era is not None else "legacy"
        sessions = self.sessions
        session = sessions.for_request("legacy" if era == "legacy" else "2026-07-28", None, None, self.client_params)
        await self.notifications.from_client(session, method, params)


async def connect_for_first_message(
    gateway: Gateway, read: Callable[[], Awaitable[bytes]], write: Callable[[bytes], Awaitable[None]]
) -> Callable[[], Awaitable[bytes]]:
    """Connect the upstreams presenting the client that the first message names; return a reader that
    gives back what was read for it.

    A client writes its `initialize` (or a 2026-07-28 request with its envelope) as soon as it has
    spawned the gateway, so it is normally waiting by now. End of input, or nothing within
    `FIRST_MESSAGE_WAIT_S`, connects at once with the gateway's own identity, as at start. If the
    upstreams cannot be connected, the first request gets the reason and the error stops the gateway.
    """
    received = b""
    limit = gateway.config.stdio.max_message_bytes
    with anyio.move_on_after(FIRST_MESSAGE_WAIT_S):
        while b"\n" not in received and len(received) <= limit:  # past it, the peer refuses the line
            chunk = await read()
            if not chunk:
                break
            received += chunk
    first = _parsed(received.split(b"\n", 1)[0])
    try:
        handshake = first is not None and first.get("method") == "initialize"
        await gateway.connect_upstreams(presented_client(first), "legacy" if handshake else None)
    except Exception as exc:
        if first is not None and isinstance(first.get("method"), str) and is_request_id(first.get("id")):
            reason = f"the gateway could not connect its upstreams: {exc}"
            data = exc.data if isinstance(exc, InterceptorsError | MCPError) else None
            await write(encode_line(error_response(first["id"], INTERNAL_ERROR, reason, data)))
        raise
    replay = [received] if received else []

    async def read_again() -> bytes:
        return replay.pop() if replay else await read()

    return read_again


def _parsed(line: bytes) -> dict[str, Any] | None:
    try:
        message = loads(line) if line.strip() else None
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def presented_client(message: dict[str, Any] | None) -> dict[str, Any] | None:
    """The `initialize` params a client's first request stands for: its own, or its envelope's parts."""
    params = message.get("params") if message is not None else None
    if message is None or not isinstance(params, dict):
        return None
    if message.get("method") == "initialize":
        return params
    meta = params.get("_meta")
    if not isinstance(meta, dict):
        return None
    presented = {"clientInfo": meta.get(CLIENT_INFO_META_KEY), "capabilities": meta.get(CLIENT_CAPABILITIES_META_KEY)}
    return {key: value for key, value in presented.items() if isinstance(value, dict)} or None


async def serve_stdio_fast(gateway: Gateway, stdin_fd: int = 0, stdout_fd: int = 1) -> None:
    """Serve `gateway` on the process's stdin/stdout until the client closes stdin.

    Unless the gateway is connected already, its upstreams are connected first, presenting the client
    its first message names (see `connect_for_first_message`).
    """
    read_fd, restore_in = divert(stdin_fd, os.open(os.devnull, os.O_RDONLY))
    write_fd, restore_out = divert(stdout_fd, os.dup(2))
    try:
        async with pipe_reader(read_fd) as reader:
            await _serve_fast(gateway, reader, read_fd, write_fd)
    finally:
        restore_in()
        restore_out()


async def _serve_fast(gateway: Gateway, reader: PipeChunks | None, read_fd: int, write_fd: int) -> None:
    """Serve on `reader` (plain reads of `read_fd` without one) and the non-blocking `write_fd` until end
    of input (see `serve_stdio_fast`)."""
    read: Callable[[], Awaitable[bytes]] = partial(read_chunk, read_fd) if reader is None else reader.read
    if not gateway.connected:
        read = await connect_for_first_message(gateway, read, partial(write_all, write_fd))
    peer = JsonRpcPeer(
        read,
        partial(write_all, write_fd),
        id_prefix="gw",
        max_line_bytes=gateway.config.stdio.max_message_bytes,
        limit_setting="stdio.max_message_bytes",
        max_in_flight=gateway.config.stdio.max_requests_in_flight,
        in_flight_setting="stdio.max_requests_in_flight",
    )
    if reader is not None:
        reader.take_now = peer.take_now
    to_server, server_in = anyio.create_memory_object_stream[Any](32)
    server_out, from_server = anyio.create_memory_object_stream[SessionMessage](32)
    front = StdioFront(gateway, peer, to_server)
    server = gateway.server
    relayed = anyio.Event()

    async def run_server() -> None:
        async with server_out:  # its end ends the relay, once the relay has written everything
            await server.run(server_in, server_out, server.create_initialization_options())

    async def relay() -> None:
        await front.from_server(from_server)
        relayed.set()

    drain_s = gateway.config.stdio.drain_timeout_ms / 1000
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_server)
        tg.start_soon(relay)
        await peer.run(front.on_request, front.on_notify, divert=front.divert, leaves=front.leaves, drain_s=drain_s)
        if peer.input_ended_at is not None:  # the same time budget for what mcp's server holds
            await front.held_by_server.wait(peer.input_ended_at + drain_s - anyio.current_time())
        # End of input for mcp's server too: it answers what it still holds with an error.
        await to_server.aclose()
        with anyio.move_on_after(drain_s):
            await relayed.wait()
        tg.cancel_scope.cancel()
