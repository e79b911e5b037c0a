"""The HTTP fronts under hostile input: malformed bodies, many sessions, slow clients, forged Host names.

Each test runs the real CLI with `--http` on loopback and speaks raw HTTP to it.
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
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
MODERN = {**HEADERS, "mcp-protocol-version": "2026-07-28"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
META = {
    PROTOCOL_VERSION_META_KEY: "2026-07-28",
    CLIENT_INFO_META_KEY: {"name": "raw-client", "version": "1.0.0"},
    CLIENT_CAPABILITIES_META_KEY: {},
}


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def serve(
    config: dict[str, Any], folder: Path, *extra: str, env: dict[str, str] | None = None
) -> AsyncIterator[str]:
    path = write_yaml(folder / "gateway.yaml", config)
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(path), "--http", f"127.0.0.1:{port}", *extra)
    async with running(argv, port=port, env=gateway_env(env), label="HTTP gateway"):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
async def plain(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    async with serve({"upstreams": {"e2e": upstream_entry()}}, tmp_path_factory.mktemp("plain")) as base:
        yield base


BAD_BODIES: list[tuple[dict[str, Any] | list[Any] | str, Any, str | None]] = [
    ({"jsonrpc": "2.0", "id": {"a": 1}, "method": "tools/list"}, None, "id"),
    ({"jsonrpc": "2.0", "id": [1], "method": "ping"}, None, "id"),
    ({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, None, "id"),
    ({"jsonrpc": "2.0", "id": True, "method": "ping"}, None, "id"),
    ({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": [1, 2]}, 3, "params"),
    ({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": "x"}, 4, "params"),
    ({"id": 5, "method": "tools/list"}, 5, "jsonrpc"),
    ({"jsonrpc": "2.0", "id": 6}, 6, "method"),
    ({"jsonrpc": "2.0", "id": 7, "method": 7}, 7, "method"),
    ([{"jsonrpc": "2.0", "id": 8, "method": "ping"}], None, None),
    ("text", None, None),
]


@pytest.mark.parametrize("headers", [HEADERS, MODERN], ids=["no-session", "2026-07-28"])
async def test_a_body_off_the_json_rpc_envelope_gets_400_with_32600_naming_the_field(
    plain: str, headers: dict[str, str]
) -> None:
    """An object id once got 202 and nothing else (mcp's models read it as a notification)."""
    with anyio.fail_after(60):
        async with httpx2.AsyncClient() as http:
            for body, answer_id, field in BAD_BODIES:
                response = await http.post(f"{plain}/mcp", json=body, headers=headers)
                assert response.status_code == 400, (body, response.text)
                error = response.json()
                assert (error["id"], error["error"]["code"]) == (answer_id, -32600), body
                assert error["error"].get("data") == ({"field": field} if field else None), body
            call = {"name": "echo", "arguments": {"text": "still serving"}, "_meta": META}
            good = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": call}
            response = await http.post(
                f"{plain}/mcp", json=good, headers={**MODERN, "mcp-method": "tools/call", "mcp-name": "echo"}
            )
    assert response.status_code == 200, response.text
    assert "still serving" in response.text


async def test_a_session_post_off_the_envelope_is_refused_and_the_session_lives(plain: str) -> None:
    with anyio.fail_after(60):
        # The session's first `tools/list` starts its own upstream: past httpx's 5 s default on a loaded machine.
        async with httpx2.AsyncClient(timeout=60) as http:
            opened = await http.post(f"{plain}/mcp", json=INITIALIZE, headers=HEADERS)
            session = {
                **HEADERS,
                "mcp-session-id": opened.headers["mcp-session-id"],
                "mcp-protocol-version": "2025-11-25",
            }
            await http.post(
                f"{plain}/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session
            )
            bad = await http.post(
                f"{plain}/mcp", json={"jsonrpc": "2.0", "id": {"x": 1}, "method": "tools/list"}, headers=session
            )
            assert bad.status_code == 400 and bad.json()["error"]["data"] == {"field": "id"}
            listed = await http.post(
                f"{plain}/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=session
            )
    assert listed.status_code == 200 and "echo" in listed.text


async def test_a_legacy_sse_message_off_the_envelope_is_refused(plain: str) -> None:
    with anyio.fail_after(60):
        async with httpx2.AsyncClient() as http:
            bad = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": [1]}
            response = await http.post(
                f"{plain}/messages/?session_id=0123456789abcdef0123456789abcdef", json=bad, headers=HEADERS
            )
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": -32600,
        "message": "Invalid Request: params must be an object",
        "data": {"field": "params"},
    }
