"""`pipe_reader`: the loop reads a pipe for a `JsonRpcPeer`; anything else is left to the plain read."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from mcp_interceptors.gateway.jsonrpc import pipes
from mcp_interceptors.gateway.jsonrpc.pipes import pipe_reader, write_all

pytestmark = pytest.mark.anyio


async def test_a_regular_file_gets_no_pipe_reader(tmp_path: Path) -> None:
    path = tmp_path / "input"
    path.write_bytes(b"{}\n")
    fd = os.open(path, os.O_RDONLY)
    try:
        async with pipe_reader(fd) as reader:
            assert reader is None
    finally:
        os.close(fd)


async def test_a_reader_that_falls_behind_holds_the_writer_back_and_loses_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pipes, "_PAUSE_READING_AT", 1000)
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    sent = bytes(range(256)) * 8000  # ~2 MB: many times the pipe's own buffer
    received = bytearray()
    try:
        async with pipe_reader(read_fd) as reader, anyio.create_task_group() as tg:
            assert reader is not None

            async def write() -> None:
                await write_all(write_fd, sent)
                os.close(write_fd)

            tg.start_soon(write)
            with anyio.fail_after(20):
                while chunk := await reader.read():
                    received += chunk
                    assert len(chunk) < 1000 + (1 << 18)  # paused past the limit: at most one more read of the pipe
                    await anyio.sleep(0.001)  # slower than the writer
    finally:
        os.close(read_fd)
    assert bytes(received) == sent
