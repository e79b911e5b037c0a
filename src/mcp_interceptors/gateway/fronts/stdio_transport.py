"""mcp's stdio server transport on non-blocking descriptors: no worker threads, one loop step per line.

mcp's `stdio_server()` reads stdin and writes stdout through `anyio.wrap_file`, one thread hop per line
each way. `fd_stdio_server` yields the same pair of streams for an mcp `Server` (a guard host, say); the
gateway's own stdio front (`stdio.py`) uses its `HeldRequests` and `divert`. As with mcp, fd 0 and fd 1 are
diverted (to /dev/null and stderr) while serving, so stray prints and child processes never touch the wire.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from mcp_interceptors.gateway.jsonrpc.framing import (
    DEFAULT_MAX_LINE_BYTES,
    INVALID_REQUEST,
    PARSE_ERROR,
    LineBuffer,
    error_response,
    is_request_id,
    loads,
    refusal,
)
from mcp_interceptors.gateway.jsonrpc.pipes import read_chunk, write_all

#: How long `serve` lets the requests read before end of input finish (the gateway's is `stdio.drain_timeout_ms`).
SERVE_DRAIN_S = 10.0
#: How long the answers already made may take to be written out once the server has stopped.
_FLUSH_S = 5.0


class HeldRequests:
    """The client's requests handed to an mcp `Server` and not answered yet.

    At end of input the server's own input stays open until they are answered: mcp's server answers
    what it still holds when its input ends with an error, and a client that writes its requests and
    closes its input (`printf ... | serve`) expects their results.
    """

    def __init__(self) -> None:
        self._ids: set[Any] = set()
        self._idle: anyio.Event | None = None

    def handed(self, message: dict[str, Any]) -> None:
        if message.get("method") == "subscriptions/listen":  # a stream that lasts as long as the input: not awaited
            return
        if "method" in message and is_request_id(message.get("id")):
            self._ids.add(message["id"])
        elif message.get("method") == "notifications/cancelled":  # mcp's server never answers those
            params = message.get("params")
            cancelled = params.get("requestId") if isinstance(params, dict) else None
            if is_request_id(cancelled):
                self._ids.discard(cancelled)

    def answered(self, request_id: Any) -> None:
        if is_request_id(request_id):
            self._ids.discard(request_id)
            if self._idle is not None and not self._ids:
                self._idle.set()

    async def wait(self, seconds: float) -> None:
        """Until every request handed over is answered, for at most `seconds`."""
        if self._ids and seconds > 0:
            self._idle = anyio.Event()
            with anyio.move_on_after(seconds):
                await self._idle.wait()


@asynccontextmanager
async def fd_stdio_server(
    stdin_fd: int = 0, stdout_fd: int = 1
) -> AsyncIterator[
    tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
]:
    """Serve JSON-RPC lines on the process's stdin/stdout (POSIX only)."""
    if sys.platform == "win32":  # pragma: no cover - the threaded transport works there
        raise RuntimeError("fd_stdio_server needs POSIX non-blocking pipes")
    read_fd, restore_in = divert(stdin_fd, os.open(os.devnull, os.O_RDONLY))
    write_fd, restore_out = divert(stdout_fd, os.dup(2))
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](16)
    held = HeldRequests()
    flushed = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read_lines, read_fd, read_send, write_send.clone(), held)
            tg.start_soon(_write_lines, write_fd, write_receive, held, flushed)
            yield read_receive, write_send
            await write_send.aclose()  # the server has stopped: write out what it answered
            with anyio.move_on_after(_FLUSH_S):
                await flushed.wait()
            tg.cancel_scope.cancel()
    finally:
        restore_in()
        restore_out()


def divert(fd: int, replacement: int) -> tuple[int, Callable[[], None]]:
    """Keep the wire on a private non-blocking duplicate of `fd`; point `fd` at `replacement`."""
    private = os.dup(fd)
    os.dup2(replacement, fd)
    os.close(replacement)
    os.set_blocking(private, False)

    def restore() -> None:
        with suppress(OSError):
            os.set_blocking(private, True)
            os.dup2(private, fd)
            os.close(private)

    return private, restore


async def _read_lines(
    fd: int,
    sink: MemoryObjectSendStream[SessionMessage | Exception],
    replies: MemoryObjectSendStream[SessionMessage],
    held: HeldRequests,
) -> None:
    buffer = LineBuffer(DEFAULT_MAX_LINE_BYTES)
    async with sink, replies:
        while chunk := await read_chunk(fd):  # b"" at EOF: the client is done sending
            lines, too_long = buffer.take(chunk)
            for line in lines:
                if line.strip():
                    await _read_line(line, sink, replies, held)
            if too_long is not None:  # its end cannot be found without reading it all: hang up
                message = f"Invalid Request: {too_long}"
                await replies.send(
                    _as_session_message(error_response(None, INVALID_REQUEST, message, {"limitBytes": too_long.limit}))
                )
                await sink.send(too_long)
                return
        await held.wait(SERVE_DRAIN_S)


async def _read_line(
    line: bytes,
    sink: MemoryObjectSendStream[SessionMessage | Exception],
    replies: MemoryObjectSendStream[SessionMessage],
    held: HeldRequests,
) -> None:
    """Hand one line to mcp's server; answer here what its models would drop or misread, so no client
    waits forever for a reply that mcp's server would only log."""
    try:
        raw = loads(line)
    except ValueError as exc:
        await replies.send(_as_session_message(error_response(None, PARSE_ERROR, "Parse error")))
        await sink.send(exc)
        return
    refused = refusal(raw)
    if refused is not None:
        await replies.send(_as_session_message(refused))
        return
    try:
        message = types.jsonrpc_message_adapter.validate_python(raw, by_name=False)
    except Exception as exc:  # a bad line fails alone, as in mcp's transport
        if "method" in raw and "id" in raw:
            await replies.send(_as_session_message(error_response(raw["id"], INVALID_REQUEST, "Invalid Request")))
        await sink.send(exc)
        return
    held.handed(raw)
    await sink.send(SessionMessage(message))


def _as_session_message(body: dict[str, Any]) -> SessionMessage:
    return SessionMessage(types.jsonrpc_message_adapter.validate_python(body, by_name=False))


async def _write_lines(
    fd: int, source: MemoryObjectReceiveStream[SessionMessage], held: HeldRequests, flushed: anyio.Event
) -> None:
    async with source:
        async for session_message in source:
            message = session_message.message
            data = message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
            try:
                await write_all(fd, data)
            except BrokenPipeError:
                return
            if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
                held.answered(message.id)
    flushed.set()
