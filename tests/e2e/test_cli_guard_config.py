"""`--guard NAME=CONFIG` through the real CLI: the no-config gateway shortcut and `serve` run a guard with
the config given on the command line, and a config the guard refuses is a usage error naming the option."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest
from e2e_support import UPSTREAM, text_of
from helpers import cli_argv, run_cli, stderr_log, stdio_transport
from mcp import Client, MCPError

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

KEY = "key AKIAZ7QH4XK2M9PL3TWB"


async def test_gateway_guard_with_a_json_config_denies_instead_of_redacting() -> None:
    argv = cli_argv("gateway", "--guard", 'secrets={"action": "deny"}', "--", sys.executable, UPSTREAM)
    with anyio.fail_after(30), stderr_log("shortcut gateway") as log:
        async with Client(stdio_transport(argv, log)) as client:
            with pytest.raises(MCPError) as blocked:
                await client.call_tool("echo", {"text": KEY})
            allowed = await client.call_tool("echo", {"text": "nothing secret"})
    assert blocked.value.code == -32602
    assert text_of(allowed) == "nothing secret"


async def test_gateway_guard_config_from_a_file(tmp_path: Path) -> None:
    config = tmp_path / "policy.json"
    config.write_text(json.dumps({"deny": ["delete_*"]}), encoding="utf-8")
    argv = cli_argv(
        "gateway", "--guard", "secrets", "--guard", f"tool-policy=@{config}", "--", sys.executable, UPSTREAM
    )
    with anyio.fail_after(30), stderr_log("shortcut gateway") as log:
        async with Client(stdio_transport(argv, log)) as client:
            with pytest.raises(MCPError):
                await client.call_tool("delete_everything", {})
            redacted = await client.call_tool("echo", {"text": KEY})
    assert text_of(redacted) == "key [REDACTED:aws_access_key]"


@pytest.mark.parametrize(
    ("guard", "message"),
    [
        (
            'secrets={"action": "nope"}',
            "mcp-interceptors gateway: error: --guard secrets: config.action: 'nope' is not one of ['redact', 'deny']",
        ),
        (
            'secrets={"actoin": "deny"}',
            "mcp-interceptors gateway: error: --guard secrets: config: Additional properties are not allowed "
            "('actoin' was unexpected)",
        ),
    ],
)
async def test_a_guard_config_the_guard_refuses_names_the_option_and_starts_nothing(
    guard: str, message: str, tmp_path: Path
) -> None:
    started = tmp_path / "started"
    upstream = [sys.executable, "-c", f"open({str(started)!r}, 'w')"]
    done = await run_cli("gateway", "--guard", guard, "--", *upstream, limit_s=30)
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2
    assert len(lines) == 1 and lines[0].startswith(message), lines
    assert not started.exists()  # refused before any upstream started


@pytest.mark.parametrize(
    ("guard", "message"),
    [
        ("secretz", "argument --guard: unknown guard 'secretz'; choose from: secrets, pii, "),
        ("secrets={", "argument --guard: secrets: invalid JSON (Expecting property name enclosed in double quotes"),
        ("secrets=[1]", "argument --guard: secrets: the config must be a JSON object"),
        ('secrets={"a": NaN}', "argument --guard: secrets: invalid JSON (NaN is not JSON; give a finite number)"),
        ("secrets=@/nonexistent/x.json", "argument --guard: secrets: cannot read /nonexistent/x.json"),
    ],
    ids=["unknown", "bad-json", "not-an-object", "nan", "missing-file"],
)
@pytest.mark.parametrize("command", ["gateway", "serve"])
async def test_a_bad_guard_argument_prints_the_commands_usage(command: str, guard: str, message: str) -> None:
    upstream = ["--", sys.executable, "-c", "pass"] if command == "gateway" else []
    done = await run_cli(command, "--guard", guard, *upstream, limit_s=30)
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2
    assert lines[0].startswith(f"usage: mcp-interceptors {command} ")
    assert lines[-1].startswith(f"mcp-interceptors {command}: error: {message}"), lines[-1]


@pytest.mark.parametrize("command", ["gateway", "serve"])
async def test_the_same_guard_twice_is_a_usage_error(command: str) -> None:
    upstream = ["--", sys.executable, "-c", "pass"] if command == "gateway" else []
    done = await run_cli(command, "--guard", "secrets", "--guard", 'secrets={"action": "deny"}', *upstream)
    assert done.returncode == 2
    assert "--guard secrets is given twice" in done.stderr.decode()


async def test_serve_guard_with_a_json_config_is_the_config_it_serves_with() -> None:
    serve = cli_argv("serve", "--guard", 'secrets={"action": "deny"}')
    done = await run_cli(
        "invoke",
        "secrets",
        "--event",
        "tools/call",
        "--phase",
        "request",
        "--payload",
        json.dumps({"method": "tools/call", "params": {"name": "x", "arguments": {"text": KEY}}}),
        "--",
        *serve,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    result = json.loads(done.stdout)
    assert (result["type"], result["valid"]) == ("validation", False)  # the default redacts (a mutation)
    assert result["messages"][0]["path"] == "$.params.arguments.text"
