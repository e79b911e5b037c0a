"""What a handshake-era client is advertised when the gateway's connection to an upstream is 2026-07-28.

There `resources.subscribe` promises `resourceSubscriptions` on `subscriptions/listen`; the handshake
era's `resources/subscribe` cannot be forwarded on such a connection, so it is not advertised.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from e2e_support import ConfigWriter, fresh_gateway, raw_request
from mcp import MCPError

MODERN_UPSTREAM = str(Path(__file__).resolve().parent / "modern_upstream.py")

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_subscribe_is_not_advertised_through_a_2026_07_28_connection(
    write_config: ConfigWriter, transport: str
) -> None:
    config = write_config({"upstreams": {"modern": {"command": sys.executable, "args": [MODERN_UPSTREAM]}}})
    with anyio.fail_after(60):
        async with fresh_gateway(transport, config, "legacy") as client:
            resources = client.server_capabilities.resources
            with pytest.raises(MCPError) as refused:
                await raw_request(client, "resources/subscribe", {"uri": "e2e://welcome"})  # as now advertised
    assert resources is not None  # resources themselves are still served
    assert not resources.subscribe
    assert refused.value.code == -32601
