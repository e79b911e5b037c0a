"""Cache hints of a listing the chain changed: a listing shaped for one caller is not shared."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from e2e_support import ConfigWriter, gateway_env, raw_request
from helpers import cli_argv, stderr_log, stdio_transport
from mcp import Client

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]
HINTED = str(Path(__file__).resolve().parent / "public_hints_upstream.py")


@pytest.mark.parametrize("deny", [["wipe"], []], ids=["filtered", "untouched"])
async def test_a_public_listing_the_chain_changed_is_marked_private(
    write_config: ConfigWriter, deny: list[str]
) -> None:
    config = write_config(
        {
            "upstreams": {"hinted": {"command": sys.executable, "args": [HINTED]}},
            "interceptors": {"guards": [{"name": "tool-policy", "config": {"deny": deny}}]},
        }
    )
    with anyio.fail_after(30), stderr_log("gateway") as log:
        transport = stdio_transport(cli_argv("gateway", "--config", str(config)), log, env=gateway_env())
        async with Client(transport, mode="2026-07-28") as client:
            listing = await raw_request(client, "tools/list", {})
    assert sorted(tool["name"] for tool in listing["tools"]) == sorted({"hello", "wipe"} - set(deny))
    assert listing["ttlMs"] == 60_000
    assert listing["cacheScope"] == ("private" if deny else "public")
