"""Desktop clients' configs through the real CLI: `gateway --check/--config` read an `mcpServers` (or VS Code
`servers`) file as upstreams, and `wrap-client-config` rewrites one so each server starts behind the gateway,
which a client then launches as it would: by the absolute command in the file, without our PATH."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from e2e_support import UPSTREAM, text_of
from helpers import free_tcp_port, run_cli, stderr_log, sync_running
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

SECRET = "key AKIAZ7QH4XK2M9PL3TWB"
REDACTED = "key [REDACTED:aws_access_key]"
#: An upstream that only starts when the gateway passes on the entry's `env`, as the client would have.
ENV_CHECKING = (
    "import os, runpy, sys\n"
    "if os.environ.get('E2E_TOKEN') != 'from-the-client-config': sys.exit('no E2E_TOKEN in the environment')\n"
    f"sys.argv = [{UPSTREAM!r}]\n"
    f"runpy.run_path({UPSTREAM!r}, run_name='__main__')\n"
)
#: What a GUI client started from a desktop has: no virtualenv, no project folder on PATH.
GUI_PATH = "/usr/bin:/bin"


@pytest.fixture(scope="module")
def http_upstream() -> Iterator[str]:
    """The e2e upstream over Streamable HTTP on a free loopback port."""
    port = free_tcp_port()
    with sync_running([sys.executable, UPSTREAM, "--http", str(port)], port=port, label="HTTP upstream"):
        yield f"http://127.0.0.1:{port}/mcp"


def claude_config(http_url: str) -> dict[str, Any]:
    return {
        "globalShortcut": "Ctrl+Space",  # the client's own setting: left alone
        "mcpServers": {
            "notes": {
                "command": sys.executable,
                "args": ["-c", ENV_CHECKING],
                "env": {"E2E_TOKEN": "from-the-client-config"},
            },
            "web api": {"url": http_url, "autoApprove": ["echo"]},
            "off": {"command": "never-started", "disabled": True},
        },
    }


def write_json(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return path


def backups_in(folder: Path) -> list[Path]:
    return sorted(folder.glob("claude_desktop_config.json.bak-*"))


async def call_echo(entry: dict[str, Any], text: str) -> str | MCPError:
    """Start a server entry as a desktop client does (its command, args and env; elsewhere; a bare PATH) and
    call `echo`: its text, or the error it was answered with."""
    env = {"PATH": GUI_PATH, "HOME": os.environ.get("HOME", "/"), **entry.get("env", {})}
    params = StdioServerParameters(command=entry["command"], args=entry["args"], env=env, cwd="/")
    with anyio.fail_after(60), stderr_log("wrapped entry") as log:
        async with Client(stdio_client(params, errlog=log.file)) as client:
            try:
                return text_of(await client.call_tool("echo", {"text": text}))
            except MCPError as exc:
                return exc


async def test_check_reads_a_claude_desktop_config_as_upstreams(tmp_path: Path, http_upstream: str) -> None:
    config = write_json(tmp_path / "claude_desktop_config.json", claude_config(http_upstream))
    done = await run_cli("gateway", "--check", str(config), "--guard", "secrets")
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    assert lines[0] == f"{config}: configuration is valid"
    assert f"  web-api: streamable-http {http_upstream}  (tools/prompts as web-api__<name>)" in lines
    assert any(line.startswith("  notes: stdio ") for line in lines)
    assert not any("off" in line for line in lines if line.startswith("  ") and ": stdio" in line)  # disabled
    assert "    1. secrets [mutation] from secrets: mode=active failOpen=false priority=-50000" in lines


async def test_check_reads_a_vscode_mcp_json_with_types_tabs_and_workspace_variables(tmp_path: Path) -> None:
    folder = tmp_path / ".vscode"
    folder.mkdir()
    text = (
        '{\n\t"servers": {\n'
        '\t\t"fs": {"type": "stdio", "command": "npx", "args": ["-y", "server-filesystem", "${workspaceFolder}"]},\n'
        '\t\t"remote": {"type": "sse", "url": "http://127.0.0.1:9/sse", "headers": {"X-Key": "${env:E2E_KEY}"}}\n'
        '\t},\n\t"inputs": []\n}\n'
    )
    (folder / "mcp.json").write_text(text, encoding="utf-8")
    done = await run_cli("gateway", "--check", str(folder / "mcp.json"), env={**os.environ, "E2E_KEY": "k-123456"})
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    assert f"  fs: stdio npx -y server-filesystem {tmp_path}  (tools/prompts as fs__<name>)" in lines
    assert "  remote: sse http://127.0.0.1:9/sse  (tools/prompts as remote__<name>)" in lines


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        (
            {"x": {"command": "npx", "env": {"K": "${input:api-key}"}}},
            "mcpServers.x.env.K: ${input:api-key} is a value VS Code prompts for; the gateway cannot prompt",
        ),
        ({"x": {"command": "npx", "envFile": ".env"}}, "mcpServers.x.envFile: not a setting the gateway can read"),
        ({"x": {"type": "websocket", "url": "ws://x"}}, "mcpServers.x.type: unknown transport 'websocket'"),
        ({"x": {"url": "http://127.0.0.1:9/mcp", "env": {"A": "1"}}}, "upstreams.x.env: `env` only applies to"),
        ({"x": {"command": "npx", "disabled": True}}, "upstreams: at least one upstream server is needed"),
    ],
    ids=["vscode-input", "env-file", "unknown-transport", "env-on-http", "all-disabled"],
)
async def test_what_the_gateway_cannot_take_from_a_client_config_is_a_config_error(
    tmp_path: Path, servers: dict[str, Any], message: str
) -> None:
    config = write_json(tmp_path / "client.json", {"mcpServers": servers})
    done = await run_cli("gateway", "--check", str(config))
    assert done.returncode == 1
    assert done.stderr.decode().strip().startswith(f"mcp-interceptors gateway: error: {config}: {message}")


async def test_gateway_config_fronts_one_server_of_a_client_config(tmp_path: Path, http_upstream: str) -> None:
    config = write_json(tmp_path / "claude.json", claude_config(http_upstream))
    gateway = [sys.executable, "-m", "mcp_interceptors", "gateway", "--config", str(config), "--upstream", "web api"]
    answer = await call_echo({"command": gateway[0], "args": [*gateway[1:], "--guard", "secrets"]}, SECRET)
    assert answer == REDACTED


async def test_wrap_client_config_routes_every_server_through_the_gateway_and_back(
    tmp_path: Path, http_upstream: str
) -> None:
    original = claude_config(http_upstream)
    path = write_json(tmp_path / "claude_desktop_config.json", original)
    written = path.read_bytes()

    done = await run_cli("wrap-client-config", str(path), "--guard", "secrets")
    assert done.returncode == 0, done.stderr.decode()
    assert [backup.read_bytes() for backup in backups_in(tmp_path)] == [written]
    wrapped = json.loads(path.read_text())
    servers_file = tmp_path / "claude_desktop_config.gateway-upstreams.json"
    assert json.loads(servers_file.read_text()) == {
        "mcpServers": {
            name: {k: v for k, v in entry.items() if k != "disabled"} for name, entry in original["mcpServers"].items()
        }
    }
    assert servers_file.stat().st_mode & 0o777 == 0o600  # `env` and `headers` may hold secrets
    assert wrapped["globalShortcut"] == "Ctrl+Space"
    for name, entry in wrapped["mcpServers"].items():
        assert Path(entry["command"]).is_absolute()
        assert entry["args"][-6:] == ["--config", str(servers_file), "--guard", "secrets", "--upstream", name]
    assert wrapped["mcpServers"]["web api"]["autoApprove"] == ["echo"]  # the client's own keys stay
    assert wrapped["mcpServers"]["off"]["disabled"] is True

    # A client starts each entry as written: the gateway governs what reaches the upstream.
    assert await call_echo(wrapped["mcpServers"]["notes"], SECRET) == REDACTED
    assert await call_echo(wrapped["mcpServers"]["web api"], SECRET) == REDACTED

    again = await run_cli("wrap-client-config", str(path), "--guard", "secrets")
    assert again.returncode == 0, again.stderr.decode()
    assert "nothing to change" in again.stderr.decode()
    assert json.loads(path.read_text()) == wrapped  # not wrapped twice
    assert len(backups_in(tmp_path)) == 1

    undone = await run_cli("wrap-client-config", str(path), "--undo")
    assert undone.returncode == 0, undone.stderr.decode()
    assert json.loads(path.read_text()) == original
    assert not servers_file.exists()


async def test_wrap_again_with_other_guards_changes_the_guards_only(tmp_path: Path, http_upstream: str) -> None:
    path = write_json(tmp_path / "mcp.json", {"servers": {"web": {"type": "http", "url": http_upstream}}})
    first = await run_cli("wrap-client-config", str(path))
    assert first.returncode == 0, first.stderr.decode()
    second = await run_cli("wrap-client-config", str(path), "--guard", 'secrets={"action": "deny"}')
    assert second.returncode == 0, second.stderr.decode()
    entry = json.loads(path.read_text())["servers"]["web"]
    assert entry["type"] == "stdio"
    assert entry["args"][-4:] == ["--guard", 'secrets={"action":"deny"}', "--upstream", "web"]
    stored = json.loads((tmp_path / "mcp.gateway-upstreams.json").read_text())
    assert stored == {"servers": {"web": {"type": "http", "url": http_upstream}}}
    blocked = await call_echo(entry, SECRET)
    assert isinstance(blocked, MCPError) and blocked.code == -32602
    assert await call_echo(entry, "nothing secret") == "nothing secret"


async def test_wrap_with_a_gateway_config_runs_every_server_behind_its_guards_and_audit(
    tmp_path: Path, http_upstream: str
) -> None:
    gateway_config = tmp_path / "gateway.yaml"
    gateway_config.write_text(
        "interceptors:\n  guards: [{name: secrets, config: {action: deny}}]\n"
        "audit: {enabled: true, store: audit.db, key_file: audit.key}\n",
        encoding="utf-8",
    )
    path = write_json(tmp_path / "claude_desktop_config.json", {"mcpServers": {"web": {"url": http_upstream}}})
    done = await run_cli("wrap-client-config", str(path), "--gateway-config", str(gateway_config))
    assert done.returncode == 0, done.stderr.decode()
    entry = json.loads(path.read_text())["mcpServers"]["web"]
    servers_file = tmp_path / "claude_desktop_config.gateway-upstreams.json"
    assert entry["args"][-6:] == ["--config", str(gateway_config), "--servers", str(servers_file), "--upstream", "web"]

    blocked = await call_echo(entry, SECRET)
    assert isinstance(blocked, MCPError) and blocked.code == -32602
    store = str(tmp_path / "audit.db")  # the gateway config has no upstreams of its own: name the store
    trail = await run_cli("audit", "tail", "--store", store, "--key-file", str(tmp_path / "audit.key"), "--json")
    assert trail.returncode == 0, trail.stderr.decode()
    decisions = [json.loads(line)["body"].get("decision") for line in trail.stdout.decode().splitlines()]
    assert "deny" in decisions

    undone = await run_cli("wrap-client-config", str(path), "--undo")
    assert undone.returncode == 0, undone.stderr.decode()
    assert json.loads(path.read_text()) == {"mcpServers": {"web": {"url": http_upstream}}}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--undo", "--guard", "pii"), "--undo puts the original entries back"),
        (("--guard", "pii", "--gateway-config", "g.yaml"), "give --guard or --gateway-config"),
    ],
)
async def test_wrap_refuses_options_that_contradict(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    path = write_json(tmp_path / "c.json", {"mcpServers": {"a": {"command": "x"}}})
    done = await run_cli("wrap-client-config", str(path), *args)
    assert done.returncode == 2
    assert message in done.stderr.decode()
    assert json.loads(path.read_text()) == {"mcpServers": {"a": {"command": "x"}}}


async def test_check_joins_a_client_configs_servers_to_a_gateway_configs_upstreams(tmp_path: Path) -> None:
    gateway_config = tmp_path / "gateway.yaml"
    gateway_config.write_text("upstreams:\n  own: {url: 'http://127.0.0.1:9/mcp'}\n", encoding="utf-8")
    servers = write_json(tmp_path / "claude.json", {"mcpServers": {"web": {"url": "http://127.0.0.1:8/mcp"}}})
    done = await run_cli("gateway", "--check", str(gateway_config), "--servers", str(servers))
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    assert "  own: streamable-http http://127.0.0.1:9/mcp  (tools/prompts as own__<name>)" in lines
    assert "  web: streamable-http http://127.0.0.1:8/mcp  (tools/prompts as web__<name>)" in lines

    clash = write_json(tmp_path / "clash.json", {"mcpServers": {"own": {"url": "http://127.0.0.1:8/mcp"}}})
    refused = await run_cli("gateway", "--check", str(gateway_config), "--servers", str(clash))
    assert refused.returncode == 1
    assert refused.stderr.decode().startswith(
        f"mcp-interceptors gateway: error: {clash}: mcpServers.own: the gateway config has an upstream of this name"
    )
