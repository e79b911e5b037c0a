"""`GET /healthz` of the real CLI gateway: 200 while its upstreams are up and its Redis answers, 503 (naming
only counts) when the state store cannot be reached; no token and any Host, as a probe sends it."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx2
import pytest
from guard_support import E2E_TIMEOUT_S, gateway_config, upstream
from helpers import free_tcp_port
from test_replicas import replicas

pytestmark = [pytest.mark.anyio, pytest.mark.e2e, pytest.mark.redis]


async def test_healthz_is_ready_with_its_upstreams_and_state_and_not_without_state(
    tmp_path: Path, redis_url: str
) -> None:
    dead = f"redis://127.0.0.1:{free_tcp_port()}/0"
    for folder, url in (("live", redis_url), ("dead", dead)):
        (tmp_path / folder).mkdir()
        config = gateway_config(
            [{"name": "tool-pinning"}],
            upstreams={"notes": upstream()},
            state={"redis_url": url, "timeout_seconds": 0.5},
            auth={"tokens": ["secret-token-of-the-test"]},
        )
        with anyio.fail_after(E2E_TIMEOUT_S):
            async with replicas(tmp_path / folder, config, count=1) as [mcp], httpx2.AsyncClient(timeout=30) as http:
                response = await http.get(mcp.replace("/mcp", "/healthz"), headers={"host": "10.1.2.3:8080"})
        body = response.json()
        assert body["upstreams"] == {"up": 1, "configured": 1}
        if folder == "live":
            assert (response.status_code, body["status"], body["state"]) == (200, "ok", "ok")
        else:
            assert (response.status_code, body["status"], body["state"]) == (503, "unavailable", "unavailable")
