"""How a stdio gateway connects its upstreams: for its one client, as that client.

The gateway connects its upstreams when the client's first message (its `initialize`, or a 2026-07-28
request's envelope) says who the client is, so each server meets the client's own identity and
capabilities, in whichever era the server prefers. The client's session adopts those connections, so
each configured server runs once; a handshake-era client reaches a 2026-07-28 connection through the
bridge, with its log level in each request's envelope.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import mcp_types as types
import pytest
from e2e_support import UPSTREAM, ConfigWriter, fresh_gateway, gateway_env, raw_request, text_of, unique, upstream_entry
from helpers import cli_argv, stderr_log, stdio_transport
from mcp.client.client import Client
from mcp.shared.exceptions import MCPError

pytestmark = pytest.mark.anyio

LOGGING_UPSTREAM = str(Path(__file__).resolve().parent / "logging_upstream.py")
HANDSHAKE_UPSTREAM = str(Path(__file__).resolve().parent / "handshake_upstream.py")
MODERN_UPSTREAM = str(Path(__file__).resolve().parent / "modern_upstream.py")

CLIENT = types.Implementation(name="e2e-probe-client", version="7.1")


def processes_marked(mark: str) -> list[int]:
    """Ids of live processes whose environment carries `E2E_MARK=mark`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if f"E2E_MARK={mark}".encode() in environ.split(b"\0"):
            found.append(int(proc.name))
    return found


def marked_config(mark: str) -> dict[str, object]:
    return {"upstreams": {"e2e": upstream_entry(env={"E2E_MARK": mark})}}


async def seen_by_upstream(client: Client) -> dict[str, object]:
    seen: dict[str, object] = json.loads(text_of(await client.call_tool("whoami", {})))
    return seen


async def test_legacy_stdio_client_runs_each_dual_era_upstream_once(write_config: ConfigWriter) -> None:
    mark = unique("shared")
    config = write_config(marked_config(mark))
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", config, "legacy") as client:
            first = text_of(await client.call_tool("pid", {}))
            again = text_of(await client.call_tool("pid", {}))
            assert processes_marked(mark) == [int(first)]
    assert again == first


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
@pytest.mark.parametrize(
    "upstream", [UPSTREAM, HANDSHAKE_UPSTREAM, MODERN_UPSTREAM], ids=["dual-era", "handshake-only", "2026-only"]
)
async def test_stdio_client_is_presented_to_the_upstream_as_itself(
    write_config: ConfigWriter, upstream: str, mode: str
) -> None:
    config = write_config({"upstreams": {"e2e": {"command": sys.executable, "args": [upstream]}}})
    with anyio.fail_after(60), stderr_log("direct upstream") as log:
        async with Client(stdio_transport([sys.executable, UPSTREAM], log), mode=mode, client_info=CLIENT) as direct:
            expected = await seen_by_upstream(direct)
        async with fresh_gateway("stdio", config, mode, client_info=CLIENT) as client:
            seen = await seen_by_upstream(client)
    assert seen["client"] == expected["client"] == CLIENT.name
    # Not the gateway's defaults (roots, sampling, elicitation): the client declared none of them.
    assert seen["capabilities"] == expected["capabilities"]
    if upstream == UPSTREAM:  # a server that speaks both eras meets the client in the client's own
        assert seen["protocol"] == expected["protocol"]


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")  # logging, as of 2026-07-28
@pytest.mark.parametrize(
    ("flags", "unset"),
    [([], "unset"), (["--2026-only"], "debug")],
    ids=["handshake-era-connection", "2026-07-28-connection"],
)
async def test_legacy_set_level_reaches_the_upstream_in_its_era(
    write_config: ConfigWriter, flags: list[str], unset: str
) -> None:
    """Natively on a handshake-era connection; in each request's envelope on a 2026-07-28 one, where
    the client's logs go unfiltered until it sets a level (as a handshake-era server may log freely)."""
    upstream = {"command": sys.executable, "args": [LOGGING_UPSTREAM, *flags]}
    config = write_config({"upstreams": {"logs": upstream}})
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", config, "legacy") as client:
            before = text_of(await client.call_tool("level", {}))
            await client.set_logging_level("error")
            after = text_of(await client.call_tool("level", {}))
            with pytest.raises(MCPError) as refused:
                await raw_request(client, "logging/setLevel", {"level": "loud"})
            unchanged = text_of(await client.call_tool("level", {}))
    assert (before, after, unchanged) == (unset, "error", "error")
    assert refused.value.error.code == -32602


async def test_upstream_that_cannot_start_fails_the_first_request_with_the_reason_and_exits_1(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    # The command exists (a missing one is refused before start: test_fail_fast.py) but the server dies at once.
    dies = {"command": sys.executable, "args": ["-c", "raise SystemExit(3)"]}
    config = write_config({"upstreams": {"broken": dies}})
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": CLIENT.model_dump()},
    }
    with anyio.fail_after(60):
        done = await anyio.run_process(
            cli_argv("gateway", "--config", str(config)),
            input=json.dumps(initialize).encode() + b"\n",
            env=gateway_env(),
            check=False,
        )
    answer = json.loads(done.stdout.decode().splitlines()[0])
    assert answer["id"] == 1
    assert answer["error"]["code"] == -32603
    assert "broken" in answer["error"]["message"]
    assert done.returncode == 1
    assert done.stderr.decode().strip().splitlines()[-1].startswith("mcp-interceptors gateway: error: ")


async def test_upstreams_are_connected_at_once(write_config: ConfigWriter, tmp_path: Path) -> None:
    """Each of these two upstreams serves only once the other has started: one at a time, neither would."""
    upstreams = {
        name: upstream_entry(env={"E2E_RENDEZVOUS": f"{tmp_path}:{name}:{other}", "E2E_SCHEME": name})
        for name, other in (("left", "right"), ("right", "left"))
    }
    config = write_config({"upstreams": upstreams})
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", config, "legacy") as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
    assert {"left__pid", "right__pid"} <= tools
