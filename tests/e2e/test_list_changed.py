"""`list_changed` from an upstream reaches clients through the gateway, and the new tool is callable.

Handshake-era clients get the notification on their session; 2026-07-28 clients on their
`subscriptions/listen` stream (the gateway listens to the upstream and republishes).
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from e2e_support import ConfigWriter, gateway_env, text_of, unique
from helpers import cli_argv, stderr_log, stdio_transport
from mcp import Client, MCPError

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]
GROWING = str(Path(__file__).resolve().parent / "growing_upstream.py")


def _config(write_config: ConfigWriter) -> Path:
    return write_config({"upstreams": {"growing": {"command": sys.executable, "args": [GROWING]}}})


async def test_tools_list_changed_reaches_a_handshake_era_client(write_config: ConfigWriter) -> None:
    changed = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    argv = cli_argv("gateway", "--config", str(_config(write_config)))
    name = unique("fresh").replace("-", "_")
    with anyio.fail_after(30), stderr_log("gateway") as log:
        transport = stdio_transport(argv, log, env=gateway_env())
        async with Client(transport, mode="legacy", message_handler=on_message) as client:
            assert name not in {tool.name for tool in (await client.list_tools()).tools}
            assert text_of(await client.call_tool("grow", {"name": name, "reply": "hello"})) == f"grew {name}"
            await changed.wait()
            assert name in {tool.name for tool in (await client.list_tools()).tools}
            assert text_of(await client.call_tool(name, {})) == "hello"


async def test_tools_list_changed_reaches_a_2026_client_on_its_listen_stream(write_config: ConfigWriter) -> None:
    argv = cli_argv("gateway", "--config", str(_config(write_config)))
    name = unique("fresh").replace("-", "_")
    with anyio.fail_after(30), stderr_log("gateway") as log:
        transport = stdio_transport(argv, log, env=gateway_env())
        async with Client(transport, mode="2026-07-28") as client:
            assert name not in {tool.name for tool in (await client.list_tools()).tools}
            async with client.listen(tools_list_changed=True) as subscription:
                await client.call_tool("grow", {"name": name, "reply": "hi"})
                async for _event in subscription:
                    break
            tools = await client.list_tools(cache_mode="refresh")
            assert name in {tool.name for tool in tools.tools}
            assert text_of(await client.call_tool(name, {})) == "hi"


async def test_a_list_changed_storm_does_not_make_listed_tools_uncallable(write_config: ConfigWriter) -> None:
    """Calls to a tool the client was shown, made while the upstream announces `list_changed` over and
    over, all go through. A notification landing between the gateway's check of what the session was
    shown and its catalog refresh dropped that record, and the call got `-32602 Unknown tool`."""
    growing = {"command": sys.executable, "args": [GROWING]}
    # Guards and records widen the window between the check and the catalog refresh.
    guards = {"guards": [{"name": "secrets"}, {"name": "pii"}]}
    audit = {"enabled": True, "store": "audit.db", "key_file": "audit-key"}
    upstreams = {"calm": growing, "stormy": {**growing, "era": "legacy"}}
    config = write_config({"upstreams": upstreams, "interceptors": guards, "audit": audit})
    argv = cli_argv("gateway", "--config", str(config))
    outcomes: list[str] = []
    rounds = 5
    with anyio.fail_after(60), stderr_log("gateway") as log:
        transport = stdio_transport(argv, log, env=gateway_env())
        async with Client(transport, mode="legacy") as client:
            assert "calm__echo" in {tool.name for tool in (await client.list_tools()).tools}

            async def echo(n: int) -> None:
                try:
                    outcomes.append(text_of(await client.call_tool("calm__echo", {"text": f"call {n}"})))
                except MCPError as exc:
                    outcomes.append(f"error {exc.code}: {exc.message}")

            for _ in range(rounds):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(client.call_tool, "stormy__storm", {"count": 300})
                    tg.start_soon(client.list_tools)
                    for n in range(30):
                        tg.start_soon(echo, n)
    assert [outcome for outcome in outcomes if outcome.startswith("error")] == []
    assert sorted(outcomes) == sorted(f"call {n}" for n in range(30) for _ in range(rounds))
