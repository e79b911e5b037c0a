"""Requests an upstream sends right after its handshake, before the stdio client's handshake is done.

A stdio gateway makes its upstream handshakes while its client's `initialize` waits; servers such as
the filesystem reference server ask for `roots/list` as soon as theirs completes. The gateway holds
those requests for the client until its handshake is done, governs them like any other, and the
upstream sees the client's own roots.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from e2e_support import ConfigWriter, fresh_gateway, gateway_env, text_of
from helpers import cli_argv, free_tcp_port, pid_alive, running, until
from mcp import Client

ROOTS_UPSTREAM = str(Path(__file__).resolve().parent / "roots_upstream.py")
PROJECT = "file:///work/project"
OTHER = "file:///home/dev/secrets"

pytestmark = pytest.mark.anyio


def roots_config(pids: Path, **interceptors: Any) -> dict[str, Any]:
    upstream = {"command": sys.executable, "args": [ROOTS_UPSTREAM, "--pids", str(pids)], "prefix": ""}
    config: dict[str, Any] = {"upstreams": {"files": upstream}}
    if interceptors:
        config["interceptors"] = interceptors
    return config


class Roots:
    def __init__(self, *uris: str) -> None:
        self.uris = list(uris)

    async def __call__(self, context: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=uri) for uri in self.uris])  # type: ignore[arg-type]


async def roots_seen(client: Any, unlike: Any = "pending") -> Any:
    """What the upstream's last `roots/list` returned, once that differs from `unlike`."""
    while True:
        seen = json.loads(text_of(await client.call_tool("roots", {})))
        if seen != unlike:
            return seen
        await anyio.sleep(0.02)  # the answer travels client -> gateway -> upstream after the call


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")  # roots, as of 2026-07-28
async def test_roots_asked_at_upstream_start_reach_the_stdio_client_through_its_guard(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    config = write_config(roots_config(pids, guards=[{"name": "roots-guard", "config": {"allowed": [PROJECT]}}]))
    roots = Roots(PROJECT, OTHER)
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", config, "legacy", list_roots_callback=roots) as client:
            first = await roots_seen(client)
            roots.uris.append(PROJECT + "/sub")
            await client.send_roots_list_changed()
            second = await roots_seen(client, unlike=first)
            alive = [pid for pid in pids.read_text().split() if pid_alive(int(pid))]
    assert [root["uri"] for root in first] == [PROJECT]  # the guard filtered the other root out
    assert [root["uri"] for root in second] == [PROJECT, PROJECT + "/sub"]
    assert len(alive) == 1  # the client's session adopted the upstream the gateway started


async def test_a_client_without_roots_is_not_asked_for_them(write_config: ConfigWriter, tmp_path: Path) -> None:
    config = write_config(roots_config(tmp_path / "pids"))
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", config, "legacy") as client:
            capabilities = json.loads(text_of(await client.call_tool("capabilities", {})))
            seen = json.loads(text_of(await client.call_tool("roots", {})))
    assert "roots" not in capabilities  # the upstream met the client, not the gateway's defaults
    assert seen == "pending"


@pytest.mark.parametrize("era", ["auto", "legacy"])
async def test_a_handshake_era_stdio_upstream_starts_once(write_config: ConfigWriter, tmp_path: Path, era: str) -> None:
    """`auto` probes with `server/discover` and, refused, makes its `initialize` on the same connection."""
    pids = tmp_path / "pids"
    config = roots_config(pids)
    config["upstreams"]["files"]["era"] = era
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", write_config(config), "legacy", list_roots_callback=Roots(PROJECT)) as client:
            seen = await roots_seen(client)
    assert [root["uri"] for root in seen] == [PROJECT]
    assert len(pids.read_text().split()) == 1


async def test_upstreams_of_a_stdio_gateway_see_the_client_s_own_capabilities(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    """Not every client feature the gateway could relay: a server choosing its tools by client capability
    offers what it would offer this client directly."""
    config = write_config(roots_config(tmp_path / "pids"))
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", config, "legacy", list_roots_callback=Roots(PROJECT)) as client:
            seen = json.loads(text_of(await client.call_tool("capabilities", {})))
    assert "roots" in seen
    assert "sampling" not in seen and "elicitation" not in seen


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_an_http_gateway_answers_roots_asked_at_start_with_none_and_says_so_once_at_info(
    write_config: ConfigWriter, tmp_path: Path, mode: str
) -> None:
    """An HTTP gateway's shared connection has no client to ask: the upstream gets an empty list, not an error
    it would log as a failure at every start, and the gateway logs one INFO line, no warning."""
    config = write_config(roots_config(tmp_path / "pids"))
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}", "--log-level", "INFO")
    with anyio.fail_after(60):
        async with running(argv, port=port, env=gateway_env(), label="HTTP gateway") as child:
            async with Client(f"http://127.0.0.1:{port}/mcp", mode=mode) as client:
                await client.list_tools()
            await until(lambda: "roots-upstream:" in child.stderr_path.read_text(encoding="utf-8"))
            logged = child.stderr_path.read_text(encoding="utf-8")
    asked = [line for line in logged.splitlines() if "roots/list" in line]
    assert asked == [
        "INFO mcp_interceptors.gateway.input_rounds: upstream 'files' asked for roots/list with no client to ask "
        "(outside any call): no roots"
    ], logged
    assert "roots-upstream: 0 roots" in logged.splitlines()  # the shared connection's answer
    assert "WARNING" not in logged and "Failed" not in logged and "no downstream session" not in logged
