"""Why a call was blocked, where the operator looks: one log line per block (WARNING) or change (INFO) naming
the interceptor, event, phase, reason, JSON path and audit call, never the secret; `--log-format json` makes
each line one JSON object; `audit tail` says which interceptor decided and why. All through the real CLI."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import anyio
import pytest
from e2e_support import UPSTREAM, ConfigWriter, gateway_env, text_of, upstream_entry
from helpers import cli_argv, free_tcp_port, run_cli, stderr_log, stdio_transport
from mcp import Client, MCPError

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

SECRET = "AKIAZ7QH4XK2M9PL3TWB"
REASON = "secrets: credential found: aws_access_key at $.params.arguments.text"


async def test_a_blocked_call_logs_one_warning_naming_guard_reason_and_path_but_not_the_secret() -> None:
    argv = cli_argv("gateway", "--guard", 'secrets={"action": "deny"}', "--", sys.executable, UPSTREAM)
    with anyio.fail_after(30), stderr_log("shortcut gateway") as log:
        async with Client(stdio_transport(argv, log)) as client:
            with pytest.raises(MCPError) as blocked:
                await client.call_tool("echo", {"text": f"key {SECRET}"})
            await client.call_tool("echo", {"text": "nothing secret"})
        text = log.path.read_text(encoding="utf-8")
    assert blocked.value.code == -32602
    lines = [line for line in text.splitlines() if "decisions" in line]
    assert lines == [f"WARNING mcp_interceptors.gateway.decisions: blocked tools/call request: {REASON}"], text
    assert SECRET not in text


async def test_json_log_lines_carry_the_decision_fields_and_the_call_id(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    store = tmp_path / "audit.db"
    config = write_config(
        {
            "upstreams": {"e2e": upstream_entry()},
            "interceptors": {"guards": [{"name": "secrets"}]},
            "audit": {"enabled": True, "store": str(store), "key_file": str(tmp_path / "audit-key")},
        }
    )
    argv = cli_argv("gateway", "--config", str(config), "--log-level", "INFO", "--log-format", "json")
    with anyio.fail_after(60), stderr_log("json gateway") as log:
        async with Client(stdio_transport(argv, log, env=gateway_env())) as client:
            redacted = await client.call_tool("echo", {"text": f"key {SECRET}"})
        text = log.path.read_text(encoding="utf-8")
    assert text_of(redacted) == "key [REDACTED:aws_access_key]"
    lines = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert lines and all(set(line) >= {"time", "level", "logger", "event"} for line in lines)
    changed = [line for line in lines if line["logger"] == "mcp_interceptors.gateway.decisions"]
    assert len(changed) == 1, lines
    line = changed[0]
    assert line["level"] == "INFO"
    assert line["event"].startswith("changed tools/call request: secrets (aws_access_key) at $.params.arguments.text")
    assert (line["method"], line["phase"], line["interceptor"], line["path"]) == (
        "tools/call",
        "request",
        "secrets",
        "$.params.arguments.text",
    )
    assert re.fullmatch(r"[0-9a-f]{32}", line["call_id"])
    assert SECRET not in text


async def test_audit_tail_says_which_interceptor_denied_and_why(write_config: ConfigWriter, tmp_path: Path) -> None:
    store = tmp_path / "audit.db"
    config = write_config(
        {
            "upstreams": {"e2e": upstream_entry()},
            "interceptors": {"guards": [{"name": "secrets", "config": {"action": "deny"}}]},
            "audit": {"enabled": True, "store": str(store), "key_file": str(tmp_path / "audit-key")},
        }
    )
    argv = cli_argv("gateway", "--config", str(config))
    with anyio.fail_after(60), stderr_log("audited gateway") as log:
        async with Client(stdio_transport(argv, log, env=gateway_env())) as client:
            with pytest.raises(MCPError):
                await client.call_tool("echo", {"text": f"key {SECRET}"})
        logged = log.path.read_text(encoding="utf-8")
    call_id = re.search(r"blocked tools/call request: .* \(call ([0-9a-f]{32})\)", logged)
    assert call_id is not None, logged
    done = await run_cli("audit", "tail", "--store", str(store), limit_s=30)
    assert done.returncode == 0, done.stderr
    denied = [line for line in done.stdout.decode().splitlines() if " deny/" in line]
    assert len(denied) == 1
    assert f"call={call_id.group(1)}" in denied[0]
    assert denied[0].endswith(f"  by {REASON}")
    assert SECRET not in done.stdout.decode()


async def test_json_log_lines_of_a_traced_call_carry_its_trace_id(write_config: ConfigWriter, tmp_path: Path) -> None:
    """With tracing on, the decision line of a call carries the trace id the client sent in `_meta`, the same
    one its audit records carry; every line on stderr is one JSON object, where the web view listens too."""
    store = tmp_path / "audit.db"
    config = write_config(
        {
            "upstreams": {"e2e": upstream_entry()},
            "interceptors": {"guards": [{"name": "secrets", "config": {"action": "deny"}}]},
            "audit": {"enabled": True, "store": str(store), "key_file": str(tmp_path / "audit-key")},
            "telemetry": {"exporter": "none"},
            "ui": {"enabled": True, "listen": f"127.0.0.1:{free_tcp_port()}"},  # it says where, as JSON too
        }
    )
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    meta = {"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}
    argv = cli_argv("gateway", "--config", str(config), "--log-format", "json")
    with anyio.fail_after(60), stderr_log("traced json gateway") as log:
        async with Client(stdio_transport(argv, log, env=gateway_env())) as client:
            with pytest.raises(MCPError):
                await client.call_tool("echo", {"text": f"key {SECRET}"}, meta=meta)  # type: ignore[arg-type]
        text = log.path.read_text(encoding="utf-8")
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]  # each line parses, or this fails
    assert [line["level"] for line in lines if line["event"].startswith("audit web view on http://")] == ["INFO"]
    blocked = [line for line in lines if line["logger"] == "mcp_interceptors.gateway.decisions"]
    assert len(blocked) == 1, lines
    assert blocked[0]["level"] == "WARNING"
    assert blocked[0]["trace_id"] == trace_id
    assert blocked[0]["outcome"] == "validation_failed"
    assert SECRET not in text
    done = await run_cli("audit", "export", "--store", str(store), limit_s=30)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.decode().splitlines() if line.strip()]
    calls = [r for r in records if r.get("call_id") == blocked[0]["call_id"]]
    assert calls and all(r.get("body", {}).get("trace_id") == trace_id for r in calls if "body" in r), records
