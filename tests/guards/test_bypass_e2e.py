"""The guard-bypass corpus through the real CLI gateway (`python -m mcp_interceptors gateway --config ...`,
over stdio) fronting `bypass_upstream.py`: encoded secrets in requests are redacted before the upstream sees
them (its `echo` answers with what it got), and results that hide a card or a key in `structuredContent`, an
embedded resource or invisible characters are redacted before the client sees them."""

from __future__ import annotations

import base64
import json
import sys
import urllib.parse
from pathlib import Path

import anyio
import mcp_types as types
import pytest
import yaml
from guard_support import E2E_TIMEOUT_S, gateway_client, gateway_config
from helpers import child_env, cli_argv, stderr_log, stdio_transport
from mcp import Client

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

BYPASS = str(Path(__file__).resolve().parent / "bypass_upstream.py")
AWS = "AKIAQYLPMN5HHHFPZAM2"
GITHUB = "ghp_" + "Zq8xR2mT5vW9yB3nK6pL1sD4fG7hJ0aC2eF5"
REQUESTS = {
    "percent-escaped =": (f"token%3D{GITHUB}", "token%3D[REDACTED:github_token]"),
    "percent-encoded email": (urllib.parse.quote("jane.doe@example.com"), "[REDACTED:email]"),
    "zero-width in a card": ("4111\u200b1111\u200b1111\u200b1111", "[REDACTED:credit_card]"),
    "fullwidth at sign": ("mail jane.doe\uff20example.com", "mail [REDACTED:email]"),
    "HTML entity": ("jane.doe&#64;example.com", "[REDACTED:email]"),
    "escaped tab": (f"id:\\t{AWS}", "id:\\t[REDACTED:aws_access_key]"),
}


def bypass_config() -> dict[str, object]:
    entry = {"command": sys.executable, "args": [BYPASS]}
    return gateway_config([{"name": "secrets"}, {"name": "pii"}], upstreams={"bypass": entry})


def text_of(result: types.CallToolResult) -> str:
    [content] = result.content
    assert isinstance(content, types.TextContent)
    return content.text


async def test_encoded_values_in_requests_are_redacted_before_the_upstream(tmp_path: Path) -> None:
    with anyio.fail_after(E2E_TIMEOUT_S):
        async with gateway_client(tmp_path, bypass_config(), mode="legacy") as client:
            for case, (sent, expected) in REQUESTS.items():
                assert text_of(await client.call_tool("echo", {"text": sent})) == expected, case
            blob = base64.urlsafe_b64encode(f"key {AWS}??>".encode()).decode().rstrip("=")
            echoed = text_of(await client.call_tool("echo", {"text": blob}))
            decoded = base64.urlsafe_b64decode(echoed + "=" * (-len(echoed) % 4)).decode()
            assert decoded == "key [REDACTED:aws_access_key]??>"


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_results_hiding_a_card_or_key_are_redacted_before_the_client(tmp_path: Path, mode: str) -> None:
    with anyio.fail_after(E2E_TIMEOUT_S):
        async with gateway_client(tmp_path, bypass_config(), mode=mode) as client:
            structured = await client.call_tool("leak", {"case": "structured-float-card"})
            assert structured.structured_content == {"customer": {"card": "[REDACTED:credit_card]"}}
            embedded = await client.call_tool("leak", {"case": "embedded-resource-base64url"})
            [content] = embedded.content
            assert isinstance(content, types.EmbeddedResource)
            assert isinstance(content.resource, types.TextResourceContents)
            text = content.resource.text
            decoded = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
            assert decoded == "AWS_ACCESS_KEY_ID=[REDACTED:aws_access_key]\n"
            hidden = await client.call_tool("leak", {"case": "zero-width-token"})
            assert text_of(hidden) == "key [REDACTED:aws_access_key]"
            assert AWS not in json.dumps(hidden.model_dump())


async def test_a_skipped_aws_example_key_is_logged_at_debug_by_the_gateway(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(bypass_config(), sort_keys=False))
    argv = cli_argv("gateway", "--config", str(path), "--log-level", "DEBUG")
    with anyio.fail_after(E2E_TIMEOUT_S), stderr_log("gateway") as log:
        async with Client(stdio_transport(argv, log, env=child_env()), mode="legacy") as client:
            sent = "try AKIAIOSFODNN7EXAMPLE"
            assert text_of(await client.call_tool("echo", {"text": sent})) == sent  # skipped on purpose
        written = log.path.read_text()
    assert "guard 'secrets': known example key skipped at $.params.arguments.text" in written
    assert "AKIAIOSFODNN7EXAMPLE" not in written.replace(sent, "")  # the key only where a payload is logged
