"""A lean stdio server transport: the same streams as mcp's `stdio_server()`, without worker threads.

mcp reads stdin and writes stdout through `anyio.wrap_file`, one thread hop per line each way;
on a gateway that is most of the per-call cost. Here the descriptors are non-blocking and
awaited with `anyio.wait_readable`/`wait_writable` on the event loop. As with mcp, fd 0 and fd 1
are diverted (to /dev/null and stderr) while serving, so stray prints and child processes never
touch the wire, and restored on exit.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress

import anyio
import anyio.abc
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

_CHUNK = 1 << 16


@asynccontextmanager
async def fd_stdio_server(
    stdin_fd: int = 0, stdout_fd: int = 1
) -> AsyncIterator[
    tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
]:
    """Serve JSON-RPC lines on the process's stdin/stdout (POSIX only)."""
    if sys.platform == "win32":  # pragma: no cover - the threaded transport works there
        raise RuntimeError("fd_stdio_server needs POSIX non-blocking pipes")
    read_fd, restore_in = _divert(stdin_fd, os.open(os.devnull, os.O_RDONLY))
    write_fd, restore_out = _divert(stdout_fd, os.dup(2))
    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](16)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read_lines, read_fd, read_send)
            tg.start_soon(_write_lines, write_fd, write_receive)
            yield read_receive, write_send
            tg.cancel_scope.cancel()
    finally:
        restore_in()
        restore_out()


def _divert(fd: int, replacement: int) -> tuple[int, Callable[[], None]]:
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


async def _read_lines(fd: int, sink: MemoryObjectSendStream[SessionMessage | Exception]) -> None:
    pending = b""
    async with sink:
        while True:
            try:
                chunk = os.read(fd, _CHUNK)
            except BlockingIOError:
                await anyio.wait_readable(fd)
                continue
            if not chunk:
                break  # EOF: the client went away
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                try:
                    message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except Exception as exc:  # a bad line fails alone, as in mcp's transport
                    await sink.send(exc)
                    continue
                await sink.send(SessionMessage(message))


async def _write_lines(fd: int, source: MemoryObjectReceiveStream[SessionMessage]) -> None:
    async with source:
        async for session_message in source:
            data = session_message.message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
            while data:
                try:
                    written = os.write(fd, data)
                except BlockingIOError:
                    await anyio.wait_writable(fd)
                    continue
                except BrokenPipeError:
                    return
                data = data[written:]
