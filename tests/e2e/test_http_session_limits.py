"""Handshake-era HTTP sessions are bounded from their first request, and shared fairly, through the real CLI:
sessions that only `initialize` count in `http.max_sessions` and the sessions gauge and idle out (F8), one
principal gets at most its share (F9), and `/sse` streams count too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from e2e_support import gateway_env, upstream_entry, write_yaml
from helpers import cli_argv, free_tcp_port, running

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def serve(config: dict[str, Any], folder: Path) -> AsyncIterator[str]:
    path = write_yaml(folder / "gateway.yaml", {"upstreams": {"e2e": upstream_entry()}, **config})
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(path), "--http", f"127.0.0.1:{port}")
    async with running(argv, port=port, env=gateway_env({"E2E_A": "token-a", "E2E_B": "token-b"}), label="gateway"):
        yield f"http://127.0.0.1:{port}"


async def initialize(http: httpx2.AsyncClient, base: str, token: str | None = None) -> httpx2.Response:
    headers = {**HEADERS, **({"authorization": f"Bearer {token}"} if token else {})}
    return await http.post(f"{base}/mcp", json=INITIALIZE, headers=headers)


async def once_there_is_room(http: httpx2.AsyncClient, base: str) -> httpx2.Response:
    """Polls `initialize` (callers hold a `fail_after`) until it is not refused for want of room."""
    while True:
        response = await initialize(http, base)
        if response.status_code != 503:
            return response
        await anyio.sleep(0.1)


def gauge(text: str) -> float:
    line = next(line for line in text.splitlines() if line.startswith("mcp_gateway_sessions_open "))
    return float(line.split()[1])


def refusal(response: httpx2.Response, request_id: int | None = 1) -> dict[str, Any]:
    assert response.status_code == 503, response.text
    body: dict[str, Any] = response.json()
    assert body["id"] == request_id and body["error"]["code"] == -32603, body
    data: dict[str, Any] = body["error"]["data"]
    return data


async def test_f8_sessions_that_only_initialize_count_show_in_the_gauge_and_idle_out(tmp_path: Path) -> None:
    """6,000 bare `initialize`s once held 6,000 sessions: `max_sessions` never counted them, the gauge showed 0."""
    config = {"http": {"max_sessions": 3, "session_idle_s": 1, "metrics": True}}
    async with serve(config, tmp_path) as base, httpx2.AsyncClient() as http:
        with anyio.fail_after(60):
            for _ in range(3):
                opened = await initialize(http, base)
                assert opened.status_code == 200 and "mcp-session-id" in opened.headers, opened.text
            data = refusal(await initialize(http, base))
            assert data == {"reason": "too_many_sessions", "limit": 3, "setting": "http.max_sessions"}
            assert gauge((await http.get(f"{base}/metrics")).text) == 3
            again = await once_there_is_room(http, base)  # the idle ones expire
        assert again.status_code == 200, again.text
        assert gauge((await http.get(f"{base}/metrics")).text) <= 1


async def test_f9_one_principal_gets_its_share_and_others_still_open_sessions(tmp_path: Path) -> None:
    """One principal's 20 sessions once locked every other principal out."""
    config = {
        "auth": {"tokens": ["${E2E_A}", "${E2E_B}"]},
        "http": {"max_sessions": 4, "max_sessions_per_principal": 2},
    }
    async with serve(config, tmp_path) as base, httpx2.AsyncClient() as http:
        with anyio.fail_after(60):
            for _ in range(2):
                assert (await initialize(http, base, "token-a")).status_code == 200
            data = refusal(await initialize(http, base, "token-a"))
            assert data == {"reason": "too_many_sessions", "limit": 2, "setting": "http.max_sessions_per_principal"}
            for _ in range(2):
                assert (await initialize(http, base, "token-b")).status_code == 200
            assert refusal(await initialize(http, base, "token-b"))["setting"] == "http.max_sessions"  # all 4 held


async def test_f9_by_default_a_principal_gets_a_quarter_of_max_sessions(tmp_path: Path) -> None:
    config = {"auth": {"tokens": ["${E2E_A}", "${E2E_B}"]}, "http": {"max_sessions": 8}}
    async with serve(config, tmp_path) as base, httpx2.AsyncClient() as http:
        with anyio.fail_after(60):
            for _ in range(2):
                assert (await initialize(http, base, "token-a")).status_code == 200
            assert refusal(await initialize(http, base, "token-a"))["limit"] == 2
            assert (await initialize(http, base, "token-b")).status_code == 200


async def test_legacy_sse_streams_count_against_max_sessions(tmp_path: Path) -> None:
    """300 `/sse` streams were once accepted past `max_sessions`."""
    config = {"http": {"max_sessions": 2, "metrics": True}}
    async with serve(config, tmp_path) as base, httpx2.AsyncClient() as http:
        with anyio.fail_after(60):
            async with http.stream("GET", f"{base}/sse") as first, http.stream("GET", f"{base}/sse") as second:
                assert first.status_code == second.status_code == 200
                data = refusal(await http.get(f"{base}/sse"), None)
                assert data == {"reason": "too_many_sessions", "limit": 2, "setting": "http.max_sessions"}
                assert refusal(await initialize(http, base))["setting"] == "http.max_sessions"
                assert gauge((await http.get(f"{base}/metrics")).text) == 2
            opened = await once_there_is_room(http, base)  # the streams' ends are seen
    assert opened.status_code == 200
