"""Each call record names its target (the tool, resource uri or prompt), through the real CLI gateway, with
either writer; `audit tail` prints it, and the trail still verifies.

A 2026-07-28 retry carries the gateway's sealed `requestState`: its records name the tool as the first leg's do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from e2e_support import ConfigWriter, Sampler, fresh_gateway, gateway_env, raw_request, upstream_entry
from helpers import run_cli
from mcp import MCPError

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


def audited(tmp_path: Path, writer: str) -> dict[str, Any]:
    return {
        "upstreams": {"e2e": upstream_entry()},
        "interceptors": {"hosts": [{"module": "e2e_hosts:host"}]},  # denies `delete_everything`
        "audit": {
            "enabled": True,
            "store": str(tmp_path / "audit.db"),
            "key_file": str(tmp_path / "audit-key"),
            "writer": writer,
        },
    }


async def exported(config: Path) -> list[dict[str, Any]]:
    done = await run_cli("audit", "export", "--config", str(config), env=gateway_env())
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    lines = [orjson.loads(line) for line in done.stdout.splitlines()]
    return [line["body"] for line in lines if line["kind"] == "decision"]


@pytest.mark.parametrize("writer", ["in-process", "process"])
async def test_call_records_name_their_tool_uri_or_prompt(
    write_config: ConfigWriter, tmp_path: Path, writer: str
) -> None:
    config = write_config(audited(tmp_path, writer))
    with anyio.fail_after(90):
        async with fresh_gateway("stdio", config, "legacy") as client:
            await client.call_tool("echo", {"text": "hi"})
            await client.read_resource("e2e://groceries")
            await client.get_prompt("summarise", {"name": "groceries"})
            await client.list_tools()
            with pytest.raises(MCPError):
                await client.call_tool("delete_everything", {})  # denied by a guard
            with pytest.raises(MCPError):
                await client.call_tool("no_such_tool", {})  # refused by the gateway: not a tool it knows
            with pytest.raises(MCPError):
                await raw_request(client, "tools/call", {"name": 7})  # no name to record
    bodies = await exported(config)
    by_event: dict[str, set[Any]] = {}
    for body in bodies:
        assert "target" in body, body
        by_event.setdefault(body["event"], set()).add(body["target"])
    assert by_event["tools/call"] == {"echo", "delete_everything", "no_such_tool", None}
    assert by_event["resources/read"] == {"e2e://groceries"}
    assert by_event["prompts/get"] == {"summarise"}
    assert by_event["tools/list"] == {None}
    refused = [b for b in bodies if b["target"] == "no_such_tool"]
    assert [(b["phase"], b["decision"], b["status"]) for b in refused] == [("request", "deny", "refused")]
    denied = [b for b in bodies if b["target"] == "delete_everything"]
    assert [(b["decision"], b["status"]) for b in denied] == [("deny", "validation_failed")]

    tail = await run_cli("audit", "tail", "--config", str(config), "-n", "50", env=gateway_env())
    assert tail.returncode == 0, tail.stderr.decode()
    lines = tail.stdout.decode().splitlines()
    assert any("tools/call request" in line and " target=echo " in line for line in lines), lines
    assert any("resources/read" in line and " target=e2e://groceries " in line for line in lines), lines
    assert not any("tools/list" in line and "target=" in line for line in lines), lines
    verified = await run_cli("audit", "verify", "--config", str(config), env=gateway_env())
    assert verified.returncode == 0, verified.stdout.decode() + verified.stderr.decode()
    assert verified.stdout.decode().startswith("OK: "), verified.stdout.decode()


async def test_a_2026_retry_with_the_gateways_request_state_names_the_same_tool(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    config = write_config(audited(tmp_path, "in-process"))
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", config, "2026-07-28", sampling_callback=Sampler()) as client:
            result = await client.call_tool("ask", {"question": "what is six times seven?"})
    assert not result.is_error
    bodies = await exported(config)
    calls = [b for b in bodies if b["event"] == "tools/call"]
    # The first leg ends `input_required`; the retry is a call of its own, opened with the sealed token.
    assert len({b["call_id"] for b in calls}) == 2, calls
    assert {b["target"] for b in calls} == {"ask"}
    assert {b["target"] for b in bodies if b["event"] == "sampling/createMessage"} == {None}
