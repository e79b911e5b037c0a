"""The approval webhook's asynchronous mode, through the real CLI: the receiver (starlette on uvicorn) answers
the signed question with 202 Accepted and POSTs its signed answer later to the question's `callback_url`
(`POST /approvals/{id}` on the gateway's HTTP front, with no bearer token: the signature is its auth). Only a
signed yes to this very question, within the rule's timeout, runs the call; an unknown id gets 404, a bad
signature 401 (the call still waits), a second answer 409, a late one 410; on stdio a 202 denies the call."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from e2e_support import ERAS, ConfigWriter, gateway_env, text_of
from helpers import cli_argv, free_tcp_port, http_transport, running
from mcp import Client, MCPError
from test_approval_webhook import SECRET, gateway, questions, receiver, verified, webhook_config
from test_approvals import approval_entries, call_records

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

TOKEN = "callback-test-token-71c2"


@asynccontextmanager
async def authed_gateway(config: Path, era: str) -> AsyncIterator[tuple[Client, int]]:
    """An HTTP gateway that requires a bearer token (`config` has one), and a client that has it."""
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}")
    env = gateway_env({"APPROVAL_WEBHOOK_SECRET": SECRET})
    transport = http_transport(f"http://127.0.0.1:{port}/mcp", headers={"Authorization": f"Bearer {TOKEN}"})
    async with running(argv, port=port, env=env, label="HTTP gateway"), Client(transport, mode=era) as client:
        yield client, port


async def until_callbacks(log: Path, count: int) -> None:
    """Wait (at most 10 s) until the receiver has made `count` callbacks."""
    with anyio.fail_after(10):
        for _ in range(1000):
            if len(callbacks(log)) >= count:
                return
            await anyio.sleep(0.05)


def callbacks(log: Path) -> list[tuple[str, int]]:
    """The receiver's callbacks: (the id in the URL, the gateway's HTTP status), in order."""
    return [(noted["callback"], noted["status"]) for noted in questions(log) if "callback" in noted]


def asked(log: Path) -> dict[str, Any]:
    [noted] = [noted for noted in questions(log) if "question" in noted]
    assert noted["signed"] is True
    question: dict[str, Any] = noted["question"]
    return question


@pytest.mark.parametrize("era", ERAS)
async def test_a_signed_yes_at_the_callback_url_runs_the_call_and_a_second_answer_gets_409(
    write_config: ConfigWriter, tmp_path: Path, era: str
) -> None:
    port, log = free_tcp_port(), tmp_path / "questions.jsonl"
    config = webhook_config(write_config, tmp_path, port)
    config.write_text(config.read_text() + f"auth:\n  tokens: [{TOKEN}]\n")
    with anyio.fail_after(90):
        async with receiver(port, "callback-accept", log), authed_gateway(config, era) as (client, gateway_port):
            result = await client.call_tool("delete_everything", {})
            await until_callbacks(log, 2)
            async with httpx2.AsyncClient() as http:  # the gateway's auth still guards everything else
                assert (await http.post(f"http://127.0.0.1:{gateway_port}/mcp", json={})).status_code == 401
    assert text_of(result) == "deleted"
    question = asked(log)
    assert question["callback_url"] == f"http://127.0.0.1:{gateway_port}/approvals/{question['id']}"
    assert callbacks(log) == [(question["id"], 200), (question["id"], 409)]
    [record] = [r for r in call_records(tmp_path) if r["phase"] == "request"]
    assert record["decision"] == "allow"
    [entry] = approval_entries(record)
    assert (entry["asked"], entry["via"], entry["answer"]) == (
        "webhook",
        f"http://127.0.0.1:{port}/approvals",
        "accept",
    )
    assert entry["answered_by"] == "ops@example.com"
    assert entry["asked_at"] <= entry["answered_at"]
    await verified(config)


@pytest.mark.parametrize(
    ("mode", "statuses"),
    [("callback-bad-signature", [401, 200]), ("callback-unknown-id", [404, 200])],
)
async def test_a_badly_signed_or_misaddressed_callback_changes_nothing_and_the_call_still_waits(
    write_config: ConfigWriter, tmp_path: Path, mode: str, statuses: list[int]
) -> None:
    port, log = free_tcp_port(), tmp_path / "questions.jsonl"
    config = webhook_config(write_config, tmp_path, port)
    with anyio.fail_after(90):
        async with receiver(port, mode, log), gateway("http", config, "legacy") as client:
            result = await client.call_tool("delete_everything", {})
    assert text_of(result) == "deleted"  # the well-signed answer to this id, after the refused one, decided
    ident = asked(log)["id"]
    first = "no-such-question" if mode == "callback-unknown-id" else ident
    assert callbacks(log) == [(first, statuses[0]), (ident, statuses[1])]
    await verified(config)


@pytest.mark.parametrize(
    ("mode", "reason", "answer", "statuses"),
    [
        ("callback-decline", "declined", "decline", [200]),
        ("callback-late", "timeout", "timeout", [410, 410]),
    ],
)
async def test_a_no_or_a_late_answer_at_the_callback_url_denies_the_call(
    write_config: ConfigWriter, tmp_path: Path, mode: str, reason: str, answer: str, statuses: list[int]
) -> None:
    port, log = free_tcp_port(), tmp_path / "questions.jsonl"
    config = webhook_config(write_config, tmp_path, port)
    with anyio.fail_after(90):
        async with receiver(port, mode, log), gateway("http", config, "legacy") as client:
            with pytest.raises(MCPError) as denied:
                await client.call_tool("delete_everything", {})
            await until_callbacks(log, len(statuses))  # callback-late: 4 s after the question (timeout: 3 s)
    data = denied.value.error.data
    assert (denied.value.code, data["interceptor"], data["reason"], data["approval"]) == (
        -32602,
        "approval",
        reason,
        answer,
    )
    ident = asked(log)["id"]
    assert callbacks(log) == [(ident, status) for status in statuses]
    [record] = call_records(tmp_path)
    assert (record["phase"], record["decision"]) == ("request", "deny")
    [entry] = approval_entries(record)
    assert (entry["asked"], entry["answer"]) == ("webhook", answer)
    await verified(config)


async def test_on_stdio_there_is_no_callback_url_and_a_202_denies_the_call(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    port, log = free_tcp_port(), tmp_path / "questions.jsonl"
    config = webhook_config(write_config, tmp_path, port)
    with anyio.fail_after(90):
        async with receiver(port, "callback-accept", log), gateway("stdio", config, "legacy") as client:
            with pytest.raises(MCPError) as denied:
                await client.call_tool("delete_everything", {})
    data = denied.value.error.data
    assert (denied.value.code, data["reason"], data["approval"]) == (-32602, "webhook_failed", "unreachable")
    assert "no HTTP front" in denied.value.error.message
    assert asked(log)["callback_url"] is None
    await verified(config)
