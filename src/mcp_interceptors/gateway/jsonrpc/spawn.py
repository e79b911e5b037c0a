"""Child processes on pipes of ours: start one with its stdin and stdout piped, and stop it politely, then
harder, each step bounded. `pipes.stdio_peer` talks to a stdio server started so; `upstream.early` starts the
stdio upstreams before their connections exist, and the audit writer's process is started so too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import anyio
import anyio.abc


@dataclass(frozen=True)
class Spawned:
    """A process started by `spawn_piped`: the write end of its stdin (non-blocking) and the read end of its
    stdout. Whoever holds it closes both and stops the process (`stop_spawned`)."""

    process: anyio.abc.Process
    stdin_fd: int
    stdout_fd: int


async def spawn_piped(argv: list[str], env: Mapping[str, str], *, cwd: str | None = None) -> Spawned:
    """Start `argv` with its stdin and stdout on pipes of ours (its stderr is ours)."""
    # Pipes, not anyio's process streams: those add a checkpoint and a scheduling round trip to every write,
    # and layers of stream wrappers to every read, a measurable share of each call
    # (`bench/gateway_overhead.py`, stdio cells).
    child_stdin, stdin_fd = os.pipe()
    stdout_fd, child_stdout = os.pipe()
    try:
        process = await anyio.open_process(argv, stdin=child_stdin, stdout=child_stdout, env=env, cwd=cwd, stderr=None)
    except BaseException:
        os.close(stdin_fd)
        os.close(stdout_fd)
        raise
    finally:
        os.close(child_stdin)
        os.close(child_stdout)
    os.set_blocking(stdin_fd, False)
    return Spawned(process, stdin_fd, stdout_fd)


async def stop_spawned(spawned: Spawned) -> None:
    """Close its pipes (end of input: a polite server exits) and wait for it to exit, shielded."""
    os.close(spawned.stdin_fd)
    os.close(spawned.stdout_fd)
    with anyio.CancelScope(shield=True):
        await stop_process(spawned.process)


async def stop_process(process: anyio.abc.Process) -> None:
    """Wait for `process` to exit (its input closed), then terminate it, then kill it: 2 s each."""
    with anyio.move_on_after(2):
        await process.wait()
        return
    if process.returncode is None:
        process.terminate()
        with anyio.move_on_after(2):
            await process.wait()
            return
        process.kill()
        with anyio.move_on_after(2):
            await process.wait()
