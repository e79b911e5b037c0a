"""Pipes for the stdio paths: a stdio upstream spawned (`spawn.py`) with a peer on its pipes, and readers and
writers of non-blocking descriptors that cost one loop step per chunk.

Pipes, not anyio's process streams: those add a checkpoint and a scheduling round trip to every write,
and layers of stream wrappers to every read, a measurable share of each message a gateway forwards
(`bench/gateway_overhead.py`, stdio cells).
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from typing import cast

import anyio
import anyio.abc
from mcp.client.stdio import get_default_environment

from mcp_interceptors.gateway.jsonrpc.framing import DEFAULT_MAX_LINE_BYTES
from mcp_interceptors.gateway.jsonrpc.peer import JsonRpcPeer, asyncio_loop
from mcp_interceptors.gateway.jsonrpc.spawn import Spawned, spawn_piped, stop_spawned

logger = logging.getLogger(__name__)

_CHUNK = 1 << 16


def server_environment(env: Mapping[str, str] | None) -> dict[str, str]:
    """What a stdio server runs with: mcp's safe defaults from our environment, then its own `env`."""
    return {**get_default_environment(), **(env or {})}


async def spawn_server(command: str, args: list[str], env: Mapping[str, str] | None, cwd: str | None) -> Spawned:
    """Start a stdio server, its stdout ready for `stdio_peer`."""
    spawned = await spawn_piped([command, *args], server_environment(env), cwd=cwd)
    os.set_blocking(spawned.stdout_fd, False)
    return spawned


@asynccontextmanager
async def stdio_peer(
    command: str,
    args: list[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    max_line_bytes: int | None = DEFAULT_MAX_LINE_BYTES,
    limit_setting: str | None = None,
    spawned: Spawned | None = None,
) -> AsyncIterator[JsonRpcPeer]:
    """Spawn a stdio server (or take `spawned`, one `spawn_server` started already) and talk to it through a
    `JsonRpcPeer`; on exit it is stopped politely, then terminated, then killed, each step bounded. A line
    from it longer than `max_line_bytes` ends the connection (see `JsonRpcPeer`)."""
    if spawned is None:
        spawned = await spawn_server(command, args, env, cwd)
    # From here on it is ours to stop: no checkpoint comes before the `try`.
    stdin_fd, stdout_fd = spawned.stdin_fd, spawned.stdout_fd
    stdin_open = True

    async def write(data: bytes) -> None:
        if not stdin_open:  # never a write to whatever file takes the closed descriptor's number next
            raise anyio.ClosedResourceError
        await write_all(stdin_fd, data)

    try:
        async with pipe_reader(stdout_fd) as reader:
            read = partial(read_chunk, stdout_fd) if reader is None else reader.read
            peer = JsonRpcPeer(read, write, id_prefix="gw", max_line_bytes=max_line_bytes, limit_setting=limit_setting)
            if reader is not None:
                reader.take_now = peer.take_now
            yield peer
    finally:
        stdin_open = False
        anyio.notify_closing(stdin_fd)  # a write waiting on a full pipe ends as closed
        anyio.notify_closing(stdout_fd)  # a fallback read waiting on it ends
        await stop_spawned(spawned)  # closes its input: a polite server exits


async def read_chunk(fd: int) -> bytes:
    """What the non-blocking `fd` has (b"" at end of input), waiting until it has something."""
    while True:
        try:
            return os.read(fd, _CHUNK)
        except BlockingIOError:
            await anyio.wait_readable(fd)


#: How much a pipe reader holds unread before it stops reading the pipe (the writer then waits on it).
_PAUSE_READING_AT = 1 << 20


class PipeChunks(asyncio.Protocol):
    """What the loop reads from a pipe, held until `read` takes it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        #: Offered each chunk that arrives while `read` waits (nothing held); True: it took the chunk itself.
        self.take_now: Callable[[bytes], bool] | None = None
        self._chunks: deque[bytes] = deque()
        self._held = 0
        self._ended = False
        self._waiter: asyncio.Future[None] | None = None
        self._transport: asyncio.ReadTransport | None = None
        self._paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.ReadTransport, transport)  # uvloop's is one, though not a subclass

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done() and self.take_now is not None and self._taken(data):
            return
        self._chunks.append(data)
        self._held += len(data)
        if self._held > _PAUSE_READING_AT and not self._paused and self._transport is not None:
            self._paused = True  # a reader that falls behind holds the writer back, as the pipe itself would
            self._transport.pause_reading()
        self._wake()

    def _taken(self, data: bytes) -> bool:
        """Whether `take_now` handled `data`. An exception here would reach the loop, which closes the pipe
        (the peer's input would end as if it had closed it): the chunk goes to `read` instead."""
        assert self.take_now is not None
        try:
            return self.take_now(data)
        except Exception:
            logger.exception("a pipe's early reader raised; the chunk is read the ordinary way")
            return False

    def eof_received(self) -> bool:
        self._ended = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended = True
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def read(self) -> bytes:
        """All that arrived since the last read (b"" at end of input), waiting for some if there is none."""
        while not self._chunks:
            if self._ended:
                return b""
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        chunk = self._chunks.popleft() if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        self._held = 0
        if self._paused and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()
        return chunk


@asynccontextmanager
async def pipe_reader(fd: int) -> AsyncIterator[PipeChunks | None]:
    """A reader (its `read` is a `ReadChunk`) for the pipe or socket `fd` (left open: the reader works on a
    duplicate), or None for anything else (a regular file, a terminal) or a loop other than asyncio's.

    The loop reads the pipe as data comes and hands it over in one step: waiting with `anyio.wait_readable`
    instead registers and unregisters the descriptor with the loop on every read, and anyio's process
    streams add their own layers, a measurable share of each message a gateway forwards (`bench/gateway_overhead.py`).
    """
    loop = asyncio_loop()
    mode = os.fstat(fd).st_mode
    if loop is None or not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):  # uvloop aborts on a regular file
        yield None
        return
    chunks = PipeChunks(loop)
    pipe = os.fdopen(os.dup(fd), "rb", buffering=0)
    try:
        transport, _ = await loop.connect_read_pipe(lambda: chunks, pipe)
    except BaseException:
        pipe.close()
        raise
    try:
        yield chunks
    finally:
        transport.close()


async def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to the non-blocking `fd`, waiting while its pipe is full."""
    while data:
        try:
            written = os.write(fd, data)
        except BlockingIOError:
            await anyio.wait_writable(fd)
            continue
        data = data[written:]
