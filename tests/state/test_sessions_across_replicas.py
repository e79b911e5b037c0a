"""Handshake-era sessions across replicas: a replica handed an `Mcp-Session-Id` another replica opened answers
404 at once (POST, GET and DELETE alike), so the client initialises again; it never hangs, never serves the
request on an upstream session of its own, and leaves the owner's session alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from guard_support import E2E_TIMEOUT_S, gateway_config, upstream
from test_replicas import replicas

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

VERSION = "2025-11-25"
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def _body(response: httpx2.Response) -> dict[str, Any]:
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        text = [line[5:] for line in text.splitlines() if line.startswith("data:")][-1]
    answer: dict[str, Any] = json.loads(text)
    return answer


async def open_session(http: httpx2.AsyncClient, url: str) -> str:
    params = {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    response = await http.post(url, json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})
    assert response.status_code == 200, response.text
    session = response.headers["mcp-session-id"]
    headers = {"mcp-session-id": session, "mcp-protocol-version": VERSION}
    done = await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    assert done.status_code == 202
    return session


async def list_tools(http: httpx2.AsyncClient, url: str, session: str) -> httpx2.Response:
    headers = {"mcp-session-id": session, "mcp-protocol-version": VERSION}
    return await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers)


async def test_a_replica_answers_404_for_a_session_another_replica_owns(tmp_path: Path) -> None:
    config = gateway_config([], upstreams={"notes": upstream()})
    with anyio.fail_after(2 * E2E_TIMEOUT_S):
        async with replicas(tmp_path, config) as (url_a, url_b), httpx2.AsyncClient(headers=ACCEPT, timeout=30) as http:
            session = await open_session(http, url_a)
            assert "echo" in {tool["name"] for tool in _body(await list_tools(http, url_a, session))["result"]["tools"]}
            with anyio.fail_after(10):  # at once: no wait for an upstream session that will never open
                elsewhere = await list_tools(http, url_b, session)
                headers = {"mcp-session-id": session, "mcp-protocol-version": VERSION}
                stream = await http.get(url_b, headers={**headers, "accept": "text/event-stream"})
                ended = await http.delete(url_b, headers=headers)
            assert elsewhere.status_code == 404
            error = elsewhere.json()["error"]
            assert error["message"] == "Session not found"
            assert (stream.status_code, ended.status_code) == (404, 404)
            # The owner's session is untouched; the client initialises again where it landed, and goes on.
            assert (await list_tools(http, url_a, session)).status_code == 200
            again = await open_session(http, url_b)
            assert again != session and (await list_tools(http, url_b, again)).status_code == 200
