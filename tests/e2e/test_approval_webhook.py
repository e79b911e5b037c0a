"""The `approval` guard's webhook, through the real CLI: a client without elicitation is not asked; the
gateway posts the question, signed (HMAC-SHA256), to a real receiver (starlette on uvicorn) and the
receiver's signed answer decides. Anything but a signed yes to this very question denies the call with
-32602 naming the guard (fail closed); the audit record names the webhook, the answer and who gave it."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from e2e_support import E2E_DIR, ERAS, ConfigWriter, fresh_gateway, gateway_env, text_of
from helpers import free_tcp_port, run_cli, running
from mcp import MCPError
from mcp.client import ClientRequestContext
from test_approvals import approval_entries, call_records, config_for

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

RECEIVER = str(E2E_DIR / "approval_webhook_receiver.py")
SECRET = "s3cret-shared-with-the-receiver"
RULES: list[dict[str, Any]] = [{"name": "wipe", "tool": "delete_*", "message": "Wipe every note?", "timeout_s": 3}]


def webhook_config(write_config: ConfigWriter, tmp_path: Path, port: int) -> Path:
    config = config_for(write_config, tmp_path, RULES)
    text = config.read_text().replace(
        "      rules:\n",
        f"      webhook:\n        url: http://127.0.0.1:{port}/approvals?team=ops\n"
        "        secret: ${APPROVAL_WEBHOOK_SECRET}\n      rules:\n",
    )
    config.write_text(text)
    return config


@asynccontextmanager
async def receiver(port: int, mode: str, log: Path) -> AsyncIterator[None]:
    argv = [sys.executable, RECEIVER, "--port", str(port), "--secret", SECRET, "--mode", mode, "--log", str(log)]
    async with running(argv, port=port, label=f"webhook receiver ({mode})"):
        yield


async def verified(config: Path) -> None:
    done = await run_cli(
        "audit", "verify", "--config", str(config), env=gateway_env({"APPROVAL_WEBHOOK_SECRET": SECRET})
    )
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()


def questions(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@asynccontextmanager
async def gateway(transport: str, config: Path, era: str, **kwargs: Any) -> AsyncIterator[Any]:
    env = gateway_env({"APPROVAL_WEBHOOK_SECRET": SECRET})
    async with fresh_gateway(transport, config, era, env=env, **kwargs) as client:
        yield client


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("era", ERAS)
async def test_a_signed_yes_from_the_webhook_runs_the_call_of_a_client_without_elicitation(
    write_config: ConfigWriter, tmp_path: Path, era: str, transport: str
) -> None:
    port, log = free_tcp_port(), tmp_path / "questions.jsonl"
    config = webhook_config(write_config, tmp_path, port)
    with anyio.fail_after(90):
        async with receiver(port, "accept", log), gateway(transport, config, era) as client:
            result = await client.call_tool("delete_everything", {})
    assert text_of(result) == "deleted"
    [noted] = questions(log)
    assert noted["signed"] is True  # the receiver checked the gateway's signature with the shared secret
    asked = noted["question"]
    assert asked["type"] == "io.github.mcp-interceptors/approval-request"
    assert (asked["interceptor"], asked["event"], asked["tool"], asked["arguments"]) == (
        "approval",
        "tools/call",
        "delete_everything",
        {},
    )
    assert asked["server"] == "e2e"
    assert asked["message"].startswith("Wipe every note?\n\nTool: delete_everything on e2e")
    assert asked["requested_schema"] == {"type": "object", "properties": {}}
    assert asked["principal"] is None  # no auth configured: the call acts for nobody in particular
    assert asked["asked_at"] < asked["expires_at"]
    [record] = [r for r in call_records(tmp_path) if r["phase"] == "request"]
    assert record["decision"] == "allow"
    [entry] = approval_entries(record)
    # The URL as recorded: no query string (it may carry a token).
    assert (entry["asked"], entry["via"], entry["answer"]) == (
        "webhook",
        f"http://127.0.0.1:{port}/approvals",
        "accept",
    )
    assert entry["answered_by"] == "ops@example.com"
    assert entry["asked_at"] <= entry["answered_at"]
    await verified(config)


@pytest.mark.parametrize(
    ("mode", "reason", "answer", "detail"),
    [
        ("decline", "declined", "decline", ""),
        ("bad-signature", "invalid_answer", "invalid", "not signed with the shared secret"),
        ("wrong-id", "invalid_answer", "invalid", "for another question"),
        ("slow", "timeout", "timeout", "no answer within 3 s"),
        ("error", "webhook_failed", "unreachable", "answered HTTP 500"),
        (None, "webhook_failed", "unreachable", "the approval webhook failed: ConnectError"),
    ],
)
async def test_anything_but_a_signed_yes_to_this_question_denies_the_call(
    write_config: ConfigWriter, tmp_path: Path, mode: str | None, reason: str, answer: str, detail: str
) -> None:
    port, log = free_tcp_port(), tmp_path / "questions.jsonl"
    config = webhook_config(write_config, tmp_path, port)
    with anyio.fail_after(90):
        async with gateway("stdio", config, "legacy") as client:
            with pytest.raises(MCPError) as denied:
                if mode is None:  # nothing listens on the webhook's port
                    await client.call_tool("delete_everything", {})
                else:
                    async with receiver(port, mode, log):
                        await client.call_tool("delete_everything", {})
    data = denied.value.error.data
    assert (denied.value.code, data["interceptor"], data["reason"], data["approval"]) == (
        -32602,
        "approval",
        reason,
        answer,
    )
    assert detail in denied.value.error.message
    assert len(questions(log)) == (0 if mode is None else 1)
    [record] = call_records(tmp_path)
    assert (record["phase"], record["decision"]) == ("request", "deny")
    [entry] = approval_entries(record)
    assert (entry["asked"], entry["answer"]) == ("webhook", answer)
    assert (record["error"]["reason"], record["error"]["interceptor"]) == (reason, "approval")
    await verified(config)


async def test_a_client_with_elicitation_is_asked_itself_not_the_webhook(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    port, log = free_tcp_port(), tmp_path / "questions.jsonl"
    config = webhook_config(write_config, tmp_path, port)
    asked: list[types.ElicitRequestParams] = []

    async def elicit(ctx: ClientRequestContext, params: types.ElicitRequestParams) -> Any:
        asked.append(params)
        return types.ElicitResult(action="accept", content={})

    with anyio.fail_after(90):
        async with receiver(port, "decline", log), gateway("stdio", config, "legacy", elicitation_callback=elicit) as c:
            result = await c.call_tool("delete_everything", {})
    assert text_of(result) == "deleted"
    assert len(asked) == 1 and questions(log) == []
    [record] = [r for r in call_records(tmp_path) if r["phase"] == "request"]
    assert approval_entries(record)[0]["asked"] == "client"
