"""`gateway/upstream.py`: the supervised connection's reconnect backoff."""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
import pytest

from mcp_interceptors.gateway import upstream
from mcp_interceptors.gateway.config import TransportConfig
from mcp_interceptors.gateway.upstream import UpstreamConnection

pytestmark = pytest.mark.anyio


async def test_a_server_that_dies_right_after_its_handshake_is_restarted_with_growing_delays(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A crash loop (up, then gone at once) must not be restarted every 0.2 s forever."""
    monkeypatch.setattr(upstream, "_BACKOFF_FIRST_S", 0.01)
    conn = UpstreamConnection("flaky", TransportConfig(command="server"))
    cycles = 0

    async def connect_once(on_ready: Callable[[], None]) -> None:
        nonlocal cycles
        cycles += 1
        on_ready()  # the handshake succeeded, then the server exited
        if cycles == 5:
            conn.close()

    monkeypatch.setattr(conn, "_connect_once", connect_once)
    with caplog.at_level(logging.WARNING, logger=upstream.__name__), anyio.fail_after(10):
        await conn.run()
    delays = [record.args[2] for record in caplog.records if "reconnecting" in str(record.msg)]  # type: ignore[index]
    assert delays == [0.01, 0.02, 0.04, 0.08]
