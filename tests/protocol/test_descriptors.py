"""The descriptor of `interceptors/list` (spec §1.6): shape, defaults, legacy input, tolerant parsing."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from mcp_interceptors.protocol.descriptors import (
    Compat,
    HookEntry,
    InterceptorDescriptor,
    PhasePriority,
    parse_descriptor,
    parse_descriptors,
    resolve_priority,
    supported_events,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
WIRE_KEYS = {"name", "type", "hooks", "version", "description", "mode", "failOpen", "priorityHint", "compat"}
WIRE_KEYS |= {"configSchema"}

# --------------------------------------------------------------------------- strategies (wire dicts)

events_st = st.sampled_from(["tools/call", "tools/list", "prompts/get", "sampling/createMessage", "*", "acme/x"])
hook_st = st.fixed_dictionaries(
    {"events": st.lists(events_st, max_size=3, unique=True), "phase": st.sampled_from(["request", "response"])}
)
int32_st = st.integers(INT32_MIN, INT32_MAX)
priority_st = st.one_of(
    int32_st,
    st.fixed_dictionaries({}, optional={"request": int32_st, "response": int32_st}),
)
version_st = st.sampled_from(["2024-11-05", "2025-06-18", "2025-11-25", "2026-07-28"])
compat_st = st.fixed_dictionaries({"minProtocol": version_st}, optional={"maxProtocol": version_st})
schema_st = st.fixed_dictionaries(
    {"type": st.just("object")},
    optional={"properties": st.just({"deny": {"type": "array"}}), "additionalProperties": st.booleans()},
)
descriptor_st = st.fixed_dictionaries(
    {
        "name": st.text(min_size=1, max_size=12),
        "type": st.sampled_from(["validation", "mutation", "sink"]),
        "hooks": st.lists(hook_st, max_size=3),
    },
    optional={
        "version": st.text(max_size=8),
        "description": st.text(max_size=20),
        "mode": st.sampled_from(["active", "audit"]),
        "failOpen": st.booleans(),
        "priorityHint": priority_st,
        "compat": compat_st,
        "configSchema": schema_st,
    },
)
unknown_key_st = st.text(min_size=1, max_size=10).filter(lambda k: k not in WIRE_KEYS and k not in {"hook", "events"})
unknown_keys_st = st.dictionaries(unknown_key_st, st.integers() | st.text(max_size=5), max_size=3)

MALFORMED: list[Any] = [
    {"name": "bad-type", "type": "observability", "hooks": []},
    {"name": "bad-mode", "type": "validation", "hooks": [], "mode": "strict"},
    {"name": "no-hooks", "type": "validation"},
    {"name": "bad-phase", "type": "validation", "hooks": [{"events": ["*"], "phase": "sideways"}]},
    {"name": "big-priority", "type": "mutation", "hooks": [], "priorityHint": 2**31},
    {"name": "float-priority", "type": "mutation", "hooks": [], "priorityHint": 1.5},
    {"name": "str-failopen", "type": "mutation", "hooks": [], "failOpen": "yes"},
    {"type": "validation", "hooks": []},
    {"name": "", "type": "validation", "hooks": []},
    {"name": "array-schema", "type": "validation", "hooks": [], "configSchema": {"type": "array"}},
    {"name": "compat-no-min", "type": "validation", "hooks": [], "compat": {"maxProtocol": "2025-11-25"}},
    "not an object",
    None,
]


# --------------------------------------------------------------------------- R12-R16: shape


def test_r12_descriptor_requires_name_type_and_hooks() -> None:
    d = parse_descriptor({"name": "n", "type": "validation", "hooks": [{"events": ["tools/call"], "phase": "request"}]})
    assert (d.name, d.type, d.hooks) == ("n", "validation", (HookEntry(events=("tools/call",), phase="request"),))
    for missing in ("name", "type", "hooks"):
        body = {"name": "n", "type": "validation", "hooks": []}
        del body[missing]
        with pytest.raises(ValidationError):
            parse_descriptor(body)


@pytest.mark.parametrize("phase", ["request", "response"])
def test_r12_hook_entries_have_one_concrete_phase(phase: str) -> None:
    d = parse_descriptor({"name": "n", "type": "mutation", "hooks": [{"events": ["*"], "phase": phase}]})
    assert [h.phase for h in d.hooks] == [phase]
    with pytest.raises(ValidationError):
        HookEntry.model_validate({"events": ["*"], "phase": "both"})  # `both` is input sugar on descriptors only


def test_r13_defaults_are_omitted_and_keys_are_camel_case() -> None:
    d = InterceptorDescriptor(name="n", type="validation", hooks=(HookEntry(events=("*",), phase="request"),))
    assert d.to_wire() == {"name": "n", "type": "validation", "hooks": [{"events": ["*"], "phase": "request"}]}
    full = InterceptorDescriptor(
        name="n",
        type="mutation",
        hooks=(),
        mode="audit",
        fail_open=True,
        priority_hint=PhasePriority(request=-5),
        compat=Compat(min_protocol="2025-06-18"),
        config_schema={"type": "object"},
    )
    assert full.to_wire() == {
        "name": "n",
        "type": "mutation",
        "hooks": [],
        "mode": "audit",
        "failOpen": True,
        "priorityHint": {"request": -5},
        "compat": {"minProtocol": "2025-06-18"},
        "configSchema": {"type": "object"},
    }


def test_r14_legacy_both_and_singular_hook_are_expanded_never_emitted() -> None:
    g2 = parse_descriptor({"name": "n", "type": "validation", "hook": {"events": ["tools/call"], "phase": "both"}})
    wire = g2.to_wire()
    assert "hook" not in wire
    assert wire["hooks"] == [
        {"events": ["tools/call"], "phase": "request"},
        {"events": ["tools/call"], "phase": "response"},
    ]
    g1 = parse_descriptor({"name": "n", "type": "validation", "events": ["prompts/get"], "phase": "response"})
    assert g1.to_wire()["hooks"] == [{"events": ["prompts/get"], "phase": "response"}]
    assert "events" not in g1.to_wire() and "phase" not in g1.to_wire()


def test_r14_phase_scoped_wildcards_normalise_to_star_or_drop() -> None:
    d = parse_descriptor(
        {
            "name": "n",
            "type": "validation",
            "hooks": [{"events": ["*/request", "*/response", "tools/call"], "phase": "request"}],
        }
    )
    assert d.hooks == (HookEntry(events=("*", "tools/call"), phase="request"),)
    both = parse_descriptor({"name": "n", "type": "validation", "hook": {"events": ["*/response"], "phase": "both"}})
    assert both.hooks == (HookEntry(events=(), phase="request"), HookEntry(events=("*",), phase="response"))


@pytest.mark.parametrize("hint", [0, -1, INT32_MIN, INT32_MAX, {"request": 5}, {"response": -5}, {}])
def test_r15_priority_hint_int32_or_per_phase_object(hint: Any) -> None:
    d = parse_descriptor({"name": "n", "type": "mutation", "hooks": [], "priorityHint": hint})
    assert parse_descriptor(d.to_wire()) == d


@pytest.mark.parametrize(
    "hint", [INT32_MAX + 1, INT32_MIN - 1, 1.5, "3", True, {"request": 2**31}, {"request": "1"}, [1]]
)
def test_r15_priority_hint_outside_int32_or_wrong_type_is_malformed(hint: Any) -> None:
    with pytest.raises(ValidationError):
        parse_descriptor({"name": "n", "type": "mutation", "hooks": [], "priorityHint": hint})


def test_r16_empty_hooks_are_accepted_and_cover_nothing() -> None:
    d = parse_descriptor({"name": "n", "type": "validation", "hooks": []})
    assert d.hooks == ()
    assert not d.covers("tools/call", "request")
    assert not d.matches_event("tools/call")
    assert d.to_wire()["hooks"] == []


def test_r4_supported_events_is_the_sorted_union_of_hook_events() -> None:
    descriptors = [
        parse_descriptor(
            {"name": "a", "type": "validation", "hooks": [{"events": ["tools/call"], "phase": "request"}]}
        ),
        parse_descriptor(
            {"name": "b", "type": "mutation", "hooks": [{"events": ["*", "prompts/get"], "phase": "both"}]}
        ),
    ]
    assert supported_events(descriptors) == ["*", "prompts/get", "tools/call"]
    assert supported_events([]) == []


def test_config_schema_must_be_an_object_schema() -> None:
    with pytest.raises(ValidationError, match="object schema"):
        parse_descriptor({"name": "n", "type": "validation", "hooks": [], "configSchema": {"type": "string"}})


# --------------------------------------------------------------------------- R29-R32: tolerant input


def test_r29_snake_case_and_camel_case_input_are_both_accepted() -> None:
    camel = {
        "name": "n",
        "type": "mutation",
        "hooks": [],
        "failOpen": True,
        "priorityHint": {"request": 1},
        "configSchema": {"type": "object"},
        "compat": {"minProtocol": "2025-06-18", "maxProtocol": "2026-07-28"},
    }
    snake = {
        "name": "n",
        "type": "mutation",
        "hooks": [],
        "fail_open": True,
        "priority_hint": {"request": 1},
        "config_schema": {"type": "object"},
        "compat": {"min_protocol": "2025-06-18", "max_protocol": "2026-07-28"},
    }
    assert parse_descriptor(camel) == parse_descriptor(snake)
    assert parse_descriptor(snake).to_wire() == camel


def test_r30_unknown_descriptor_fields_are_ignored_at_every_level() -> None:
    d = parse_descriptor(
        {
            "name": "n",
            "type": "validation",
            "hooks": [{"events": ["tools/call"], "phase": "request", "weight": 3}],
            "compat": {"minProtocol": "2025-06-18", "future": True},
            "priorityHint": {"request": 1, "sometimes": 2},
            "futureField": {"kept": True},
            "signature": "ignored",
        }
    )
    assert d.to_wire() == {
        "name": "n",
        "type": "validation",
        "hooks": [{"events": ["tools/call"], "phase": "request"}],
        "compat": {"minProtocol": "2025-06-18"},
        "priorityHint": {"request": 1},
    }


@pytest.mark.parametrize(("field", "value"), [("type", "observability"), ("type", "gate"), ("mode", "strict")])
def test_r31_unknown_type_or_mode_is_skipped_without_invalidating_the_list(field: str, value: str) -> None:
    good = [{"name": "a", "type": "validation", "hooks": []}, {"name": "c", "type": "mutation", "hooks": []}]
    bad = {"name": "b", "type": "validation", "hooks": [], field: value}
    parsed, warnings = parse_descriptors([good[0], bad, good[1]])
    assert [d.name for d in parsed] == ["a", "c"]
    assert len(warnings) == 1
    assert (warnings[0].index, warnings[0].name) == (1, "b")
    assert warnings[0].reason.startswith(field)


def test_r31_duplicate_names_and_non_arrays_are_reported_not_raised() -> None:
    listing = [{"name": "a", "type": "validation", "hooks": []}, {"name": "a", "type": "mutation", "hooks": []}]
    parsed, warnings = parse_descriptors(listing)
    assert [(d.name, d.type) for d in parsed] == [("a", "validation")]
    assert [(w.index, w.name, w.reason) for w in warnings] == [
        (1, "a", "duplicate interceptor name in one host's list")
    ]
    for not_a_list in (None, {"name": "a"}, "abc"):
        assert parse_descriptors(not_a_list) == ([], [parse_descriptors(None)[1][0]])
    assert parse_descriptors(None)[1][0].reason == "`interceptors` is not an array"


def test_r32_enforce_is_read_as_active_and_never_written() -> None:
    d = parse_descriptor({"name": "n", "type": "validation", "hooks": [], "mode": "enforce"})
    assert d.mode == "active"
    assert "mode" not in d.to_wire()
    assert "enforce" not in str(d.to_wire())
    audit = parse_descriptor({"name": "n", "type": "validation", "hooks": [], "mode": "audit"})
    assert audit.to_wire()["mode"] == "audit"


# --------------------------------------------------------------------------- R33: resolve_priority


@pytest.mark.parametrize(
    ("hint", "phase", "override", "expected"),
    [
        (None, "request", None, 0),
        (None, "response", None, 0),
        (7, "request", None, 7),
        (7, "response", None, 7),
        (PhasePriority(request=-3), "request", None, -3),
        (PhasePriority(request=-3), "response", None, 0),
        (PhasePriority(response=9), "response", None, 9),
        (PhasePriority(), "request", None, 0),
        (7, "request", 2, 2),
        (7, "request", PhasePriority(response=1), 0),
        (PhasePriority(request=-3), "request", 0, 0),
        (None, "response", PhasePriority(response=4), 4),
    ],
)
def test_r33_resolve_priority(hint: Any, phase: Any, override: Any, expected: int) -> None:
    assert resolve_priority(hint, phase, override) == expected


def test_r33_resolve_priority_takes_the_wire_object_too() -> None:
    """A plain `{request?, response?}` (the wire shape) raised AttributeError: 'dict' has no 'response'."""
    assert resolve_priority({"request": -5}, "request") == -5
    assert resolve_priority({"request": -5}, "response") == 0
    assert resolve_priority(5, "response", {"request": -1}) == 0  # the override object wins, member missing
    assert resolve_priority(None, "response", {"response": 7}) == 7


# --------------------------------------------------------------------------- R64: compat ranges


@pytest.mark.parametrize(
    ("compat", "version", "included"),
    [
        ({"minProtocol": "2025-06-18"}, "2025-06-18", True),
        ({"minProtocol": "2025-06-18"}, "2026-07-28", True),
        ({"minProtocol": "2025-06-18"}, "2024-11-05", False),
        ({"minProtocol": "2024-11-05", "maxProtocol": "2025-11-25"}, "2025-11-25", True),
        ({"minProtocol": "2024-11-05", "maxProtocol": "2025-11-25"}, "2026-07-28", False),
    ],
)
def test_r64_compat_range_includes(compat: dict[str, str], version: str, included: bool) -> None:
    assert Compat.model_validate(compat).includes(version) is included


# --------------------------------------------------------------------------- properties (hypothesis)


@given(descriptor_st)
def test_r29_property_wire_round_trip(raw: dict[str, Any]) -> None:
    d = parse_descriptor(raw)
    assert parse_descriptor(d.to_wire()) == d


@given(descriptor_st)
def test_r13_property_defaults_omitted_and_keys_camel_case(raw: dict[str, Any]) -> None:
    wire = parse_descriptor(raw).to_wire()
    assert set(wire) <= WIRE_KEYS
    assert wire.get("mode") != "active"
    assert wire.get("failOpen") is not False
    assert wire.get("priorityHint") != 0
    for key in ("version", "description", "compat", "configSchema"):
        assert (key in wire) == (key in raw)


@given(descriptor_st, unknown_keys_st)
def test_r30_property_unknown_keys_are_ignored(raw: dict[str, Any], extra: dict[str, Any]) -> None:
    assert parse_descriptor({**extra, **raw}) == parse_descriptor(raw)


@given(
    st.lists(descriptor_st, max_size=6, unique_by=lambda d: d["name"]),
    st.sampled_from(MALFORMED),
    st.integers(min_value=0),
)
def test_r31_property_one_malformed_descriptor_never_poisons_the_list(
    good: list[dict[str, Any]], bad: Any, where: int
) -> None:
    index = where % (len(good) + 1)
    listing = [*good[:index], bad, *good[index:]]
    if isinstance(bad, dict) and bad.get("name") in {g["name"] for g in good}:
        return  # a name clash would be a (different) duplicate skip
    parsed, warnings = parse_descriptors(listing)
    assert parsed == [parse_descriptor(g) for g in good]
    assert [w.index for w in warnings] == [index]
