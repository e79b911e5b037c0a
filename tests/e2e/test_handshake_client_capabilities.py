"""What clients are advertised for an upstream the gateway reaches through a 2026-07-28 connection.

There `resources.subscribe` promises `resourceSubscriptions` on `subscriptions/listen`, which the gateway
does not relay (README, Known limits); the handshake era's `resources/subscribe` cannot be forwarded on
such a connection either, so neither era is advertised `subscribe`. (An HTTP gateway learns that an
upstream refuses handshake-era sessions when its first such client uses it.)
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from e2e_support import ConfigWriter, fresh_gateway, gateway_env, raw_request
from helpers import cli_argv, free_tcp_port, running
from mcp import Client, MCPError

HERE = Path(__file__).resolve().parent
MODERN_UPSTREAM = str(HERE / "modern_upstream.py")

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


def modern_config(write_config: ConfigWriter) -> Path:
    return write_config({"upstreams": {"modern": {"command": sys.executable, "args": [MODERN_UPSTREAM]}}})


async def test_subscribe_is_not_advertised_through_a_2026_07_28_connection(write_config: ConfigWriter) -> None:
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", modern_config(write_config), "legacy") as client:
            resources = client.server_capabilities.resources
            with pytest.raises(MCPError) as refused:
                await raw_request(client, "resources/subscribe", {"uri": "e2e://welcome"})  # as now advertised
    assert resources is not None  # resources themselves are still served
    assert not resources.subscribe
    assert refused.value.code == -32601


async def test_an_http_gateway_stops_advertising_subscribe_once_the_upstream_refused_a_session(
    write_config: ConfigWriter,
) -> None:
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(modern_config(write_config)), "--http", f"127.0.0.1:{port}")
    with anyio.fail_after(60):
        async with running(argv, port=port, env=gateway_env(), label="HTTP gateway"):
            async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy") as first:
                await first.list_resources()  # its upstream sessions open: the upstream refuses one
            async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy") as later:
                resources = later.server_capabilities.resources
    assert resources is not None
    assert not resources.subscribe


@pytest.mark.parametrize(("upstream", "serves_it"), [("e2e_upstream.py", False), ("subscribing_upstream.py", True)])
async def test_an_http_gateway_promises_handshake_clients_subscribe_once_their_own_upstream_session_did(
    write_config: ConfigWriter, upstream: str, serves_it: bool
) -> None:
    """A dual-era upstream reached through a 2026-07-28 connection advertises `resources.subscribe` there for
    subscriptions/listen; that was promised to every handshake-era client of an HTTP gateway, whose
    resources/subscribe, forwarded on its own handshake-era session, got `-32601` from every mcp `MCPServer`.
    Their sessions' own `initialize` results tell: it is promised once one of them showed it."""
    config = write_config({"upstreams": {"up": {"command": sys.executable, "args": [str(HERE / upstream)]}}})
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}")
    with anyio.fail_after(60):
        async with running(argv, port=port, env=gateway_env(), label="HTTP gateway"):
            async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy") as first:
                first_resources = first.server_capabilities.resources
                await first.list_resources()  # its upstream sessions open
            async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy") as later:
                later_resources = later.server_capabilities.resources
                try:
                    answer: Any = await raw_request(later, "resources/subscribe", {"uri": "e2e://welcome"})
                except MCPError as refused:
                    answer = refused.code
    assert first_resources is not None and not first_resources.subscribe  # not known yet: not promised
    assert later_resources is not None
    assert bool(later_resources.subscribe) is serves_it
    assert answer == ({} if serves_it else -32601)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_subscribe_is_not_advertised_to_2026_07_28_clients_of_a_2026_07_28_upstream(
    write_config: ConfigWriter, transport: str
) -> None:
    with anyio.fail_after(60):
        async with fresh_gateway(transport, modern_config(write_config), "2026-07-28") as client:
            discovered = await raw_request(client, "server/discover", {})
    resources = discovered["capabilities"]["resources"]
    assert resources == {"listChanged": True}  # resources are still served; `subscribe` is not promised
