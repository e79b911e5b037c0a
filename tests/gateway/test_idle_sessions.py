"""Idle handshake-era sessions are closed on time, however short `http.session_idle_s` is."""

from __future__ import annotations

import time

import anyio
import pytest

from mcp_interceptors import Chain
from mcp_interceptors.gateway.config import parse_config
from mcp_interceptors.gateway.server import Gateway
from mcp_interceptors.gateway.session import DownstreamSession

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_an_idle_session_closes_within_a_quarter_of_its_idle_time() -> None:
    config = parse_config(
        {"upstreams": {"a": {"command": "python", "args": ["server.py"]}}, "http": {"session_idle_s": 0.4}}
    )
    gateway = Gateway(config, Chain(role="server"))
    idle = DownstreamSession(gateway, key="idle", era="legacy", last_used=time.monotonic() - 1.0)
    busy = DownstreamSession(gateway, key="busy", era="legacy", last_used=time.monotonic() + 60.0)
    gateway.sessions.update({"idle": idle, "busy": busy})
    closed = anyio.Event()
    close_session = gateway.close_session

    def closing(key: str) -> None:
        close_session(key)
        closed.set()

    gateway.close_session = closing  # type: ignore[method-assign]
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(gateway.sweep_idle_sessions, config.http.session_idle_s)
            started = anyio.current_time()
            await closed.wait()
            tg.cancel_scope.cancel()
    assert anyio.current_time() - started < 0.4  # swept every 0.1 s, not every minute
    assert list(gateway.sessions) == ["busy"]
