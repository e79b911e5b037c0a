"""`gateway/upstream/`: the supervised connection's reconnect backoff, and the HTTP transports' limits."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
import httpx2
import pytest

from mcp_interceptors.gateway.config import TransportConfig
from mcp_interceptors.gateway.upstream import connection, transports
from mcp_interceptors.gateway.upstream.connection import UpstreamConnection

pytestmark = pytest.mark.anyio


async def test_a_server_that_dies_right_after_its_handshake_is_restarted_with_growing_delays(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A crash loop (up, then gone at once) must not be restarted every 0.2 s forever."""
    monkeypatch.setattr(connection, "_BACKOFF_FIRST_S", 0.01)
    conn = UpstreamConnection("flaky", TransportConfig(command="server"))
    cycles = 0

    async def connect_once(on_ready: Callable[[], None]) -> None:
        nonlocal cycles
        cycles += 1
        on_ready()  # the handshake succeeded, then the server exited
        if cycles == 5:
            conn.close()

    monkeypatch.setattr(conn, "_connect_once", connect_once)
    with caplog.at_level(logging.WARNING, logger=connection.__name__), anyio.fail_after(10):
        await conn.run()
    delays = [record.args[-1] for record in caplog.records if "reconnecting" in str(record.msg)]  # type: ignore[index]
    assert delays == [0.01, 0.02, 0.04, 0.08]


async def test_a_call_to_an_upstream_backing_off_is_told_when_it_reconnects(monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash loop backs off up to 10 s, longer than a call waits: the call's -32000 says when the next try is."""
    monkeypatch.setattr(connection, "_BACKOFF_FIRST_S", 5.0)
    conn = UpstreamConnection("flaky", TransportConfig(command="server"))

    async def connect_once(on_ready: Callable[[], None]) -> None:
        raise OSError("it exited")

    monkeypatch.setattr(conn, "_connect_once", connect_once)
    restarted = anyio.Event()
    conn.on_restart = restarted.set
    before = conn.unavailable().message
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(conn.run, retry_start=True))
            await restarted.wait()
            backing_off = conn.unavailable()
            conn.close()
    assert before == "upstream 'flaky' is unavailable (not connected)"
    assert backing_off.code == -32000
    assert backing_off.data == {"upstream": "flaky"}
    assert re.fullmatch(
        r"upstream 'flaky' is unavailable \(OSError: it exited; reconnecting in [45]\.\d s\)", backing_off.message
    )


async def test_an_http_upstream_message_is_capped_but_not_its_event_stream() -> None:
    """A JSON answer, or one SSE event, over the limit is cut off; a long stream of small events is not."""

    async def chunks(parts: list[bytes]) -> AsyncIterator[bytes]:
        for part in parts:
            yield part

    event = b"data: " + b"y" * 500 + b"\n\n"
    bodies = {
        "/events": ("text/event-stream", [event[:300], event[300:] + event[:1], *[event] * 20]),
        "/event": ("text/event-stream", [event, b"data: " + b"z" * 1200]),
        "/json": ("application/json", [b"x" * 600, b"x" * 600]),
    }

    def serve(request: httpx2.Request) -> httpx2.Response:
        kind, parts = bodies[request.url.path]
        return httpx2.Response(200, headers={"content-type": kind}, content=chunks(parts))

    transport = transports._MessageLimitTransport(httpx2.MockTransport(serve), 1000)
    async with httpx2.AsyncClient(transport=transport) as client:
        assert len((await client.get("http://u/events")).content) == len(event) * 21 + 1
        with pytest.raises(transports.EventTooLongError, match=r"^an event longer than the limit of 1000 bytes$"):
            await client.get("http://u/event")
        with pytest.raises(transports.MessageTooLongError, match=r"^a message longer than the limit of 1000 bytes$"):
            await client.get("http://u/json")


async def test_a_streamable_http_wire_closes_its_http_client_when_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each per-session HTTP upstream connection (and each reconnect) made an HTTP client that nothing closed:
    its pooled sockets stayed open in CLOSE-WAIT after the upstream hung up, a third of them per ended session
    across 100 DELETEd sessions."""
    made: list[httpx2.AsyncClient] = []
    make = transports.http_client_for

    def http_client_for(*args: Any, **kwargs: Any) -> httpx2.AsyncClient:
        made.append(make(*args, **kwargs))
        return made[-1]

    @asynccontextmanager
    async def open_transport(*args: Any, **kwargs: Any) -> AsyncIterator[tuple[Any, Any]]:
        send, receive = anyio.create_memory_object_stream[Any](1)
        async with send, receive:
            yield receive, send

    monkeypatch.setattr(transports, "http_client_for", http_client_for)
    monkeypatch.setattr(transports, "open_transport", open_transport)
    with anyio.fail_after(5):
        async with transports.open_wire(TransportConfig(url="http://127.0.0.1:9/mcp")):
            assert len(made) == 1 and not made[0].is_closed
    assert made[0].is_closed
