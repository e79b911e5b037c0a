"""A client's `interceptor/invoke` and `executeChain` never change the state the gateway's own chains use.

`schema-guard` learns each tool's `inputSchema` from the session's `tools/list` results. A client once invoked
it on a fake `tools/list` response, in its own session, and so replaced what it had learned: a call the guard
blocked was then forwarded. By default (`client_interceptor_methods: scoped`) a client's invocations run on
a guard instance of their own; `off` serves none of the methods.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from e2e_support import ConfigWriter, fresh_gateway, raw_request, upstream_entry
from mcp import MCPError

from mcp_interceptors import EXTENSION_ID

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

FAKE_LISTING = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
FORGE = {"name": "schema-guard", "event": "tools/list", "phase": "response", "payload": FAKE_LISTING}
BAD_CALL = {"name": "echo", "arguments": {"text": 5}}


def guarded(**extra: Any) -> dict[str, Any]:
    return {
        "upstreams": {"e2e": upstream_entry()},
        "interceptors": {"guards": [{"name": "schema-guard"}]},
        "expose_execute_chain": True,
        **extra,
    }


async def blocked_by_schema_guard(client: Any) -> dict[str, Any]:
    with pytest.raises(MCPError) as caught:
        await raw_request(client, "tools/call", BAD_CALL)
    assert caught.value.data["interceptor"] == "schema-guard", caught.value
    return dict(caught.value.data)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_r17_a_clients_invoke_of_schema_guard_runs_on_an_instance_of_its_own(
    write_config: ConfigWriter, transport: str
) -> None:
    config = write_config(guarded())
    with anyio.fail_after(90):
        async with fresh_gateway(transport, config, "legacy") as client:
            await client.list_tools()  # the gateway's schema-guard learns echo's schema for this session
            await blocked_by_schema_guard(client)
            forged = await raw_request(client, "interceptor/invoke", FORGE)
            assert forged["valid"] is True  # served (R17), on the clients' own instance
            chain = {"event": "tools/list", "phase": "response", "payload": FAKE_LISTING}
            assert (await raw_request(client, "interceptor/executeChain", chain))["status"] == "success"
            await blocked_by_schema_guard(client)  # what the gateway's guard learned stands


async def test_a_shared_gateway_lets_a_trusted_client_teach_its_guards(write_config: ConfigWriter) -> None:
    """`shared` is the old behaviour, for trusted clients only: the forged listing replaces what it learned."""
    config = write_config(guarded(client_interceptor_methods="shared"))
    with anyio.fail_after(90):
        async with fresh_gateway("stdio", config, "legacy") as client:
            await client.list_tools()
            await blocked_by_schema_guard(client)
            await raw_request(client, "interceptor/invoke", FORGE)
            forwarded = await raw_request(client, "tools/call", BAD_CALL)  # now forwarded: the upstream refuses it
            assert forwarded["isError"] is True


async def test_r6_with_client_methods_off_the_gateway_answers_32601_and_advertises_no_extension(
    write_config: ConfigWriter,
) -> None:
    config = write_config(guarded(client_interceptor_methods="off"))
    with anyio.fail_after(90):
        async with fresh_gateway("stdio", config, "legacy") as client:
            experimental = client.server_capabilities.experimental or {}
            assert EXTENSION_ID not in experimental
            for method, params in [
                ("interceptors/list", {}),
                ("interceptor/invoke", FORGE),
                ("interceptor/executeChain", {"event": "tools/list", "phase": "response", "payload": FAKE_LISTING}),
            ]:
                with pytest.raises(MCPError) as caught:
                    await raw_request(client, method, params)
                assert caught.value.code == -32601, method
            await client.list_tools()
            await blocked_by_schema_guard(client)  # the gateway still enforces its chain


async def test_an_in_process_hosts_interceptor_refuses_a_clients_invoke_when_scoped(write_config: ConfigWriter) -> None:
    """Its state cannot be copied: it is withheld from clients, naming the setting that would allow it."""
    config = write_config(
        {"upstreams": {"e2e": upstream_entry()}, "interceptors": {"hosts": [{"module": "e2e_hosts:host"}]}}
    )
    with anyio.fail_after(90):
        async with fresh_gateway("stdio", config, "legacy") as client:
            listed = await raw_request(client, "interceptors/list", {})
            name = listed["interceptors"][0]["name"]
            hooks = listed["interceptors"][0]["hooks"][0]
            invoke = {"name": name, "event": hooks["events"][0], "phase": hooks["phase"], "payload": {}}
            with pytest.raises(MCPError) as caught:
                await raw_request(client, "interceptor/invoke", invoke)
    assert caught.value.code == -32603
    assert caught.value.data["interceptor"] == name
    assert "client_interceptor_methods" in caught.value.data["reason"]
