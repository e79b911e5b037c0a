"""A 2026-07-28 client's resource subscriptions, through the gateway, on a handshake-era upstream.

That era has no `resources/subscribe`: a client asks for updates with `resourceSubscriptions` on its
`subscriptions/listen` stream. The gateway makes that the upstream's `resources/subscribe` (governed as
one), relays the updates on the stream, and unsubscribes when the last stream that wanted them ends.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from e2e_hosts import FORBIDDEN_SUBSCRIPTION
from e2e_support import ConfigWriter, fresh_gateway, raw_request, text_of
from mcp import MCPError
from mcp.server.subscriptions import ResourceUpdated

SUBSCRIBING_UPSTREAM = str(Path(__file__).resolve().parent / "handshake_subscriptions_upstream.py")

pytestmark = pytest.mark.anyio


def subscribing_config() -> dict[str, Any]:
    return {
        "upstreams": {"docs": {"command": sys.executable, "args": [SUBSCRIBING_UPSTREAM]}},
        "interceptors": {"hosts": [{"module": "e2e_hosts:subscribe_guard"}]},
    }


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_resource_subscriptions_on_listen_reach_a_handshake_era_upstream(
    write_config: ConfigWriter, transport: str
) -> None:
    config = write_config(subscribing_config())
    with anyio.fail_after(60):
        async with fresh_gateway(transport, config, "2026-07-28") as client:
            async with client.listen(resource_subscriptions=["sub://doc"]) as stream:
                async with client.listen(resource_subscriptions=["sub://doc"]):
                    pass  # a second stream on the same resource ends: the first keeps the subscription
                touched = await client.call_tool("touch", {"uri": "sub://doc"})
                event = await stream.__anext__()
            left = await client.call_tool("subscriptions", {"wait": 20})
    assert text_of(touched) == "subscribed"
    assert event == ResourceUpdated(uri="sub://doc")
    assert json.loads(text_of(left)) == []  # unsubscribed with the last stream


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_resource_subscription_is_governed_as_resources_subscribe(
    write_config: ConfigWriter, transport: str
) -> None:
    config = write_config(subscribing_config())
    with anyio.fail_after(60):
        async with fresh_gateway(transport, config, "2026-07-28") as client:
            with pytest.raises(MCPError) as blocked:
                async with client.listen(resource_subscriptions=[FORBIDDEN_SUBSCRIPTION]):
                    pass
            with pytest.raises(MCPError) as unknown:
                async with client.listen(resource_subscriptions=["sub://never-listed"]):
                    pass
            left = await client.call_tool("subscriptions", {})
    assert blocked.value.data["interceptor"] == "deny-subscription"
    assert blocked.value.data["event"] == "resources/subscribe"
    assert unknown.value.code == -32602
    assert unknown.value.data == {"uri": "sub://never-listed"}  # what a server's resource-not-found carries
    assert json.loads(text_of(left)) == []


async def test_a_malformed_listen_is_refused_naming_the_field(write_config: ConfigWriter) -> None:
    config = write_config(subscribing_config())
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", config, "2026-07-28") as client:
            with pytest.raises(MCPError) as refused:
                await raw_request(client, "subscriptions/listen", {"notifications": {"resourceSubscriptions": [5]}})
    assert refused.value.code == -32602
    assert refused.value.data == {"field": "notifications.resourceSubscriptions.0"}


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")  # resources/subscribe
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_restarted_handshake_era_upstream_is_subscribed_again(
    write_config: ConfigWriter, transport: str
) -> None:
    """An upstream that crashes forgets its subscriptions; the gateway restarts it and subscribes it again to
    what its clients still want, so their updates keep coming."""
    config = write_config(subscribing_config())
    updates: list[str] = []
    updated = anyio.Event()

    async def on_message(message: Any) -> None:
        uri = getattr(getattr(message, "params", None), "uri", None)
        if uri is not None:
            updates.append(str(uri))
            updated.set()

    with anyio.fail_after(60):
        async with fresh_gateway(transport, config, "legacy", message_handler=on_message) as client:
            await client.subscribe_resource("sub://doc")
            with pytest.raises(MCPError):
                await client.call_tool("crash", {})
            after_restart = await client.call_tool("subscriptions", {})
            touched = await client.call_tool("touch", {"uri": "sub://doc"})
            await updated.wait()
    assert json.loads(text_of(after_restart)) == ["sub://doc"]
    assert text_of(touched) == "subscribed"
    assert updates == ["sub://doc"]
