"""tool-policy (globs at discovery and call time, CEL and JSON Schema argument rules), schema-guard (learned
input/output schemas, 2026-07-28 results) and size-limit (bytes and string lengths per event)."""

from __future__ import annotations

import urllib.request
from typing import Any

import pytest
from guard_support import messages, run_chain, tool_call

from mcp_interceptors import guards

pytestmark = pytest.mark.anyio

POLICY = {
    "deny": ["delete_*", {"server": "files", "tool": "write_*"}],
    "arguments": [
        {"tool": "read_file", "cel": '!args.path.startsWith("/etc/")', "message": "no reading /etc"},
        {"tool": "read_file", "cel": 'principal.type == "user" || args.path.startsWith("/public/")'},
        {"tool": "save_note", "schema": {"properties": {"text": {"type": "string", "maxLength": 10}}}},
    ],
}


# --------------------------------------------------------------------------- tool-policy


@pytest.mark.parametrize(
    ("payload", "context", "denial"),
    [
        (tool_call("delete_everything"), {}, "tool 'delete_everything' is not allowed by policy"),
        (tool_call("notes__delete_everything"), {}, "tool 'notes__delete_everything' on server 'notes' is not allowed"),
        ({"name": "delete_all", "arguments": {}}, {}, "tool 'delete_all' is not allowed by policy"),
        (tool_call("write_file"), {"server": "files"}, "tool 'write_file' on server 'files' is not allowed by policy"),
        (tool_call("read_file", path="/etc/passwd"), {}, "no reading /etc"),
        (tool_call("read_file"), {}, "could not be evaluated: no such member in mapping: 'path'"),
        (tool_call("save_note", text="much too long"), {}, "arguments violate rule #2 at $.params.arguments.text"),
    ],
)
async def test_policy_denies(payload: Any, context: dict[str, Any], denial: str) -> None:
    outcome = await run_chain(guards.load("tool-policy", POLICY), "tools/call", "request", payload, **context)
    assert outcome.status == "validation_failed"
    assert outcome.aborted_at is not None and outcome.aborted_at.interceptor == "tool-policy"
    assert any(denial in message for _, message in messages(outcome)), messages(outcome)


@pytest.mark.parametrize(
    ("payload", "context"),
    [
        (tool_call("delete"), {}),  # near miss of delete_*
        (tool_call("undelete_item"), {}),
        (tool_call("write_file"), {"server": "scratch"}),  # the deny names another server
        (tool_call("read_file", path="/home/me/etc/notes"), {"principal": {"type": "user", "id": "u1"}}),
        (tool_call("read_file", path="/public/readme"), {}),  # anonymous, but a public path
        (tool_call("save_note", text="short"), {}),
        ({"method": "tools/call", "params": {}}, {}),  # no name: nothing for the policy to judge
    ],
)
async def test_policy_near_misses_pass(payload: Any, context: dict[str, Any]) -> None:
    outcome = await run_chain(guards.load("tool-policy", POLICY), "tools/call", "request", payload, **context)
    assert outcome.status == "success", messages(outcome)


async def test_policy_allowlist_filters_listings_by_server() -> None:
    host = guards.load("tool-policy", {"allow": ["echo", {"server": "notes", "tool": "*_note"}]})
    listing = {"tools": [{"name": n} for n in ("echo", "save_note", "read_note", "delete_everything")], "ttlMs": 5}
    filtered = await run_chain(host, "tools/list", "response", listing, server="notes")
    assert filtered.final_payload == {
        "tools": [{"name": "echo"}, {"name": "save_note"}, {"name": "read_note"}],
        "ttlMs": 5,
    }
    other = await run_chain(host, "tools/list", "response", listing, server="archive")
    assert other.final_payload == {"tools": [{"name": "echo"}], "ttlMs": 5}
    unchanged = {"tools": [{"name": "echo"}]}
    assert (await run_chain(host, "tools/list", "response", unchanged)).final_payload is unchanged


async def test_policy_allowlist_takes_off_only_the_servers_own_prefix() -> None:
    """`allow: [echo]` covers `notes__echo` from upstream `notes` (the gateway's default prefix), never a tool an
    upstream named `evil__echo` itself (one upstream: no prefix), which a denylist's wider reading would match."""
    host = guards.load("tool-policy", {"allow": ["echo"]})
    prefixed = await run_chain(host, "tools/call", "request", tool_call("notes__echo"), server="notes")
    named_so = await run_chain(host, "tools/call", "request", tool_call("evil__echo"), server="notes")
    listing = {"tools": [{"name": "echo"}, {"name": "evil__echo"}]}
    listed = await run_chain(host, "tools/list", "response", listing, server="notes")
    assert prefixed.status == "success", messages(prefixed)
    assert named_so.status == "validation_failed"
    assert listed.final_payload == {"tools": [{"name": "echo"}]}
    denied = await run_chain(
        guards.load("tool-policy", {"deny": ["echo"]}), "tools/call", "request", tool_call("evil__echo"), server="notes"
    )
    assert denied.status == "validation_failed"  # a denylist still reads past any prefix


async def test_policy_tool_servers_map_for_use_outside_the_gateway() -> None:
    host = guards.load("tool-policy", {"deny": [{"server": "github", "tool": "*"}], "tool_servers": {"gh_*": "github"}})
    assert (await run_chain(host, "tools/call", "request", tool_call("gh_push"))).status == "validation_failed"
    assert (await run_chain(host, "tools/call", "request", tool_call("git_push"))).status == "success"


async def test_policy_cel_sees_session_and_server() -> None:
    rule = {"arguments": [{"cel": 'server == "notes" && session != ""', "message": "only notes, in a session"}]}
    host = guards.load("tool-policy", rule)
    ok = await run_chain(host, "tools/call", "request", tool_call("echo"), server="notes", sessionId="s1")
    assert ok.status == "success"
    denied = await run_chain(host, "tools/call", "request", tool_call("echo"), server="notes")
    assert messages(denied) == [("$.params.arguments", "only notes, in a session")]


def test_policy_cel_naming_an_undeclared_variable_is_refused_at_load() -> None:
    # It would compile, then fail to evaluate (and deny) on every call.
    message = r"config.arguments\[1\].cel names 'argz', 'user', which are not variables; use args, principal"
    with pytest.raises(ValueError, match=message):
        guards.load("tool-policy", {"arguments": [{"cel": "true"}, {"cel": 'argz.path == "x" || user == argz'}]})
    with pytest.raises(ValueError, match=r"names 'y', which is not a variable"):
        guards.load("tool-policy", {"arguments": [{"cel": "args.tags.all(x, x > y)"}]})


async def test_policy_cel_macro_variables_builtins_and_type_names_are_declared() -> None:
    rule = {
        "cel": 'args.tags.all(t, t != "") && args.tags.exists(t, t == "ok") && type(args.n) == int'
        " && args.tags.map(t, size(t)).filter(n, n > 1).size() >= 1 && has(args.n)"
    }
    host = guards.load("tool-policy", {"arguments": [rule]})
    ok = await run_chain(host, "tools/call", "request", tool_call("echo", tags=["ok", "yes"], n=1))
    assert ok.status == "success"
    denied = await run_chain(host, "tools/call", "request", tool_call("echo", tags=["", "ok"], n=1))
    assert denied.status == "validation_failed"


def test_policy_rule_needs_cel_or_schema() -> None:
    with pytest.raises(ValueError, match=r"config.arguments\[0\]: give `cel` \(a condition\) or `schema`"):
        guards.load("tool-policy", {"arguments": [{"tool": "x"}]})


# --------------------------------------------------------------------------- schema-guard

TOOLS = {
    "tools": [
        {
            "name": "add",
            "inputSchema": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
            "outputSchema": {"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]},
        },
        {"name": "broken", "inputSchema": {"type": "object", "properties": {"x": {"type": "nonsense"}}}},
    ]
}


async def learned(**config: Any) -> Any:
    host = guards.load("schema-guard", config)
    assert (await run_chain(host, "tools/list", "response", TOOLS, sessionId="s1")).status == "success"
    return host


async def test_schema_guard_checks_arguments_against_the_learned_input_schema() -> None:
    host = await learned()
    bad = await run_chain(host, "tools/call", "request", tool_call("add", a="1"), sessionId="s1", traceId="7")
    assert bad.status == "validation_failed"
    assert sorted(messages(bad)) == [
        ("$.params.arguments", 'required property "b" is missing'),
        ("$.params.arguments.a", 'fails type "integer"'),
    ]
    good = await run_chain(host, "tools/call", "request", tool_call("add", a=1, b=2), sessionId="s1")
    assert good.status == "success"


async def test_schema_guard_state_is_per_session() -> None:
    host = await learned()
    other = await run_chain(host, "tools/call", "request", tool_call("add", a="x"), sessionId="s2")
    assert other.status == "success"  # s2 never listed tools
    strict = await learned(unknown_tools="deny")
    denied = await run_chain(strict, "tools/call", "request", tool_call("add", a=1, b=2), sessionId="s2")
    assert messages(denied) == [("$.params.name", "no schema is known for tool 'add'")]


async def test_schema_guard_checks_results_against_the_output_schema() -> None:
    host = await learned()
    await run_chain(host, "tools/call", "request", tool_call("add", a=1, b=2), sessionId="s1", traceId="9")
    bad = await run_chain(
        host, "tools/call", "response", {"content": [], "structuredContent": {"sum": "3"}}, sessionId="s1", traceId="9"
    )
    assert messages(bad) == [("$.structuredContent.sum", 'fails type "integer"')]
    await run_chain(host, "tools/call", "request", tool_call("add", a=1, b=2), sessionId="s1", traceId="10")
    missing = await run_chain(host, "tools/call", "response", {"content": []}, sessionId="s1", traceId="10")
    assert messages(missing) == [
        ("$.structuredContent", "tool 'add' declares an outputSchema but its result has no structuredContent")
    ]


@pytest.mark.parametrize(
    "result",
    [
        {"resultType": "input_required", "inputRequests": {"q": {"method": "elicitation/create", "params": {}}}},
        {"content": [{"type": "text", "text": "boom"}], "isError": True},
        {"content": [], "structuredContent": {"sum": 3}},
    ],
)
async def test_schema_guard_lets_incomplete_error_and_valid_results_pass(result: dict[str, Any]) -> None:
    host = await learned()
    await run_chain(host, "tools/call", "request", tool_call("add", a=1, b=2), sessionId="s1", traceId="11")
    assert (await run_chain(host, "tools/call", "response", result, sessionId="s1", traceId="11")).status == "success"


async def test_schema_guard_ignores_an_upstream_invalid_schema_and_uses_configured_ones() -> None:
    host = await learned()
    ok = await run_chain(host, "tools/call", "request", tool_call("broken", x=1), sessionId="s1")
    assert ok.status == "success"
    fixed = guards.load("schema-guard", {"schemas": {"echo": {"input": {"required": ["text"]}}}})
    denied = await run_chain(fixed, "tools/call", "request", {"name": "echo", "arguments": {}})
    assert messages(denied) == [("$.arguments", 'required property "text" is missing')]


async def test_schema_guard_a_configured_output_schema_keeps_the_listed_input_schema_checked() -> None:
    # Configuring only `output` for a tool used to replace all its listed schemas: its arguments went unchecked.
    host = await learned(schemas={"add": {"output": {"type": "object", "required": ["total"]}}})
    bad = await run_chain(host, "tools/call", "request", tool_call("add", a="1"), sessionId="s1", traceId="12")
    assert sorted(messages(bad)) == [
        ("$.params.arguments", 'required property "b" is missing'),
        ("$.params.arguments.a", 'fails type "integer"'),
    ]
    await run_chain(host, "tools/call", "request", tool_call("add", a=1, b=2), sessionId="s1", traceId="13")
    result = {"content": [], "structuredContent": {"sum": 3}}
    checked = await run_chain(host, "tools/call", "response", result, sessionId="s1", traceId="13")
    assert messages(checked) == [("$.structuredContent", 'required property "total" is missing')]


SECRET = "hunter2hunter2"
#: keyword -> (schema of the argument `value`, a SECRET-bearing value that fails it, the message expected)
VALUE_FREE: dict[str, tuple[dict[str, Any], Any, str]] = {
    "maxLength": ({"maxLength": 8}, SECRET, "fails maxLength 8"),
    "pattern": ({"pattern": "^[a-z]+$"}, SECRET, 'fails pattern "^[a-z]+$"'),
    "enum": ({"enum": ["a", "b"]}, SECRET, 'fails enum ["a","b"]'),
    "const": ({"const": "x"}, SECRET, 'fails const "x"'),
    "type": ({"type": "integer"}, SECRET, 'fails type "integer"'),
    "not": ({"not": {"type": "string"}}, SECRET, "fails not"),
    "false": (False, SECRET, "fails a false schema (nothing is allowed here)"),
    "items": ({"items": {"maxLength": 2}}, [SECRET], "fails maxLength 2"),
    "additionalProperties": ({"additionalProperties": False}, {SECRET: 1}, "fails additionalProperties false"),
}


@pytest.mark.parametrize("keyword", list(VALUE_FREE))
async def test_schema_messages_carry_the_path_and_constraint_never_the_value(keyword: str) -> None:
    # Denials reach clients and the signed audit trail: jsonschema's own text ('hunter2hunter2' is too long) may not.
    schema, value, expected = VALUE_FREE[keyword]
    arguments_schema = {"type": "object", "properties": {"value": schema}}
    policy = guards.load("tool-policy", {"arguments": [{"tool": "t", "schema": arguments_schema}]})
    denied = await run_chain(policy, "tools/call", "request", tool_call("t", value=value))
    [(_, policy_message)] = messages(denied)
    assert policy_message.startswith("arguments violate rule #0 at $.params.arguments")  # `false` has no path
    assert policy_message.endswith(f": {expected}")
    schema_guard = guards.load("schema-guard", {"schemas": {"t": {"input": arguments_schema}}})
    [(path, message)] = messages(await run_chain(schema_guard, "tools/call", "request", tool_call("t", value=value)))
    assert path.startswith("$.params.arguments") and message == expected
    assert SECRET not in policy_message + message


REMOTE_REF = "http://127.0.0.1:9/latest/meta-data"


@pytest.fixture
def fetched(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every URL jsonschema tries to retrieve (none may be), refused like an unreachable host."""
    urls: list[Any] = []

    def spy(url: Any, *args: Any, **kwargs: Any) -> Any:
        urls.append(getattr(url, "full_url", url))
        raise OSError("no network in tests")

    monkeypatch.setattr(urllib.request, "urlopen", spy)
    return urls


async def test_schema_guard_never_fetches_a_remote_ref_and_fails_closed(fetched: list[Any]) -> None:
    listing = {
        "tools": [
            {"name": "lookup", "inputSchema": {"properties": {"a": {"$ref": REMOTE_REF}}}},
            {
                "name": "local",
                "inputSchema": {"$defs": {"s": {"type": "string"}}, "properties": {"a": {"$ref": "#/$defs/s"}}},
            },
        ]
    }
    host = guards.load("schema-guard")
    assert (await run_chain(host, "tools/list", "response", listing, sessionId="s1")).status == "success"
    denied = await run_chain(host, "tools/call", "request", tool_call("lookup", a="x"), sessionId="s1")
    assert denied.status == "validation_failed"
    assert messages(denied) == [
        (
            "$.params.arguments",
            f"the schema of tool 'lookup' has a $ref that cannot be resolved without fetching it: {REMOTE_REF!r}",
        )
    ]
    local = await run_chain(host, "tools/call", "request", tool_call("local", a=5), sessionId="s1")
    assert messages(local) == [("$.params.arguments.a", 'fails type "string"')]
    assert fetched == []


@pytest.mark.parametrize(
    ("guard", "config", "field"),
    [
        (
            "tool-policy",
            {"arguments": [{"schema": {"properties": {"a": {"$ref": REMOTE_REF}}}}]},
            r"config.arguments\[0\].schema",
        ),
        ("tool-policy", {"arguments": [{"schema": {"$ref": "#/defs/nope"}}]}, r"config.arguments\[0\].schema"),
        ("schema-guard", {"schemas": {"t": {"input": {"$ref": REMOTE_REF}}}}, r"config.schemas.t.input"),
    ],
)
def test_config_schema_with_an_unresolvable_ref_is_rejected_at_load(
    fetched: list[Any], guard: str, config: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValueError, match=rf"{field} has a \$ref that does not resolve inside the schema: .*#/\$defs/"):
        guards.load(guard, config)
    assert fetched == []


async def test_policy_schema_rule_with_local_refs_works(fetched: list[Any]) -> None:
    rule = {"schema": {"$defs": {"n": {"type": "integer"}}, "properties": {"a": {"$ref": "#/$defs/n"}}}}
    host = guards.load("tool-policy", {"arguments": [rule]})
    assert (await run_chain(host, "tools/call", "request", tool_call("x", a=1))).status == "success"
    assert (await run_chain(host, "tools/call", "request", tool_call("x", a="1"))).status == "validation_failed"
    assert fetched == []


# --------------------------------------------------------------------------- size-limit


async def test_size_limit_caps_bytes_and_string_length_per_event() -> None:
    host = guards.load(
        "size-limit",
        {"max_payload_bytes": 2000, "max_string_length": 500, "per_event": {"prompts/get": {"max_payload_bytes": 100}}},
    )
    too_big = await run_chain(host, "tools/call", "request", tool_call("x", a="y" * 400, b="z" * 400, c="w" * 1300))
    assert too_big.status == "validation_failed"
    assert messages(too_big) == [("$", "payload is 2180 bytes; the limit for tools/call is 2000 bytes")]
    long_string = await run_chain(host, "tools/call", "response", {"content": [{"type": "text", "text": "x" * 600}]})
    assert messages(long_string) == [("$.content[0].text", "string of 600 characters exceeds the limit of 500")]
    prompt = await run_chain(host, "prompts/get", "request", {"method": "prompts/get", "params": {"name": "p" * 100}})
    assert prompt.status == "validation_failed"


async def test_size_limit_caps_the_length_of_mapping_keys_too() -> None:
    host = guards.load("size-limit", {"max_string_length": 500})
    long_key = await run_chain(host, "tools/call", "request", tool_call("x", **{"k" * 600: 1}))
    assert long_key.status == "validation_failed"
    assert messages(long_key) == [
        (f"$.params.arguments.{'k' * 600}~", "string of 600 characters exceeds the limit of 500")
    ]


def _nested(depth: int, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = {"a": leaf}
    return leaf


async def test_size_limit_decides_on_payloads_nested_past_orjsons_depth() -> None:
    """An in-process chain's payload may nest deeper than orjson serialises (255 levels): size-limit still
    measures it, and one too deep for the interpreter is denied as such, not a failure of the guard."""
    host = guards.load("size-limit", {"max_payload_bytes": 5000})
    small = await run_chain(host, "tools/call", "request", tool_call("x", n=_nested(300, "x")))
    big = await run_chain(host, "tools/call", "request", tool_call("x", n=_nested(300, "x" * 5000)))
    abyss = await run_chain(host, "tools/call", "request", tool_call("x", n=_nested(100_000, "x")))
    assert small.status == "success"
    assert big.status == "validation_failed"
    assert messages(big)[0][1].startswith("payload is ")
    assert abyss.status == "validation_failed" and not abyss.failures
    assert messages(abyss) == [("$", "payload is nested too deep to measure")]


@pytest.mark.parametrize(
    "payload",
    [
        tool_call("x", a="y" * 500),  # exactly at the string limit
        {"content": [{"type": "text", "text": "é" * 400}]},  # 800 bytes, 400 characters
        {"numbers": list(range(200))},
    ],
)
async def test_size_limit_near_misses_pass(payload: Any) -> None:
    host = guards.load("size-limit", {"max_payload_bytes": 2000, "max_string_length": 500})
    assert (await run_chain(host, "tools/call", "request", payload)).status == "success"


@pytest.mark.parametrize(
    "payload",
    [
        {"a": "é", "b": [1, 2.5, None, True], "c": {"d": "x"}},
        {1: "int key", "s": {2.5: "float key", None: "null key"}},
        {"obj": object.__new__(type("Opaque", (), {"__str__": lambda self: "opaque"}))},
    ],
)
def test_payload_size_is_the_compact_json_size_with_or_without_non_string_keys(payload: Any) -> None:
    import orjson

    from mcp_interceptors.guards.size import payload_size

    expected = orjson.dumps(payload, default=str, option=orjson.OPT_NON_STR_KEYS)
    assert payload_size(payload) == len(expected)
