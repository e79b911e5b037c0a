"""The HTTP front against slow clients, through the real CLI: a request's headers and body must arrive within
`http.header_timeout_s` and `http.body_timeout_s`, or the connection is closed (F10).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2
import pytest
from e2e_support import gateway_env, upstream_entry, write_yaml
from helpers import cli_argv, free_tcp_port, running

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def serve(config: dict[str, Any], folder: Path) -> AsyncIterator[int]:
    path = write_yaml(folder / "gateway.yaml", {"upstreams": {"e2e": upstream_entry()}, **config})
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(path), "--http", f"127.0.0.1:{port}")
    async with running(argv, port=port, env=gateway_env({"E2E_TOKEN": "secret-token"}), label="gateway"):
        yield port


async def closed_by_peer(stream: anyio.abc.SocketStream) -> bool:
    """Read until the gateway closes the connection (what it answered before is discarded)."""
    try:
        while await stream.receive():
            pass
    except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
        return True
    return True


async def test_f10_slow_headers_and_bodies_are_cut_off_at_their_deadlines(tmp_path: Path) -> None:
    """500 slowloris sockets were once held for 20 s without auth: nothing bounded a request's reading."""
    config = {"auth": {"tokens": ["${E2E_TOKEN}"]}, "http": {"header_timeout_s": 1, "body_timeout_s": 1}}
    async with serve(config, tmp_path) as port:
        head = f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
        partial_headers = head.encode()
        unauthenticated_body = (head + "content-length: 100\r\n\r\n{").encode()
        authenticated_body = (head + "authorization: Bearer secret-token\r\ncontent-length: 100\r\n\r\n{").encode()
        streams = [await anyio.connect_tcp("127.0.0.1", port) for _ in range(40)]
        try:
            with anyio.fail_after(30):
                for index, stream in enumerate(streams):
                    first = [b"", partial_headers, unauthenticated_body, authenticated_body][index % 4]
                    if first:
                        await stream.send(first)
                trickle = streams[1]
                async with anyio.create_task_group() as tg:
                    seen: list[bool] = []

                    async def watch(stream: anyio.abc.SocketStream) -> None:
                        seen.append(await closed_by_peer(stream))

                    for stream in streams:
                        tg.start_soon(watch, stream)
                    try:
                        while len(seen) < len(streams):  # a byte now and then does not reset the deadline
                            await trickle.send(b"x")
                            await anyio.sleep(0.2)
                    except (anyio.BrokenResourceError, OSError):
                        pass
            assert seen == [True] * len(streams)
        finally:
            for stream in streams:
                await stream.aclose()
        with anyio.fail_after(30):
            async with httpx2.AsyncClient() as http:
                headers = {**HEADERS, "authorization": "Bearer secret-token"}
                answered = await http.post(f"http://127.0.0.1:{port}/mcp", json=PING, headers=headers)
        assert answered.status_code != 500  # still serving: a fast request is unaffected


async def test_f10_a_request_within_the_deadlines_keeps_its_connection(tmp_path: Path) -> None:
    config = {"http": {"header_timeout_s": 1, "body_timeout_s": 1}}
    async with serve(config, tmp_path) as port, httpx2.AsyncClient() as http:
        with anyio.fail_after(30):
            first = await http.get(f"http://127.0.0.1:{port}/mcp", headers={"accept": "application/json"})
            second = await http.get(f"http://127.0.0.1:{port}/mcp", headers={"accept": "application/json"})
    assert first.status_code == second.status_code
    assert first.headers.get("connection") != "close"
