"""The HTTP front's Host and Origin checks against forged names, through the real CLI: a `name:*` allow-list
entry means that name with a port of digits only (F11).
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
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def serve(config: dict[str, Any], folder: Path) -> AsyncIterator[int]:
    path = write_yaml(folder / "gateway.yaml", {"upstreams": {"e2e": upstream_entry()}, **config})
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(path), "--http", f"127.0.0.1:{port}")
    async with running(argv, port=port, env=gateway_env(), label="gateway"):
        yield port


FORGED = [
    ("host", "localhost:evil", 421),
    ("host", "127.0.0.1:{port}@evil.com", 421),
    ("host", "localhost:{port}x", 421),
    ("origin", "http://localhost:evil", 403),
    ("origin", "http://127.0.0.1:{port}@evil.com", 403),
]


async def test_f11_a_port_wildcard_accepts_only_digits(tmp_path: Path) -> None:
    """`localhost:*` once matched any suffix: `localhost:evil`, `127.0.0.1:PORT@evil.com`."""
    async with serve({"http": {"metrics": True}}, tmp_path) as port, httpx2.AsyncClient() as http:
        base = f"http://127.0.0.1:{port}"
        statuses = {}
        with anyio.fail_after(60):
            for header, value, _ in FORGED:
                forged = {**HEADERS, header: value.format(port=port)}
                statuses[value] = [
                    (await http.post(f"{base}/mcp", json=PING, headers=forged)).status_code,
                    (await http.get(f"{base}/metrics", headers=forged)).status_code,
                    (await http.get(f"{base}/sse", headers=forged)).status_code,
                ]
            allowed = [
                await http.get(f"{base}/metrics", headers={"host": f"localhost:{port}"}),
                await http.get(f"{base}/metrics", headers={"origin": f"http://localhost:{port}"}),
            ]
    assert statuses == {value: [status] * 3 for _, value, status in FORGED}
    assert [response.status_code for response in allowed] == [200, 200]
