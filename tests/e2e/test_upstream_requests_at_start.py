"""Requests an upstream sends right after its handshake, before the stdio client has connected.

The gateway makes its upstream handshakes at start; servers such as the filesystem reference server
ask for `roots/list` as soon as theirs completes. A stdio gateway holds those requests for the client
that spawned it, governs them like any other, and the upstream sees the client's own roots.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from e2e_support import ConfigWriter, fresh_gateway, text_of
from helpers import pid_alive

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


async def test_roots_asked_at_start_get_the_client_s_own_error_when_it_has_no_roots(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    config = write_config(roots_config(tmp_path / "pids"))
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", config, "legacy") as client:
            seen = await roots_seen(client)
    assert isinstance(seen, dict) and "code" in seen  # the client's refusal, relayed as a JSON-RPC error


@pytest.mark.parametrize("era", ["auto", "legacy"])
async def test_a_handshake_era_stdio_upstream_starts_once(write_config: ConfigWriter, tmp_path: Path, era: str) -> None:
    """`auto` probes with `server/discover` and, refused, makes its `initialize` on the same connection."""
    pids = tmp_path / "pids"
    config = roots_config(pids)
    config["upstreams"]["files"]["era"] = era
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", write_config(config), "legacy") as client:
            seen = await roots_seen(client)
    assert isinstance(seen, dict) and "code" in seen  # no roots callback: the client's own refusal
    assert len(pids.read_text().split()) == 1


async def test_upstreams_started_with_a_stdio_gateway_see_every_client_feature_it_relays(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    """So a server that chooses its tools by client capability offers all of them through the gateway."""
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", write_config(roots_config(tmp_path / "pids")), "legacy") as client:
            seen = json.loads(text_of(await client.call_tool("capabilities", {})))
    assert seen["roots"] == {"listChanged": True}
    assert seen["sampling"] == {"context": {}, "tools": {}}
    assert seen["elicitation"] == {"form": {}, "url": {}}
