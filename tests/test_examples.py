"""The README demo and the examples run as users run them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def test_demo_shows_the_sdk_the_gateway_and_a_verified_audit_trail() -> None:
    done = subprocess.run(
        [sys.executable, "examples/demo.py"], cwd=ROOT, capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert '"to": "[EMAIL]"' in out
    assert "blocked: validation_failed by deny-dangerous-tools" in out
    assert "delete_everything is hidden" in out and "delete_everything," not in out.split("tools the agent")[1][:80]
    assert "what the upstream stored: deploy with key [REDACTED:aws_access_key], ping [REDACTED:email]" in out
    assert '"interceptor": "tool-policy"' in out
    assert '"interceptor": "prompt-injection"' in out and '"phase": "response"' in out
    assert "sampling through the gateway: model says: 42" in out
    assert "audit verify: OK:" in out


def test_gateway_example_config_checks(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mcp_interceptors", "gateway", "--check", "examples/gateway.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "examples/gateway.yaml: configuration is valid" in done.stdout
    assert "deny-dangerous-tools [validation] from validators" in done.stdout


def invoke_example(tmp_path: Path, server: str, interceptor: str, arguments: dict[str, object]) -> Any:
    """`mcp-interceptors invoke` of one interceptor of an example server on a `tools/call` request."""
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps({"method": "tools/call", "params": {"name": "t", "arguments": arguments}}))
    invoke = ["invoke", interceptor, "--event", "tools/call", "--phase", "request", "--payload", f"@{payload}"]
    done = subprocess.run(
        [sys.executable, "-m", "mcp_interceptors", *invoke, "--", sys.executable, f"examples/{server}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_validator_example_max_size_warns_as_it_says(tmp_path: Path) -> None:
    """Its description says it warns (severity warn); it used to send `info` messages."""
    result = invoke_example(tmp_path, "validator_server.py", "max-size", {"x": "a" * 70000})
    assert result["valid"] is True
    assert [m["severity"] for m in result["messages"]] == ["warn"]


def test_mutator_example_redacts_a_long_string_in_linear_time(tmp_path: Path) -> None:
    """Its e-mail pattern was tried from every character of a run with no `@`: a 200 KB argument kept the
    in-process host (and so the whole gateway of examples/gateway.yaml) busy for minutes."""
    text = "x" * 200_000 + " mail a.b+c@example.co.uk"
    result = invoke_example(tmp_path, "mutator_server.py", "redact-emails", {"text": text})
    assert result["payload"]["params"]["arguments"]["text"] == "x" * 200_000 + " mail [EMAIL]"
