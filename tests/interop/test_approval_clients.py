"""Real clients complete an approval round through the real gateway CLI (issue 30): the official TypeScript
SDK client (`@modelcontextprotocol/sdk` from npm, run by Node) and the mcp Python client (`mcp.Client` with
an elicitation callback), over stdio and Streamable HTTP. The `approval` guard asks before `delete_everything`
runs; the client's yes runs it, its no gets -32602 naming the guard. Each call's audit record keeps the answer
and `audit verify` passes.

The npm package is installed into a temp folder (in CI from the cache .ci/run filled, offline). Without npm
the TypeScript cases skip, unless MCPI_REQUIRE_NPM is set (CI), where they fail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
import yaml
from helpers import call_records, child_env, cli_argv, free_tcp_port, running, stderr_log, stdio_transport
from mcp import Client, MCPError
from mcp.client import ClientRequestContext

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

HERE = Path(__file__).resolve().parent
UPSTREAM = str(HERE.parent / "e2e" / "e2e_upstream.py")
#: The SDK version the test installs (.ci/run caches the same one).
TS_SDK = "@modelcontextprotocol/sdk@1.32.2"
QUESTION = "Wipe every note?"
ACCEPT = {"action": "accept", "content": {}}
DECLINE = {"action": "decline"}


def require(variable: str, reason: str) -> None:
    """Skip, unless CI set `variable` (then a missing prerequisite fails the test)."""
    if os.environ.get(variable):
        pytest.fail(f"{variable} is set but {reason}")
    pytest.skip(f"{reason} (set {variable} to fail instead)")


@pytest.fixture(scope="module")
def ts_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The TypeScript client script, next to a `node_modules` holding the SDK from npm."""
    if shutil.which("npm") is None or shutil.which("node") is None:
        require("MCPI_REQUIRE_NPM", "npm or node is not installed (apt-get install nodejs npm)")
    prefix = tmp_path_factory.mktemp("ts-sdk")
    env = dict(os.environ, npm_config_update_notifier="false", npm_config_fund="false")
    if os.environ.get("MCPI_NPM_CACHE"):  # CI: from the cache .ci/run filled, offline
        env.update(npm_config_cache=os.environ["MCPI_NPM_CACHE"], npm_config_offline="true")
    install = ["npm", "install", "--prefix", str(prefix), "--no-audit", "--loglevel=error", TS_SDK]
    done = subprocess.run(install, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    script = prefix / "ts_approval_client.mjs"  # ES modules resolve packages from the script's own folder
    shutil.copy(HERE / "ts_approval_client.mjs", script)
    return script


def write_config(tmp_path: Path) -> Path:
    config = {
        "upstreams": {"e2e": {"command": sys.executable, "args": [UPSTREAM]}},
        "interceptors": {
            "guards": [{"name": "approval", "config": {"rules": [{"tool": "delete_*", "message": QUESTION}]}}]
        },
        "audit": {"enabled": True, "store": str(tmp_path / "audit.db"), "key_file": str(tmp_path / "audit-key")},
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@asynccontextmanager
async def http_gateway(config: Path) -> AsyncIterator[str]:
    """A gateway on the HTTP front for this block; its MCP URL."""
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}")
    async with running(argv, port=port, env=child_env(), label="HTTP gateway"):
        yield f"http://127.0.0.1:{port}/mcp"


async def run_ts_client(script: Path, spec: dict[str, Any]) -> dict[str, Any]:
    done = await anyio.run_process(["node", str(script), json.dumps(spec)], check=False)
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    report: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return report


async def assert_recorded(tmp_path: Path, config: Path, answer: str, via: str) -> None:
    """The call's request record keeps the client's answer (and when), and the trail verifies."""
    records = call_records(tmp_path)
    decisions = [(record["phase"], record["decision"]) for record in records]
    if answer == "accept":
        assert decisions == [("request", "allow"), ("response", "allow")]
    else:
        assert decisions == [("request", "deny")]
        assert (records[0]["error"]["code"], records[0]["error"]["interceptor"]) == (-32602, "approval")
    [entry] = [item["approval"] for item in records[0]["interceptors"] if "approval" in item]
    assert (entry["asked"], entry["via"], entry["answer"], entry["message"].splitlines()[0]) == (
        "client",
        via,
        answer,
        QUESTION,
    )
    assert entry["asked_at"] <= entry["answered_at"]
    verify = await anyio.run_process(cli_argv("audit", "verify", "--config", str(config)), check=False)
    assert verify.returncode == 0 and verify.stdout.startswith(b"OK: "), verify.stdout + verify.stderr


@pytest.mark.parametrize("answer", [ACCEPT, DECLINE], ids=["accept", "decline"])
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_the_typescript_sdk_client_answers_the_gateways_approval_question(
    ts_client: Path, tmp_path: Path, transport: str, answer: dict[str, Any]
) -> None:
    config = write_config(tmp_path)
    spec: dict[str, Any] = {"transport": transport, "tool": "delete_everything", "arguments": {}, "answer": answer}
    with anyio.fail_after(120):
        if transport == "stdio":
            argv = cli_argv("gateway", "--config", str(config))
            spec.update(command=argv[0], args=argv[1:], env=child_env())
            report = await run_ts_client(ts_client, spec)
        else:
            async with http_gateway(config) as url:
                report = await run_ts_client(ts_client, {**spec, "url": url})
    [question] = report["asked"]
    assert question["message"].startswith(QUESTION + "\n\nTool: delete_everything on e2e")
    assert question["requestedSchema"] == {"type": "object", "properties": {}}
    if answer is ACCEPT:
        assert "error" not in report, report
        assert report["result"]["content"][0]["text"] == "deleted"
    else:
        assert "result" not in report, report
        error = report["error"]
        assert error["code"] == -32602
        assert "approval declined (approval)" in error["message"]
        assert (error["data"]["interceptor"], error["data"]["reason"]) == ("approval", "declined")
    await assert_recorded(tmp_path, config, answer["action"], "elicitation/create")


@pytest.mark.parametrize("answer", [ACCEPT, DECLINE], ids=["accept", "decline"])
@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("era", ["legacy", "2026-07-28"])
async def test_the_mcp_python_client_answers_the_gateways_approval_question(
    tmp_path: Path, era: str, transport: str, answer: dict[str, Any]
) -> None:
    config = write_config(tmp_path)
    asked: list[types.ElicitRequestParams] = []

    async def elicit(ctx: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult.model_validate(answer)

    outcome: types.CallToolResult | MCPError
    with anyio.fail_after(120), stderr_log("gateway") as log:
        if transport == "stdio":
            argv = cli_argv("gateway", "--config", str(config))
            target: Any = stdio_transport(argv, log, env=child_env())
            async with Client(target, mode=era, elicitation_callback=elicit) as client:
                outcome = await call_or_error(client)
        else:
            async with http_gateway(config) as url, Client(url, mode=era, elicitation_callback=elicit) as client:
                outcome = await call_or_error(client)
    [question] = asked
    assert isinstance(question, types.ElicitRequestFormParams)
    assert question.message.startswith(QUESTION + "\n\nTool: delete_everything on e2e")
    if answer is ACCEPT:
        assert isinstance(outcome, types.CallToolResult) and not outcome.is_error, outcome
        assert isinstance(outcome.content[0], types.TextContent)
        assert outcome.content[0].text == "deleted"
    else:
        assert isinstance(outcome, MCPError), outcome
        assert outcome.code == -32602
        assert (outcome.error.data["interceptor"], outcome.error.data["reason"]) == ("approval", "declined")
    via = "elicitation/create" if era == "legacy" else "input_required"
    await assert_recorded(tmp_path, config, answer["action"], via)


async def call_or_error(client: Client) -> types.CallToolResult | MCPError:
    try:
        return await client.call_tool("delete_everything", {})
    except MCPError as exc:
        return exc
