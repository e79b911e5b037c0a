"""A remote interceptor server that comes back as a new version, with another listing, through the real CLI
gateway: after each reconnect the gateway reads its `interceptors/list` again and plans the new list."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from e2e_support import E2E_DIR, ConfigWriter, gateway_env, raw_request, standard_config, text_of
from e2e_support import fresh_gateway as connect
from helpers import free_tcp_port, spawn, stop, wait_http_ready
from mcp import Client, MCPError

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

VERSIONED_SERVER = str(E2E_DIR / "e2e_versioned_interceptor_server.py")


async def listed(client: Client) -> list[str]:
    return [d["name"] for d in (await raw_request(client, "interceptors/list", {}))["interceptors"]]


async def outcome(client: Client, text: str) -> str | dict[str, Any]:
    try:
        return text_of(await client.call_tool("echo", {"text": text}))
    except MCPError as exc:
        return {"code": exc.code, **(exc.data or {})}


def blocked_by(name: str) -> dict[str, Any]:
    return {
        "code": -32602,
        "interceptor": name,
        "reason": "validation failed",
        "event": "tools/call",
        "phase": "request",
        "status": "validation_failed",
    }


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_r65_a_restarted_interceptor_server_with_a_new_listing_is_planned_anew(
    write_config: ConfigWriter, tmp_path: Path, transport: str
) -> None:
    """v1 of the server lists validator `v1`; it is killed and comes back as v2, listing `v2` instead. The
    gateway kept planning `v1` (failing closed, unknown to the host) and never ran `v2`, and its own
    `interceptors/list` showed `v1`, until the gateway itself was restarted."""
    version, pid_file = tmp_path / "version", tmp_path / "pid"
    version.write_text("v1")
    env = {"VERSION_FILE": str(version), "PID_FILE": str(pid_file)}
    port = free_tcp_port()
    argv = [sys.executable, VERSIONED_SERVER, "--http", str(port)]
    children = []
    if transport == "http":
        server: dict[str, Any] = {"name": "remote", "url": f"http://127.0.0.1:{port}/mcp"}
        children.append(spawn(argv, env=gateway_env(env), label="interceptor server v1"))
        await wait_http_ready(children[0], port)
    else:
        server = {"name": "remote", "command": sys.executable, "args": [VERSIONED_SERVER], "env": env}
    try:
        config = write_config(standard_config(interceptors={"servers": [server]}))
        async with connect("stdio", config, "legacy") as client:
            with anyio.fail_after(30):
                before = (await listed(client), await outcome(client, "block v1"), await outcome(client, "block v2"))
            version.write_text("v2")
            if transport == "http":
                stop(children[0])
                children.append(spawn(argv, env=gateway_env(env), label="interceptor server v2"))
                await wait_http_ready(children[1], port)
            else:
                os.kill(int(pid_file.read_text()), signal.SIGKILL)  # the gateway starts it again: v2
            with anyio.fail_after(30):
                # A call finds the HTTP one's session gone (until then the gateway cannot know it restarted);
                # then there is nothing to wait on but the gateway's reconnect timer.
                while "v2" not in (now := await listed(client)):
                    await outcome(client, "poll")
                    await anyio.sleep(0.1)
                after = (now, await outcome(client, "block v1"), await outcome(client, "block v2"))
    finally:
        for child in children:
            stop(child)
    assert before == (["v1"], blocked_by("v1"), "block v2")
    assert after == (["v2"], "block v1", blocked_by("v2"))
