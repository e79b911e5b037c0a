"""approval: its rules pick the tool calls a person must approve (names, CEL over arguments and principal), and
for those it answers an escalation; a call no rule picks passes, and a condition it cannot read blocks."""

from __future__ import annotations

from typing import Any

import pytest
from guard_support import messages, run_chain, tool_call

from mcp_interceptors import guards
from mcp_interceptors.protocol.escalation import NO_FIELDS, Escalation

pytestmark = pytest.mark.anyio

CONFIRM = {"type": "object", "properties": {"confirm": {"type": "string", "enum": ["yes"]}}, "required": ["confirm"]}
RULES = {
    "rules": [
        {"name": "deletes", "tool": "delete_*", "remember": "session"},
        {
            "name": "big-payments",
            "tool": ["pay", "transfer"],
            "cel": "args.amount > 1000",
            "message": "A payment over 1000",
            "requested_schema": CONFIRM,
            "timeout_s": 30,
        },
        {
            "name": "admins-only",
            "server": "prod",
            "cel": 'principal.id != "admin"',
            "remember": "principal",
            "remember_minutes": 10,
        },
    ]
}


async def escalation_for(payload: Any, **context: Any) -> Escalation | None:
    result = await run_chain(guards.load("approval", RULES), "tools/call", "request", payload, **context)
    if result.allowed:
        return None
    assert [item.interceptor for item in result.escalations] == ["approval"], result
    return result.escalations[0].escalation


async def test_a_tool_name_glob_asks_with_the_call_shown() -> None:
    escalation = await escalation_for(tool_call("notes__delete_repo", repo="x"))
    assert escalation is not None
    assert escalation.message == (
        'Allow the call to notes__delete_repo on notes?\n\nTool: notes__delete_repo on notes\nArguments: {"repo":"x"}'
    )
    assert escalation.requested_schema == NO_FIELDS
    assert (escalation.key, escalation.remember, escalation.timeout_ms) == (
        "deletes:notes__delete_repo",
        "session",
        120_000,
    )


async def test_a_cel_condition_over_the_arguments_picks_the_calls_to_ask_about() -> None:
    assert await escalation_for(tool_call("pay", amount=10)) is None
    escalation = await escalation_for(tool_call("transfer", amount=5000))
    assert escalation is not None
    assert escalation.message.startswith("A payment over 1000\n\nTool: transfer\n")
    assert escalation.requested_schema == CONFIRM
    assert (escalation.timeout_ms, escalation.key, escalation.remember) == (30_000, "big-payments:transfer", "call")


async def test_a_cel_condition_over_the_principal_and_a_server_glob() -> None:
    admin = {"principal": {"type": "user", "id": "admin"}, "server": "prod"}
    assert await escalation_for(tool_call("restart"), **admin) is None
    escalation = await escalation_for(tool_call("restart"), principal={"type": "user", "id": "u7"}, server="prod")
    assert escalation is not None and (escalation.remember, escalation.remember_ms) == ("principal", 600_000)
    assert await escalation_for(tool_call("restart"), principal={"type": "user", "id": "u7"}, server="dev") is None


async def test_a_condition_that_cannot_be_read_blocks_without_asking() -> None:
    result = await run_chain(guards.load("approval", RULES), "tools/call", "request", tool_call("pay", to="x"))
    assert result.status == "validation_failed" and result.escalations == ()
    assert messages(result) == [
        (
            "$.params.arguments",
            "approval rule 'big-payments' (args.amount > 1000) could not be evaluated: no such member in mapping: "
            "'amount'",
        )
    ]


async def test_the_first_matching_rule_asks() -> None:
    config = {"rules": [{"name": "a", "tool": "x*", "message": "first"}, {"name": "b", "tool": "*", "message": "2nd"}]}
    result = await run_chain(guards.load("approval", config), "tools/call", "request", tool_call("xyz"))
    assert result.escalations[0].escalation.message.startswith("first\n")


async def test_no_rules_asks_nothing() -> None:
    result = await run_chain(guards.load("approval"), "tools/call", "request", tool_call("delete_repo"))
    assert result.allowed


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"rules": [{"cel": "args.n >"}]}, "config.rules[0].cel does not compile"),
        ({"rules": [{"cel": "amount > 5"}]}, "config.rules[0].cel names 'amount', which is not a variable"),
        ({"rules": [{"remember": "principal"}]}, "config.rules[0]: remember: principal needs remember_minutes"),
        ({"rules": [{"remember_minutes": 5}]}, "config.rules[0].remember_minutes needs remember: session or principal"),
        (
            {"rules": [{"requested_schema": {"type": "array"}}]},
            "config.rules[0].requested_schema: its type must be 'object'",
        ),
        (
            {"rules": [{"requested_schema": {"type": "object", "properties": {"a": {"type": "object"}}}}]},
            "config.rules[0].requested_schema: properties.a.type must be one of string, number, integer, boolean",
        ),
        ({"rules": [{"name": "x"}, {"name": "x"}]}, "config.rules: two rules are named 'x'"),
        ({"rules": [{"tool": 5}]}, "config.rules[0].tool"),
        ({"rules": [{"timeout_s": 0}]}, "config.rules[0].timeout_s"),
        ({"rules": [{"asks": "me"}]}, "'asks' was unexpected"),
        ({"webhook": {"url": "ftp://x", "secret": "s" * 16}}, "config.webhook.url"),
        ({"webhook": {"url": "https://x/approve", "secret": "short"}}, "config.webhook.secret"),
        ({"webhook": {"url": "https://x/approve"}}, "'secret' is a required property"),
    ],
)
def test_a_bad_config_is_refused_at_load_naming_the_field(config: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match="guard 'approval'") as refused:
        guards.load("approval", config)
    assert error in str(refused.value)


async def test_a_client_cannot_set_the_webhook_per_invocation() -> None:
    """The webhook is build-only: a per-invocation config naming one is refused, never followed."""
    host = guards.load("approval", {"rules": [{"tool": "delete_*"}]})
    assert "webhook" not in host.descriptors[0].config_schema["properties"]
    hijack = {"approval": {"webhook": {"url": "https://attacker.example/", "secret": "s" * 16}}}
    result = await run_chain(host, "tools/call", "request", tool_call("delete_all"), config=hijack)
    assert result.status == "validation_failed" and not result.escalations
