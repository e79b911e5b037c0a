"""The stdio upstreams started early: once nothing can refuse the start, their processes start while the gateway
builds the rest of itself, and each shared connection takes its own when it first connects.

A stdio server spends most of its own start importing (an mcp server ~0.8 s of CPU): that now overlaps with the
gateway's, and with a stdio client's first message. What is never taken is stopped when `run_early` ends.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import anyio
import anyio.abc

from mcp_interceptors.gateway.config import TransportConfig
from mcp_interceptors.gateway.jsonrpc.pipes import spawn_server
from mcp_interceptors.gateway.jsonrpc.spawn import Spawned, stop_spawned

logger = logging.getLogger(__name__)


class EarlyUpstreams:
    """The processes started for the stdio upstreams of the config in force at start, each until it is taken."""

    def __init__(self) -> None:
        self._waiting: dict[str, tuple[TransportConfig, Spawned]] = {}

    async def spawn(self, upstreams: Mapping[str, TransportConfig]) -> None:
        """Start every stdio upstream. One that cannot start is left to its connection, which says why as
        it always has (the command's error names it)."""
        for name, config in upstreams.items():
            if config.command is None:
                continue
            try:
                spawned = await spawn_server(config.command, list(config.args), config.env or None, config.cwd)
            except OSError as exc:
                logger.debug("upstream %r not started early: %s", name, exc)
                continue
            self._waiting[name] = (config, spawned)

    def take(self, name: str, config: TransportConfig) -> Spawned | None:
        """The process started for upstream `name`, if one was and it runs `config` (a reload may have changed
        it); the caller stops it from now on. Each is taken once: a reconnection starts a new one."""
        waiting = self._waiting.get(name)
        if waiting is None or not _same_process(waiting[0], config):
            return None
        del self._waiting[name]
        return waiting[1]

    async def stop_rest(self) -> None:
        """Stop every process nobody took, all at once (each stop is bounded and shielded)."""
        rest = [spawned for _, spawned in self._waiting.values()]
        self._waiting.clear()
        async with anyio.create_task_group() as tg:
            for spawned in rest:
                tg.start_soon(stop_spawned, spawned)


def _same_process(a: TransportConfig, b: TransportConfig) -> bool:
    return (a.command, a.args, a.env, a.cwd) == (b.command, b.args, b.env, b.cwd)


async def run_early(
    upstreams: Mapping[str, TransportConfig], *, task_status: anyio.abc.TaskStatus[EarlyUpstreams]
) -> None:
    """Start the stdio `upstreams` and hand over the set; when cancelled (the gateway stops, or its start was
    refused after all), stop the processes no connection took."""
    early = EarlyUpstreams()
    try:
        await early.spawn(upstreams)
        task_status.started(early)
        await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True):
            await early.stop_rest()
