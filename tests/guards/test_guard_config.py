"""Every guard loads by name, advertises its config schema, description, default mode and priorities,
rejects a bad config with a ValueError naming the field, and keeps bounded state."""

from __future__ import annotations

from typing import Any

import pytest
from guard_support import run_chain, tool_call

from mcp_interceptors import PhasePriority, guards
from mcp_interceptors.guards import rate_limit
from mcp_interceptors.guards._config import GuardSchema, SettingsCache
from mcp_interceptors.guards._state import SessionState, TtlMap
from mcp_interceptors.protocol.errors import InvalidParamsError

ALL_GUARDS = list(guards.GUARD_MODULES)
#: guard -> (bad config, text the error must contain)
BAD_CONFIGS: dict[str, tuple[dict[str, Any], str]] = {
    "secrets": ({"kinds": ["aws_access_key", "nope"]}, "config.kinds[1]"),
    "pii": ({"kind_actions": {"email": "shred"}}, "config.kind_actions.email"),
    "exfiltration-guard": ({"min_length": 2}, "config.min_length"),
    "tool-policy": ({"arguments": [{"tool": "x", "cel": "args."}]}, "config.arguments[0].cel does not compile"),
    "schema-guard": ({"unknown_tools": "maybe"}, "config.unknown_tools"),
    "prompt-injection": ({"block_threshold": 2}, "config.block_threshold"),
    "rate-limit": ({"limits": [{"limit": "lots"}]}, "config.limits[0].limit 'lots' is not a rate limit"),
    "sampling-guard": ({"max_tokens": 0}, "config.max_tokens"),
    "elicitation-guard": ({"deny_categories": ["shoe_size"]}, "config.deny_categories[0]"),
    "roots-guard": ({"allowed": "file:///x"}, "config.allowed"),
    "size-limit": ({"per_event": {"tools/call": {"max_bytes": 1}}}, 'config.per_event["tools/call"]'),
    "tool-pinning": ({"pins": {"echo": "not-a-digest"}}, "config.pins.echo"),
    "audit-log": ({"path": 3}, "config.path"),
    "approval": ({"rules": [{"tool": 3}]}, "config.rules[0].tool"),
}
EXPECTED_INTERCEPTORS = {
    "secrets": [("secrets", "mutation")],
    "pii": [("pii", "mutation")],
    "exfiltration-guard": [("exfiltration-guard", "validation")],
    "tool-policy": [("tool-policy", "validation"), ("tool-policy-listing", "mutation")],
    "schema-guard": [("schema-guard", "validation")],
    "prompt-injection": [("prompt-injection", "validation")],
    "rate-limit": [("rate-limit", "validation")],
    "sampling-guard": [("sampling-guard", "validation"), ("sampling-guard-clamp", "mutation")],
    "elicitation-guard": [("elicitation-guard", "validation")],
    "roots-guard": [("roots-guard", "mutation")],
    "size-limit": [("size-limit", "validation")],
    "tool-pinning": [("tool-pinning", "validation")],
    "audit-log": [("audit-log", "sink")],
    "approval": [("approval", "validation")],
}


def test_every_registered_guard_is_available() -> None:
    assert guards.available() == ALL_GUARDS


@pytest.mark.parametrize("name", ALL_GUARDS)
def test_default_build_descriptors(name: str) -> None:
    host = guards.load(name)
    assert [(d.name, d.type) for d in host.descriptors] == EXPECTED_INTERCEPTORS[name]
    for descriptor in host.descriptors:
        assert descriptor.description
        assert descriptor.mode == "active"
        assert descriptor.fail_open is (descriptor.type == "sink")  # fail-closed, audit-log fail-open
        schema = descriptor.config_schema
        assert schema is not None and schema["type"] == "object" and schema["additionalProperties"] is False


@pytest.mark.parametrize("name", ALL_GUARDS)
def test_bad_config_names_the_field(name: str) -> None:
    config, expected = BAD_CONFIGS[name]
    with pytest.raises(ValueError) as caught:
        guards.load(name, config)
    assert str(caught.value).startswith(f"guard {name!r}: ")
    assert expected in str(caught.value)


@pytest.mark.parametrize(
    ("name", "config", "field"),
    [
        ("secrets", {"events": ["tools/cal"]}, "config.events[0]"),
        ("pii", {"events": ["tools/call", "prompt/get"]}, "config.events[1]"),
        ("rate-limit", {"events": ["tools/cal"]}, "config.events[0]"),
        ("rate-limit", {"limits": [{"limit": "1/second", "events": ["*"]}]}, "config.limits[0].events[0]"),
        ("audit-log", {"events": ["tools/cal"]}, "config.events[0]"),
        ("size-limit", {"events": ["tool/call"]}, "config.events[0]"),
        ("size-limit", {"per_event": {"tools/cal": {"max_payload_bytes": 5}}}, "config.per_event"),
    ],
)
def test_an_event_the_spec_does_not_define_is_rejected(name: str, config: dict[str, Any], field: str) -> None:
    # A typo would match nothing and silently disable the guard; the error names the field and the valid events.
    with pytest.raises(ValueError) as caught:
        guards.load(name, config)
    assert str(caught.value).startswith(f"guard {name!r}: {field}: ")
    assert "is not one of [" in str(caught.value) and "'tools/call'" in str(caught.value)


@pytest.mark.parametrize(
    ("name", "config"),
    [
        ("secrets", {"events": ["*"]}),
        ("audit-log", {"events": ["tools/call", "roots/list", "llm/completion"]}),
        ("size-limit", {"per_event": {"resources/templates/list": {"max_payload_bytes": 5}}}),
        ("rate-limit", {"limits": [{"limit": "1/second", "events": ["prompts/get"]}]}),
    ],
)
def test_events_the_spec_defines_load(name: str, config: dict[str, Any]) -> None:
    guards.load(name, config)


@pytest.mark.parametrize("name", ALL_GUARDS)
def test_unknown_config_key_is_rejected(name: str) -> None:
    with pytest.raises(ValueError, match=r"config: Additional properties are not allowed \('tyop' was unexpected\)"):
        guards.load(name, {"tyop": 1})


@pytest.mark.parametrize("config", [[], "", "max_bytes=5", [("max_bytes", 5)], 0])
def test_a_config_that_is_not_a_mapping_is_rejected_naming_the_guard(config: Any) -> None:
    # regression: `[]` and `""` loaded as no config at all, `"max_bytes=5"` raised dict()'s
    # "dictionary update sequence element #0 has length 1; 2 is required", naming nothing
    with pytest.raises(ValueError, match=r"guard 'size-limit': config must be a mapping \(an object\), got "):
        guards.load("size-limit", config)


def test_unknown_guard() -> None:
    with pytest.raises(ValueError, match="unknown guard 'nope'; available: secrets, pii"):
        guards.load("nope")


@pytest.mark.parametrize(
    ("name", "config", "priorities"),
    [
        ("secrets", {}, {"secrets": {"request": -50_000, "response": 50_000}}),
        ("pii", {}, {"pii": {"request": -50_000, "response": 50_000}}),
        ("tool-policy", {}, {"tool-policy-listing": {"response": -20_000}}),
        ("sampling-guard", {}, {"sampling-guard-clamp": {"request": -5_000}}),
        ("roots-guard", {}, {"roots-guard": {"response": -30_000}}),
        ("tool-pinning", {"action": "drop"}, {"tool-pinning": {"response": -25_000}}),
    ],
)
def test_mutator_priorities_sit_in_the_spec_bands(name: str, config: dict[str, Any], priorities: Any) -> None:
    host = guards.load(name, config)
    found = {
        d.name: d.priority_hint.to_wire()
        for d in host.descriptors
        if d.type == "mutation" and isinstance(d.priority_hint, PhasePriority)
    }
    assert found == priorities


def test_build_only_keys_are_not_advertised() -> None:
    host = guards.load("secrets", {"action": "deny"})
    advertised = host.descriptors[0].config_schema
    assert advertised is not None
    assert "action" not in advertised["properties"] and "events" not in advertised["properties"]
    assert "kinds" in advertised["properties"]


@pytest.mark.anyio
async def test_invocation_config_overrides_the_build_config_and_is_checked() -> None:
    host = guards.load("size-limit", {"max_payload_bytes": 10_000})
    payload = tool_call("echo", text="x" * 200)
    assert (await run_chain(host, "tools/call", "request", payload)).status == "success"
    tight = {"size-limit": {"max_payload_bytes": 100}}
    assert (await run_chain(host, "tools/call", "request", payload, config=tight)).status == "validation_failed"
    bad = {"size-limit": {"max_payload_bytes": "small"}}
    result = await run_chain(host, "tools/call", "request", payload, config=bad)
    assert result.status == "validation_failed"
    assert result.failures[0].code == -32602


def test_settings_cache_compiles_each_override_once_and_stays_bounded() -> None:
    compiled: list[dict[str, Any]] = []
    schema = GuardSchema({"n": {"type": "integer", "default": 1}})

    def compile_settings(raw: Any) -> int:
        compiled.append(dict(raw))
        if raw["n"] < 0:
            raise ValueError("n must not be negative")
        return int(raw["n"])

    cache = SettingsCache("g", schema, {}, compile_settings, max_entries=2)
    assert cache.for_config({}) == 1
    assert cache.for_config({"n": 2}) == 2 and cache.for_config({"n": 2}) == 2
    assert compiled == [{"n": 1}, {"n": 2}]
    cache.for_config({"n": 3})
    cache.for_config({"n": 4})  # evicts n=2
    cache.for_config({"n": 2})
    assert len(compiled) == 5
    with pytest.raises(InvalidParamsError, match="config for 'g' is invalid: n must not be negative"):
        cache.for_config({"n": -1})


def test_r23_an_override_the_guard_refuses_when_compiling_names_the_field() -> None:
    # The schema allows any string for a limit; the guard refuses 'lots'. The error's data has the
    # same keys as a configSchema violation, so an invoker can tell which field to fix.
    cache = SettingsCache("rate-limit", rate_limit.SCHEMA, {}, rate_limit._compile)
    with pytest.raises(InvalidParamsError) as caught:
        cache.for_config({"limits": [{"limit": "lots"}]})
    assert caught.value.code == -32602
    assert caught.value.data == {
        "name": "rate-limit",
        "interceptor": "rate-limit",
        "field": "config.limits[0].limit",
        "reason": "config.limits[0].limit 'lots' is not a rate limit of at least 1 call; write e.g. '10/minute' "
        "(to refuse a tool outright, use tool-policy)",
    }


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_ttl_map_bounds_size_and_time() -> None:
    clock = FakeClock()
    items: TtlMap[str, int] = TtlMap(max_items=2, ttl_s=10, clock=clock)
    items.set("a", 1)
    items.set("b", 2)
    items.set("c", 3)  # evicts the least recently used
    assert "a" not in items and items.get("b") == 2
    clock.now = 5
    assert items.get("b") == 2  # use refreshes
    clock.now = 12
    assert items.get("c") is None and items.get("b") == 2
    clock.now = 30
    assert len(items) == 0


def test_ttl_map_expires_entries_after_pops_emptying_and_refills() -> None:
    """Expiry skips its scan while the oldest use is within the TTL: that bound must follow pops and refills."""
    clock = FakeClock()
    items: TtlMap[str, int] = TtlMap(max_items=10, ttl_s=10, clock=clock)
    items.set("a", 1)
    clock.now = 8
    items.set("b", 2)
    assert items.pop("a") == 1
    clock.now = 15
    assert items.get("b") == 2  # used at 15 now
    clock.now = 26
    assert items.get("b") is None and len(items) == 0  # idle 11 s
    items.set("c", 3)  # refilled at 26
    clock.now = 31
    assert items.get("c") == 3
    clock.now = 41
    assert items.get("c") == 3  # used at 31: idle exactly the TTL
    clock.now = 51.5
    assert "c" not in items


def test_session_state_keys_by_session_with_an_anonymous_fallback() -> None:
    clock = FakeClock()
    state: SessionState[list[str]] = SessionState(list, max_sessions=2, ttl_s=60, clock=clock)
    state.get("s1").append("x")
    assert state.get("s1") == ["x"] and state.get("s2") == []
    state.get(None).append("anon")
    assert state.get(None) == ["anon"] and state.peek("s1") is None  # the cap evicted s1
    clock.now = 100
    assert state.peek(None) is None and len(state) == 0
