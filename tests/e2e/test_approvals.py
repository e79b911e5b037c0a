"""The `approval` guard through the real CLI, both eras, stdio and HTTP fronts: the client's user is asked
(elicitation/create mid-call for a handshake-era client, an `input_required` round for a 2026-07-28 one);
a yes runs the call, anything else denies it with -32602 naming the guard and the reason, and every answer
is in the call's audit record (and `audit verify` passes)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from e2e_support import ERAS, ConfigWriter, fresh_gateway, gateway_env, raw_request, text_of, upstream_entry
from helpers import call_records, cli_argv, free_tcp_port, http_transport, run_cli, running
from mcp import Client, MCPError
from mcp.client import ClientRequestContext

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

CONFIRM_YES = {"confirm": "yes"}
CONFIRM = {"type": "object", "properties": {"confirm": {"type": "string", "enum": ["yes"]}}, "required": ["confirm"]}
RULES: list[dict[str, Any]] = [
    {"name": "wipe", "tool": "delete_*", "message": "Wipe every note?", "timeout_s": 3},
    {"name": "notes", "tool": "save_note", "cel": 'args.name == "big"', "requested_schema": CONFIRM},
    {"name": "echoes", "tool": "echo", "cel": 'args.text == "again"', "remember": "session"},
]
Elicit = Callable[[ClientRequestContext, types.ElicitRequestParams], Awaitable[Any]]


def config_for(write_config: ConfigWriter, tmp_path: Path, rules: list[dict[str, Any]] = RULES) -> Path:
    return write_config(
        {
            "upstreams": {"e2e": upstream_entry()},
            "interceptors": {"guards": [{"name": "approval", "config": {"rules": rules}}]},
            "audit": {"enabled": True, "store": str(tmp_path / "audit.db"), "key_file": str(tmp_path / "audit-key")},
        }
    )


def answering(*answers: types.ElicitResult, asked: list[types.ElicitRequestParams]) -> Elicit:
    """An elicitation callback giving `answers` in turn, recording what it was asked."""
    queue = list(answers)

    async def elicit(ctx: ClientRequestContext, params: types.ElicitRequestParams) -> Any:
        asked.append(params)
        return queue.pop(0)

    return elicit


def approval_entries(record: dict[str, Any]) -> list[dict[str, Any]]:
    return [entry["approval"] for entry in record["interceptors"] if "approval" in entry]


async def verified(config: Path) -> None:
    done = await run_cli("audit", "verify", "--config", str(config), env=gateway_env())
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("era", ERAS)
async def test_an_accepted_approval_runs_the_call_and_its_record_keeps_the_answer(
    write_config: ConfigWriter, tmp_path: Path, era: str, transport: str
) -> None:
    config = config_for(write_config, tmp_path)
    asked: list[types.ElicitRequestParams] = []
    elicit = answering(types.ElicitResult(action="accept", content={"confirm": "yes"}), asked=asked)
    with anyio.fail_after(60):
        async with fresh_gateway(transport, config, era, elicitation_callback=elicit) as client:
            result = await client.call_tool("save_note", {"name": "big", "text": "t"})
            plain = await client.call_tool("save_note", {"name": "small", "text": "t"})
    assert not result.is_error and not plain.is_error, (result, plain)
    assert len(asked) == 1  # the small note matched no rule
    question = asked[0]
    assert isinstance(question, types.ElicitRequestFormParams)
    assert question.message == (
        'Allow the call to save_note on e2e?\n\nTool: save_note on e2e\nArguments: {"name":"big","text":"t"}'
    )
    assert question.requested_schema == CONFIRM
    records = call_records(tmp_path)
    assert [(r["phase"], r["decision"]) for r in records][:2] == [("request", "allow"), ("response", "allow")]
    approvals = approval_entries(records[0])
    assert len(approvals) == 1
    entry = approvals[0]
    via = "elicitation/create" if era == "legacy" else "input_required"
    assert (entry["asked"], entry["via"], entry["answer"], entry["content"]) == ("client", via, "accept", CONFIRM_YES)
    assert entry["asked_at"] <= entry["answered_at"]
    await verified(config)


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (types.ElicitResult(action="decline"), "declined"),
        (types.ElicitResult(action="cancel"), "cancelled"),
        (types.ElicitResult(action="accept", content={"confirm": "no"}), "invalid_answer"),
    ],
)
async def test_an_answer_that_is_no_yes_denies_the_call_naming_the_guard(
    write_config: ConfigWriter, tmp_path: Path, era: str, answer: types.ElicitResult, reason: str
) -> None:
    config = config_for(write_config, tmp_path)
    asked: list[types.ElicitRequestParams] = []
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", config, era, elicitation_callback=answering(answer, asked=asked)) as client:
            with pytest.raises(MCPError) as denied:
                await client.call_tool("save_note", {"name": "big", "text": "t"})
            # Nothing was saved: the upstream never got the call.
            assert text_of(await client.call_tool("read_note", {"name": "big"})) != "t"
    assert denied.value.code == -32602
    assert denied.value.error.data["interceptor"] == "approval"
    assert denied.value.error.data["reason"] == reason
    assert len(asked) == 1
    record = call_records(tmp_path)[0]
    assert (record["phase"], record["decision"]) == ("request", "deny")
    expected = "invalid" if answer.action == "accept" else answer.action
    assert approval_entries(record)[0]["answer"] == expected
    await verified(config)


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("era", ERAS)
async def test_an_unanswered_approval_times_out_and_denies(
    write_config: ConfigWriter, tmp_path: Path, era: str, transport: str
) -> None:
    config = config_for(write_config, tmp_path)
    asked: list[types.ElicitRequestParams] = []

    async def never(ctx: ClientRequestContext, params: types.ElicitRequestParams) -> Any:
        asked.append(params)
        await anyio.sleep_forever()

    with anyio.fail_after(60):
        async with fresh_gateway(transport, config, era, elicitation_callback=never) as client:
            if era == "legacy":
                with pytest.raises(MCPError) as denied:
                    await client.call_tool("delete_everything", {})
            else:
                # A 2026-07-28 client answers the round with its retry; one that never answers is told on its
                # late retry that the round timed out.
                with pytest.raises(MCPError) as denied:
                    await late_retry(client)
    assert denied.value.code == -32602
    assert "approval timed out (approval)" in denied.value.error.message
    assert (denied.value.error.data["interceptor"], denied.value.error.data["reason"]) == ("approval", "timeout")
    records = call_records(tmp_path)
    # The call closes with its deny when the time is up; a 2026-07-28 client's late retry is refused on its own.
    assert [(r["phase"], r["decision"]) for r in records] == [("request", "deny")] * (1 if era == "legacy" else 2)
    assert approval_entries(records[0])[0]["answer"] == "timeout"
    # The record says why, as the client was told (a 2026-07-28 client only on its late retry).
    assert (records[0]["error"]["code"], records[0]["error"]["reason"]) == (-32602, "timeout")
    assert records[0]["error"]["interceptor"] == "approval"
    await verified(config)


async def late_retry(client: Any) -> None:
    """Call delete_everything by hand, wait past the round's timeout, then retry with the round's token."""
    capabilities = {"elicitation": {"form": {}}}
    meta = {"io.modelcontextprotocol/clientCapabilities": capabilities}
    first = await raw_request(client, "tools/call", {"name": "delete_everything", "arguments": {}, "_meta": meta})
    assert first["resultType"] == "input_required", first
    [(key, request)] = first["inputRequests"].items()
    assert request["method"] == "elicitation/create"
    await anyio.sleep(4)  # the rule's timeout is 3 s: the round closes unanswered (and is recorded so)
    retry = {
        "name": "delete_everything",
        "arguments": {},
        "_meta": meta,
        "requestState": first["requestState"],
        "inputResponses": {key: {"action": "accept", "content": {}}},
    }
    await raw_request(client, "tools/call", retry)


@pytest.mark.parametrize("era", ERAS)
async def test_a_client_without_elicitation_is_not_asked_and_the_call_is_denied(
    write_config: ConfigWriter, tmp_path: Path, era: str
) -> None:
    config = config_for(write_config, tmp_path)
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", config, era) as client:
            with pytest.raises(MCPError) as denied:
                await client.call_tool("delete_everything", {})
    assert denied.value.code == -32602
    data = denied.value.error.data
    assert (data["interceptor"], data["reason"]) == ("approval", "no_elicitation")
    assert data["approval"] == "unavailable"
    assert "elicitation capability" in denied.value.error.message
    record = call_records(tmp_path)[0]
    assert approval_entries(record)[0]["asked"] == "nobody"
    await verified(config)


@pytest.mark.parametrize("era", ERAS)
async def test_a_session_approval_is_remembered_and_not_asked_again(
    write_config: ConfigWriter, tmp_path: Path, era: str
) -> None:
    config = config_for(write_config, tmp_path)
    asked: list[types.ElicitRequestParams] = []
    elicit = answering(types.ElicitResult(action="accept", content={}), asked=asked)
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", config, era, elicitation_callback=elicit) as client:
            first = await client.call_tool("echo", {"text": "again"})
            second = await client.call_tool("echo", {"text": "again"})
    assert (text_of(first), text_of(second)) == ("again", "again")
    assert len(asked) == 1
    requests = [r for r in call_records(tmp_path) if r["phase"] == "request"]
    assert [approval_entries(r)[0]["asked"] for r in requests] == ["client", "remembered"]
    await verified(config)


@pytest.mark.parametrize("era", ERAS)
async def test_a_principal_approval_holds_across_its_sessions_and_not_for_another_principal(
    write_config: ConfigWriter, tmp_path: Path, era: str
) -> None:
    """Two bearer tokens on the HTTP front: Alice's yes with `remember: principal` covers her next session's
    call (nobody is asked), while Bob, calling the same tool, is asked himself, and his no denies his call."""
    rules = [{"name": "wipe", "tool": "delete_*", "remember": "principal", "remember_minutes": 5}]
    config = config_for(write_config, tmp_path, rules)
    config.write_text(config.read_text() + "auth:\n  tokens: [alice-token-5d1e, bob-token-8a0c]\n")
    port = free_tcp_port()
    url = f"http://127.0.0.1:{port}/mcp"
    argv = cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}")
    alice_asked: list[types.ElicitRequestParams] = []
    bob_asked: list[types.ElicitRequestParams] = []
    yes, no = types.ElicitResult(action="accept", content={}), types.ElicitResult(action="decline")

    def session(token: str, elicit: Elicit) -> Client:
        return Client(
            http_transport(url, headers={"Authorization": f"Bearer {token}"}), mode=era, elicitation_callback=elicit
        )

    with anyio.fail_after(90):
        async with running(argv, port=port, env=gateway_env(), label="HTTP gateway"):
            async with session("alice-token-5d1e", answering(yes, asked=alice_asked)) as alice:
                first = await alice.call_tool("delete_everything", {})
            async with session("alice-token-5d1e", answering(asked=alice_asked)) as alice_again:
                second = await alice_again.call_tool("delete_everything", {})
            async with session("bob-token-8a0c", answering(no, asked=bob_asked)) as bob:
                with pytest.raises(MCPError) as denied:
                    await bob.call_tool("delete_everything", {})
    assert (text_of(first), text_of(second)) == ("deleted", "deleted")
    assert (len(alice_asked), len(bob_asked)) == (1, 1)  # Alice once in two sessions; Bob for himself
    assert (denied.value.code, denied.value.error.data["reason"]) == (-32602, "declined")
    requests = [r for r in call_records(tmp_path) if r["phase"] == "request"]
    answers = [(r["principal"]["id"], approval_entries(r)[0]["asked"], r["decision"]) for r in requests]
    assert answers == [
        ("static-token-1", "client", "allow"),
        ("static-token-1", "remembered", "allow"),
        ("static-token-2", "client", "deny"),
    ]
    assert approval_entries(requests[1])[0]["via"] == "principal"
    await verified(config)
