"""Each guard end to end: the real CLI gateway (`python -m mcp_interceptors gateway --config ...`, over stdio)
fronting the real `guards_upstream.py`, driven by an `mcp.Client`, in both eras where the era matters
(client features ride legacy server-to-client requests or 2026-07-28 `inputRequests`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from guard_support import E2E_TIMEOUT_S, ERAS, UPSTREAM, gateway_client, gateway_config, upstream
from helpers import child_env, cli_argv, run_cli, stderr_log, stdio_transport
from mcp import Client, MCPError
from mcp.client import ClientRequestContext

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

SECRET = "AKIAQYLPMN5HHHFPZAM2"


def text_of(result: types.CallToolResult) -> str:
    [content] = result.content
    assert isinstance(content, types.TextContent)
    return content.text


async def blocked_by(client: Client, interceptor: str, tool: str, arguments: dict[str, Any] | None = None) -> MCPError:
    """Call `tool` and check the gateway blocked it with `interceptor`'s validation error (R70)."""
    with pytest.raises(MCPError) as caught:
        await client.call_tool(tool, arguments or {})
    error = caught.value
    assert error.code == -32602, error
    assert isinstance(error.data, dict) and error.data["interceptor"] == interceptor, error.data
    assert error.data["reason"] == "validation failed"
    return error


class Sampler:
    """Answers every sampling request with "42" and records the params it was sent."""

    def __init__(self) -> None:
        self.seen: list[types.CreateMessageRequestParams] = []

    async def __call__(self, ctx: ClientRequestContext, params: types.CreateMessageRequestParams) -> Any:
        self.seen.append(params)
        return types.CreateMessageResult(role="assistant", content=types.TextContent(type="text", text="42"), model="m")


async def accept_feedback(ctx: ClientRequestContext, params: types.ElicitRequestParams) -> Any:
    return types.ElicitResult(action="accept", content={"rating": 5, "comment": "fine"})


async def list_roots(ctx: ClientRequestContext) -> Any:
    uris = ["file:///work/project", "file:///work/project-secrets", "file:///work/project/../../etc"]
    return types.ListRootsResult(roots=[types.Root(uri=uri) for uri in uris])


@pytest.mark.parametrize("mode", ERAS)
async def test_secrets_redacts_results_and_requests(tmp_path: Path, mode: str) -> None:
    with anyio.fail_after(E2E_TIMEOUT_S):
        async with gateway_client(tmp_path, gateway_config([{"name": "secrets"}]), mode=mode) as client:
            assert text_of(await client.call_tool("read_secret", {})) == "aws_access_key_id = [REDACTED:aws_access_key]"
            echoed = await client.call_tool("echo", {"text": f"my key {SECRET}"})
            assert text_of(echoed) == "my key [REDACTED:aws_access_key]"  # the upstream got the redacted text


async def test_secrets_through_the_guard_shortcut(tmp_path: Path) -> None:
    argv = cli_argv("gateway", "--guard", "secrets", "--", sys.executable, UPSTREAM)
    with anyio.fail_after(E2E_TIMEOUT_S), stderr_log("gateway") as log:
        async with Client(stdio_transport(argv, log, env=child_env()), mode="legacy") as client:
            assert text_of(await client.call_tool("read_secret", {})) == "aws_access_key_id = [REDACTED:aws_access_key]"


async def test_pii_redacts_and_denies_per_kind(tmp_path: Path) -> None:
    config = gateway_config([{"name": "pii", "config": {"kind_actions": {"credit_card": "deny"}}}])
    with anyio.fail_after(E2E_TIMEOUT_S):
        async with gateway_client(tmp_path, config, mode="2026-07-28") as client:
            await blocked_by(client, "pii-deny", "read_customer")
            echoed = await client.call_tool("echo", {"text": "reach me at jane.roe@example.org"})
            assert text_of(echoed) == "reach me at [REDACTED:email]"


async def test_exfiltration_from_server_a_to_server_b_is_blocked(tmp_path: Path) -> None:
    config = gateway_config(
        [{"name": "exfiltration-guard"}], upstreams={"a": upstream("server-a"), "b": upstream("server-b")}
    )
    with anyio.fail_after(E2E_TIMEOUT_S):
        async with gateway_client(tmp_path, config, mode="legacy") as client:
            assert SECRET in text_of(await client.call_tool("a__read_secret", {}))
            await blocked_by(client, "exfiltration-guard", "b__post", {"text": f"found {SECRET}"})
            assert text_of(await client.call_tool("a__post", {"text": f"back to a: {SECRET}"})) == "posted 31 chars"
            assert text_of(await client.call_tool("b__post", {"text": "harmless"})) == "posted 8 chars"


async def test_tool_policy_filters_the_listing_and_denies_calls_and_arguments(tmp_path: Path) -> None:
    policy = {"deny": ["post"], "arguments": [{"tool": "echo", "cel": "size(args.text) <= 20"}]}
    with anyio.fail_after(E2E_TIMEOUT_S):
        async with gateway_client(
            tmp_path, gateway_config([{"name": "tool-policy", "config": policy}]), mode="legacy"
        ) as client:
            names = [tool.name for tool in (await client.list_tools()).tools]
            assert "post" not in names and "echo" in names
            await blocked_by(client, "tool-policy", "post", {"text": "x"})
            await blocked_by(client, "tool-policy", "echo", {"text": "x" * 21})
            assert text_of(await client.call_tool("echo", {"text": "short"})) == "short"


@pytest.mark.parametrize("mode", ERAS)
async def test_schema_guard_checks_arguments_against_the_advertised_schema(tmp_path: Path, mode: str) -> None:
    with anyio.fail_after(E2E_TIMEOUT_S):
        async with gateway_client(tmp_path, gateway_config([{"name": "schema-guard"}]), mode=mode) as client:
            # The guard learns schemas from this session's tools/list result, so list first, as clients do
            # (the gateway runs a call's request chain before it lists on the session's behalf).
            await client.list_tools()
            await blocked_by(client, "schema-guard", "add", {"a": "one", "b": 2})
            result = await client.call_tool("add", {"a": 1, "b": 2})
            assert result.structured_content == {"result": 3}  # passed the outputSchema check too


async def test_prompt_injection_blocks_a_poisoned_page(tmp_path: Path) -> None:
    with anyio.fail_after(E2E_TIMEOUT_S):
        async with gateway_client(
            tmp_path, gateway_config([{"name": "prompt-injection"}]), mode="2026-07-28"
        ) as client:
            await blocked_by(client, "prompt-injection", "fetch_page")
            assert text_of(await client.call_tool("echo", {"text": "an ordinary reply"})) == "an ordinary reply"


async def test_rate_limit_per_session(tmp_path: Path) -> None:
    config = gateway_config(
        [{"name": "rate-limit", "config": {"limits": [{"limit": "2/minute", "per": ["session", "tool"]}]}}]
    )
    with anyio.fail_after(E2E_TIMEOUT_S):
        async with gateway_client(tmp_path, config, mode="legacy") as client:
            for _ in range(2):
                await client.call_tool("echo", {"text": "x"})
            error = await blocked_by(client, "rate-limit", "echo", {"text": "x"})
            assert error.data["event"] == "tools/call"
            assert text_of(await client.call_tool("add", {"a": 1, "b": 1})) == "2"  # another tool, its own window


@pytest.mark.parametrize("mode", ERAS)
async def test_sampling_guard_clamps_and_denies_in_both_eras(tmp_path: Path, mode: str) -> None:
    config = gateway_config([{"name": "sampling-guard", "config": {"max_tokens": 10, "allowed_models": ["claude-*"]}}])
    sampler = Sampler()
    with anyio.fail_after(E2E_TIMEOUT_S):
        async with gateway_client(tmp_path, config, mode=mode, sampling_callback=sampler) as client:
            answer = await client.call_tool("ask", {"question": "meaning?", "max_tokens": 99, "model": "claude-haiku"})
            assert text_of(answer) == "model says: 42"
            assert [p.max_tokens for p in sampler.seen] == [10]
            with pytest.raises(MCPError) as caught:
                await client.call_tool("ask", {"question": "again?", "model": "gpt-4o"})
            assert caught.value.data["interceptor"] == "sampling-guard"
            assert caught.value.data["event"] == "sampling/createMessage"
            assert len(sampler.seen) == 1  # the denied request never reached the client


@pytest.mark.parametrize("mode", ERAS)
async def test_elicitation_guard_denies_password_forms_in_both_eras(tmp_path: Path, mode: str) -> None:
    config = gateway_config([{"name": "elicitation-guard"}])
    with anyio.fail_after(E2E_TIMEOUT_S):
        async with gateway_client(tmp_path, config, mode=mode, elicitation_callback=accept_feedback) as client:
            with pytest.raises(MCPError) as caught:
                await client.call_tool("login", {})
            assert caught.value.data["interceptor"] == "elicitation-guard"
            assert text_of(await client.call_tool("feedback", {})) == "elicited: rating=5 comment='fine'"


@pytest.mark.parametrize("mode", ERAS)
async def test_roots_guard_lets_only_configured_roots_reach_the_server(tmp_path: Path, mode: str) -> None:
    config = gateway_config([{"name": "roots-guard", "config": {"allowed": ["file:///work/project"]}}])
    with anyio.fail_after(E2E_TIMEOUT_S):
        async with gateway_client(tmp_path, config, mode=mode, list_roots_callback=list_roots) as client:
            assert text_of(await client.call_tool("roots", {})) == "file:///work/project"


async def test_size_limit(tmp_path: Path) -> None:
    config = gateway_config([{"name": "size-limit", "config": {"max_payload_bytes": 4096}}])
    with anyio.fail_after(E2E_TIMEOUT_S):
        async with gateway_client(tmp_path, config, mode="legacy") as client:
            await blocked_by(client, "size-limit", "echo", {"text": "x" * 5000})
            assert text_of(await client.call_tool("echo", {"text": "x" * 100})) == "x" * 100


async def test_tool_pinning_with_a_pin_file_written_by_the_pin_command(tmp_path: Path) -> None:
    pins = tmp_path / "pins.json"
    done = await run_cli("pin", "-o", str(pins), "--", sys.executable, UPSTREAM)
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(pins.read_text())["source"] == "guards-upstream 1.0.0"
    config = gateway_config([{"name": "tool-pinning", "config": {"pin_file": str(pins)}}])
    with anyio.fail_after(E2E_TIMEOUT_S):
        async with gateway_client(tmp_path, config, mode="legacy") as client:
            assert "echo" in [tool.name for tool in (await client.list_tools()).tools]
            assert text_of(await client.call_tool("rug_pull", {})) == "pulled"
            with pytest.raises(MCPError) as caught:
                await client.list_tools()  # the next listing (what list_changed prompts) shows the change
            assert caught.value.data["interceptor"] == "tool-pinning"
            await blocked_by(client, "tool-pinning", "echo", {"text": "hi"})


async def test_audit_log_records_both_phases_of_each_call(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    config = gateway_config([{"name": "audit-log", "config": {"path": str(log)}}], chain={"sinks": True})
    with anyio.fail_after(E2E_TIMEOUT_S):
        async with gateway_client(tmp_path, config, mode="legacy") as client:
            await client.call_tool("echo", {"text": "hello"})
    records = [json.loads(line) for line in log.read_text().splitlines()]
    calls = [(r["event"], r["phase"], r.get("server")) for r in records if r["event"] == "tools/call"]
    assert calls == [("tools/call", "request", "notes"), ("tools/call", "response", "notes")]
    assert all(r["sessionId"] for r in records)
