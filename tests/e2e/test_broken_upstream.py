"""An upstream that breaks JSON-RPC gets its calls a precise error; the gateway and the session go on."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from e2e_support import ERAS, ConfigWriter, fresh_gateway, text_of, upstream_entry
from mcp import MCPError

BROKEN_UPSTREAM = str(Path(__file__).resolve().parent / "broken_upstream.py")

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("mode", ERAS)
async def test_malformed_upstream_answers_become_internal_errors_and_the_session_survives(
    write_config: ConfigWriter, mode: str
) -> None:
    upstream = {"command": sys.executable, "args": [BROKEN_UPSTREAM]}
    config = write_config({"upstreams": {"broken": upstream}, "interceptors": {"guards": [{"name": "secrets"}]}})
    expected = {
        "string_result": "malformed answer to 'tools/call': a result of type str, not an object",
        "null_result": "malformed answer to 'tools/call': a result of type NoneType, not an object",
        "list_result": "malformed answer to 'tools/call': a result of type list, not an object",
        "bad_error": "malformed error answer to 'tools/call'",
    }
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", config, mode) as client:
            listed = {tool.name for tool in (await client.list_tools()).tools}
            messages = {}
            for name in expected:
                with pytest.raises(MCPError) as caught:
                    await client.call_tool(name, {})
                assert caught.value.code == -32603
                messages[name] = caught.value.message
            fine = await client.call_tool("fine", {})
    assert listed == {*expected, "fine"}
    assert messages == expected
    assert text_of(fine) == "fine"


async def test_an_upstream_line_over_its_limit_fails_the_call_naming_it_and_the_upstream_restarts(
    write_config: ConfigWriter,
) -> None:
    """An upstream line that never ended once grew the gateway's memory without bound."""
    upstream = {**upstream_entry(), "max_message_bytes": 65536}
    config = write_config({"upstreams": {"e2e": upstream}})
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", config, "legacy") as client:
            with pytest.raises(MCPError) as caught:
                await client.call_tool("echo", {"text": "x" * 100_000})
            again = await client.call_tool("echo", {"text": "fits"})
    reason = "a message longer than the limit of 65536 bytes"
    assert caught.value.code == -32000
    assert caught.value.message == f"the gateway closed its connection to upstream 'e2e': it sent {reason}"
    assert caught.value.data == {"upstream": "e2e", "reason": reason}
    assert text_of(again) == "fits"
