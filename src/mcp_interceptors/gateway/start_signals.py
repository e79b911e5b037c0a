"""Signals while the gateway starts: a SIGHUP kept for the reload that runs once it serves (`reload`), and a
SIGTERM/SIGINT that cancel the start. Light on purpose: the command uses them before it imports the rest.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import AsyncIterator

import anyio
import anyio.abc


class _EarlySighup:
    """A SIGHUP that came before `Reloader.on_sighup` listened for it (a Python handler, which an exec resets,
    so upstream commands started meanwhile keep the default)."""

    def __init__(self) -> None:
        self.pending = False

    def handle(self, signum: int, frame: object) -> None:
        self.pending = True  # no logging in a signal handler: `on_sighup` says it once it reloads

    def take(self) -> bool:
        pending, self.pending = self.pending, False
        return pending


_early = _EarlySighup()


def hold_sighup() -> None:
    """Keep a SIGHUP that comes before the gateway serves (without this it ends the process): the reload runs once
    the gateway serves. Not on Windows, which has no SIGHUP."""
    if sys.platform != "win32":
        signal.signal(signal.SIGHUP, _early.handle)


def take_held_sighup() -> bool:
    """Whether a SIGHUP came while the gateway started (once: it is forgotten as it is told)."""
    return _early.take()


@contextlib.asynccontextmanager
async def cancelled_by_signal(tg: anyio.abc.TaskGroup) -> AsyncIterator[anyio.CancelScope]:
    """A scope that SIGTERM/SIGINT cancel (start-up: connecting upstreams and interceptor servers takes a while).
    The caller then stops what it started and exits 0: the signal's default action killed the process, leaving
    the servers it had started running. The handler is gone when the block ends, for `serve_*` to install theirs."""
    ended = anyio.Event()
    watch = anyio.CancelScope()
    with anyio.CancelScope() as scope:

        async def run(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            try:
                with watch, anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                    task_status.started()
                    async for _ in signals:
                        scope.cancel()
                        return
            finally:
                ended.set()

        await tg.start(run)
        try:
            yield scope
        finally:
            watch.cancel()
            with anyio.CancelScope(shield=True):
                await ended.wait()
