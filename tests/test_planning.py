"""The pure planner and `ChainRun` (spec §5), tested as data: tables, exhaustive enumerations, properties."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from fakes import descriptor, entry
from hypothesis import given
from hypothesis import strategies as st

from mcp_interceptors.planning import (
    Batch,
    ChainRun,
    Entry,
    Outcome,
    Overrides,
    Plan,
    RunResult,
    check_overrides,
    direction_for,
    failure_blocks,
    is_blocking_verdict,
    plan_for,
    policy_for,
)
from mcp_interceptors.protocol.descriptors import HookEntry, PhasePriority
from mcp_interceptors.protocol.errors import ChainParamsError, WideningOverrideError
from mcp_interceptors.protocol.events import pattern_matches
from mcp_interceptors.protocol.results import MutationResult, ValidationMessage, ValidationResult

PAYLOAD = {"method": "tools/call", "params": {"name": "t"}}


def ok(valid: bool = True, severity: str | None = None, *messages: ValidationMessage) -> Outcome:
    return Outcome(result=ValidationResult(valid=valid, severity=severity, messages=messages or None))


def mutated(payload: Any) -> Outcome:
    return Outcome(result=MutationResult(modified=True, payload=payload))


FAILED = Outcome(code=-32603, reason="boom")

OutcomeFn = Callable[[Any], Outcome]


def simulate(
    plan: Plan, outcomes: Mapping[str, Outcome | OutcomeFn], payload: Any = PAYLOAD, **run_options: Any
) -> tuple[RunResult, list[tuple[Batch, Any]]]:
    """Drive a `ChainRun` with canned outcomes, the way the executor would (no IO)."""
    run = ChainRun(plan, payload, **run_options)
    seen: list[tuple[Batch, Any]] = []
    while (batch := run.next_batch()) is not None:
        snapshot = run.snapshot(batch)
        seen.append((batch, snapshot))
        results = []
        for step in batch.steps:
            outcome = outcomes[step.name]
            results.append(outcome(snapshot) if callable(outcome) else outcome)
        run.record(batch, results)
    return run.result(), seen


def invoked(seen: list[tuple[Batch, Any]]) -> list[str]:
    return [step.name for batch, _ in seen for step in batch.steps]


def one_plan(*descriptors: Any, direction: str = "sending", phase: str = "request", **kwargs: Any) -> Plan:
    return plan_for([entry(d) for d in descriptors], "tools/call", phase, direction, **kwargs)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- R40: direction


DIRECTION_TABLE = [
    # role, event, phase, direction (spec §5.1)
    ("client", "tools/call", "request", "sending"),
    ("client", "tools/call", "response", "receiving"),
    ("server", "tools/call", "request", "receiving"),
    ("server", "tools/call", "response", "sending"),
    ("client", "sampling/createMessage", "request", "receiving"),
    ("client", "sampling/createMessage", "response", "sending"),
    ("server", "sampling/createMessage", "request", "sending"),
    ("server", "sampling/createMessage", "response", "receiving"),
    ("client", "elicitation/create", "request", "receiving"),
    ("server", "roots/list", "response", "receiving"),
    ("client", "llm/completion", "request", "sending"),
    ("server", "llm/completion", "response", "receiving"),
    ("client", "acme/index", "request", "sending"),
    ("server", "acme/index", "request", "sending"),
]


@pytest.mark.parametrize(("role", "event", "phase", "direction"), DIRECTION_TABLE)
def test_r40_direction_from_role_and_initiator(role: Any, event: str, phase: Any, direction: str) -> None:
    assert direction_for(role, event, phase) == direction


@pytest.mark.parametrize("event", ["tools/call", "sampling/createMessage", "acme/index"])
def test_r40_direction_is_never_phase_alone(event: str) -> None:
    # the same phase gives opposite directions for the two roles of a client/server event
    for phase in ("request", "response"):
        directions = {direction_for("client", event, phase), direction_for("server", event, phase)}  # type: ignore[arg-type]
        assert len(directions) == (1 if event == "acme/index" else 2)


def test_r38_r39_pass_order_follows_direction() -> None:
    v, m = descriptor("v"), descriptor("m", "mutation")
    assert [kind for kind, _ in one_plan(v, m, direction="sending").passes] == ["mutation", "validation", "sink"]
    assert [kind for kind, _ in one_plan(v, m, direction="receiving").passes] == ["validation", "mutation", "sink"]
    assert [s.name for s in one_plan(v, m, direction="sending").steps] == ["m", "v"]
    assert [s.name for s in one_plan(v, m, direction="receiving").steps] == ["v", "m"]


# --------------------------------------------------------------------------- selection (§5.2)


def test_r16_empty_hooks_are_never_selected() -> None:
    plan = one_plan(descriptor("empty", hooks=[]), descriptor("v"))
    assert [s.name for s in plan.steps] == ["v"]


def test_selection_by_event_phase_and_name_restriction() -> None:
    req = descriptor("req", phase="request")
    resp = descriptor("resp", phase="response")
    star = descriptor("star", events=["*"], phase="request")
    other = descriptor("other", events=["prompts/get"], phase="request")
    plan = one_plan(req, resp, star, other)
    assert [s.name for s in plan.validators] == ["req", "star"]
    assert [s.name for s in one_plan(req, resp, star, names=["star"]).validators] == ["star"]


@pytest.mark.parametrize(
    ("names", "unknown"),
    [(["star_"], ["star_"]), (["req", "nope", "Req"], ["Req", "nope"]), (["other", "missing"], ["missing"])],
)
def test_r21_a_name_restriction_naming_an_interceptor_no_entry_has_fails_closed(
    names: list[str], unknown: list[str]
) -> None:
    entries = [entry(descriptor(name, phase="request")) for name in ("req", "star", "other")]
    with pytest.raises(ChainParamsError) as caught:  # used to plan only the known names, or nothing: success
        plan_for(entries, "tools/call", "request", "sending", names=names)
    assert (caught.value.code, caught.value.data) == (-32602, {"field": "interceptors", "unknown": unknown})
    assert isinstance(caught.value, ValueError)
    assert plan_for(entries, "tools/call", "response", "sending", names=["req"]).steps == ()  # known, not hooked
    assert plan_for(entries, "tools/call", "request", "sending", names=[]).steps == ()  # an explicit empty set


@pytest.mark.parametrize("event", ["*", "tools/*", "*/request", "tools/cal?"])
def test_r10_a_plan_is_for_one_concrete_event_never_a_pattern(event: str) -> None:
    star = descriptor("star", events=["*"], phase="request")
    with pytest.raises(ChainParamsError) as caught:  # `*` used to select only the `*`-hooked interceptors
        plan_for([entry(star)], event, "request", "sending")
    assert (caught.value.code, caught.value.data) == (-32602, {"field": "event", "event": event})


def test_r64_compat_excludes_and_the_switch_disables_it() -> None:
    old = descriptor("old", compat={"minProtocol": "2024-11-05", "maxProtocol": "2025-11-25"})
    new = descriptor("new", compat={"minProtocol": "2026-07-28"})
    legacy = one_plan(old, new, protocol_version="2025-11-25")
    assert [s.name for s in legacy.steps] == ["old"]
    assert [(s.name, s.reason) for s in legacy.skipped] == [("new", "compat excludes protocol 2025-11-25")]
    modern = one_plan(old, new, protocol_version="2026-07-28")
    assert [s.name for s in modern.steps] == ["new"]
    assert [s.name for s in one_plan(old, new, protocol_version="2026-07-28", enforce_compat=False).steps] == [
        "old",
        "new",
    ]
    assert [s.name for s in one_plan(old, new).steps] == ["old", "new"]  # unknown version: nothing excluded


def test_sinks_are_opt_in() -> None:
    sink = descriptor("s", "sink")
    plan = one_plan(sink)
    assert plan.steps == ()
    assert [(s.name, s.reason) for s in plan.skipped] == [("s", "sink interceptors are not enabled")]
    enabled = one_plan(sink, sinks_enabled=True)
    assert [s.name for s in enabled.sinks] == ["s"]
    assert enabled.sinks[0].policy.timeout_ms == 500.0


# --------------------------------------------------------------------------- ordering (R34-R36)


def test_r34_mutators_run_by_ascending_effective_priority() -> None:
    a = descriptor("a", "mutation", priorityHint=10)
    b = descriptor("b", "mutation", priorityHint=-10)
    c = descriptor("c", "mutation")
    d = descriptor("d", "mutation", priorityHint={"request": -20, "response": 20})
    assert [s.name for s in one_plan(a, b, c, d).mutators] == ["d", "b", "c", "a"]
    assert [s.name for s in one_plan(a, b, c, d, phase="response").mutators] == ["b", "c", "a", "d"]


def test_r35_priority_ties_break_by_code_point_then_host_order() -> None:
    names = ["b", "B", "é", "a", "Z", "ä"]
    entries = [entry(descriptor(n, "mutation")) for n in names]
    plan = plan_for(entries, "tools/call", "request", "sending")
    assert [s.name for s in plan.mutators] == sorted(names) == ["B", "Z", "a", "b", "ä", "é"]
    same = descriptor("same", "mutation")
    two_hosts = [entry(same, "second", host_order=2), entry(same, "first", host_order=1)]
    plan = plan_for(two_hosts, "tools/call", "request", "sending")
    assert [s.source for s in plan.mutators] == ["first", "second"]


def test_r34_priority_hint_is_ignored_for_validators() -> None:
    v1 = descriptor("v1", priorityHint=100)
    v2 = descriptor("v2", priorityHint=-100)
    plan = plan_for([entry(v1), entry(v2, overrides=Overrides(priority=-1000))], "tools/call", "request", "sending")
    assert [s.name for s in plan.validators] == ["v1", "v2"]  # host order, never priority


hosts_st = st.lists(
    st.lists(
        st.tuples(st.sampled_from(["validation", "mutation"]), st.integers(-3, 3), st.sampled_from(["x", "y", "z"])),
        max_size=4,
    ),
    min_size=1,
    max_size=4,
)


def _entries(hosts: list[list[tuple[str, int, str]]]) -> list[list[Entry]]:
    grouped = []
    for order, items in enumerate(hosts, start=1):
        group = []
        for index, (kind, priority, stem) in enumerate(items):
            d = descriptor(f"{stem}{index}", kind, priorityHint=priority)
            group.append(entry(d, f"host{order}", host_order=order))
        grouped.append(group)
    return grouped


@given(hosts_st, st.randoms(use_true_random=False), st.sampled_from(["sending", "receiving"]))
def test_r36_property_plan_is_independent_of_discovery_order(hosts: Any, rnd: Any, direction: Any) -> None:
    grouped = _entries(hosts)
    reference = plan_for([e for g in grouped for e in g], "tools/call", "request", direction)
    shuffled_hosts = grouped[:]
    rnd.shuffle(shuffled_hosts)  # hosts answered discovery in another order
    assert plan_for([e for g in shuffled_hosts for e in g], "tools/call", "request", direction) == reference
    everything = [e for g in grouped for e in g]
    rnd.shuffle(everything)  # even a full shuffle never changes the mutator order
    assert plan_for(everything, "tools/call", "request", direction).mutators == reference.mutators


# --------------------------------------------------------------------------- policy and overrides (R61-R63)


def test_r61_overrides_take_precedence_over_descriptor_values() -> None:
    d = descriptor("m", "mutation", mode="audit", failOpen=True, priorityHint=5)
    assert policy_for(d, None, "request") == policy_for(d, Overrides(), "request")
    base = policy_for(d, None, "request")
    assert (base.mode, base.fail_open, base.priority, base.timeout_ms) == ("audit", True, 5, None)
    o = Overrides(mode="active", fail_open=False, priority=PhasePriority(request=-7), timeout_ms=250)
    eff = policy_for(d, o, "request")
    assert (eff.mode, eff.fail_open, eff.priority, eff.timeout_ms) == ("active", False, -7, 250)
    assert policy_for(d, o, "response").priority == 0  # the override's object has no response member


def test_r61_overrides_from_mapping_accept_both_spellings_and_legacy_mode() -> None:
    camel = Overrides.from_mapping(
        {"mode": "enforce", "failOpen": True, "priorityHint": {"request": 3}, "timeoutMs": 9}
    )
    snake = Overrides.from_mapping({"mode": "active", "fail_open": True, "priority": {"request": 3}, "timeout_ms": 9})
    assert camel == snake == Overrides(mode="active", fail_open=True, priority=PhasePriority(request=3), timeout_ms=9)
    hooks = Overrides.from_mapping({"hooks": [{"events": ["tools/call"], "phase": "both"}]}).hooks
    assert hooks == (
        HookEntry(events=("tools/call",), phase="request"),
        HookEntry(events=("tools/call",), phase="response"),
    )


@pytest.mark.parametrize(
    ("declared", "override"),
    [
        ([{"events": ["tools/call"], "phase": "request"}], [{"events": ["tools/list"], "phase": "request"}]),
        ([{"events": ["tools/call"], "phase": "request"}], [{"events": ["tools/call"], "phase": "response"}]),
        ([{"events": ["tools/call"], "phase": "request"}], [{"events": ["*"], "phase": "request"}]),
        ([{"events": ["tools/*"], "phase": "request"}], [{"events": ["prompts/get"], "phase": "request"}]),
    ],
)
def test_r62_widening_hook_override_is_rejected(declared: Any, override: Any) -> None:
    d = descriptor("v", hooks=declared)
    with pytest.raises(WideningOverrideError) as caught:
        check_overrides(d, Overrides(hooks=tuple(HookEntry.model_validate(h) for h in override)))
    assert caught.value.data["interceptor"] == "v"
    assert isinstance(caught.value, ValueError)


def test_r63_narrowed_hooks_exclude_the_interceptor_elsewhere() -> None:
    d = descriptor("v", events=["*"], phase="both")
    narrow = Overrides(hooks=(HookEntry(events=("tools/call",), phase="response"),))
    check_overrides(d, narrow)  # narrowing is fine
    e = entry(d, overrides=narrow)
    assert [s.name for s in plan_for([e], "tools/call", "response", "receiving").steps] == ["v"]
    assert plan_for([e], "tools/call", "request", "sending").steps == ()
    assert plan_for([e], "prompts/get", "response", "receiving").steps == ()


hook_override_st = st.lists(
    st.fixed_dictionaries(
        {
            "events": st.lists(st.sampled_from(["*", "tools/call", "tools/*", "prompts/get", "acme/x"]), max_size=3),
            "phase": st.sampled_from(["request", "response"]),
        }
    ),
    max_size=3,
)
UNIVERSE = ["tools/call", "tools/list", "prompts/get", "sampling/createMessage", "acme/x", "acme/y"]


@given(hook_override_st, hook_override_st)
def test_r62_property_an_accepted_override_never_widens(declared: Any, override: Any) -> None:
    d = descriptor("v", hooks=declared)
    o = Overrides(hooks=tuple(HookEntry.model_validate(h) for h in override))
    try:
        check_overrides(d, o)
    except WideningOverrideError:
        return
    for event, phase in itertools.product(UNIVERSE, ("request", "response")):
        if any(h.covers(event, phase) for h in o.hooks or ()):
            assert d.covers(event, phase), (event, phase)


# --------------------------------------------------------------------------- R44-R54: validator block/allow table

VALIDATOR_RESULTS = [
    ("valid", valid, severity) for valid in (True, False) for severity in (None, "info", "warn", "error", "critical")
] + [("failure", None, None)]


def spec_blocks(kind: str, valid: bool | None, severity: str | None, mode: str, fail_open: bool) -> bool:
    """Spec §5.5, written out independently of the implementation."""
    if kind == "failure":
        return mode == "active" and not fail_open
    if valid or mode == "audit":
        return False
    return severity not in ("warn", "info")


@pytest.mark.parametrize(
    ("kind", "valid", "severity", "mode", "fail_open"),
    [(*r, mode, fo) for r in VALIDATOR_RESULTS for mode in ("active", "audit") for fo in (False, True)],
)
def test_r44_to_r54_validator_block_allow_table_exhaustive(
    kind: str, valid: bool | None, severity: str | None, mode: str, fail_open: bool
) -> None:
    plan = one_plan(descriptor("v", mode=mode, failOpen=fail_open), direction="receiving")
    outcome = FAILED if kind == "failure" else ok(bool(valid), severity)
    result, _ = simulate(plan, {"v": outcome})
    blocks = spec_blocks(kind, valid, severity, mode, fail_open)
    assert result.allowed is not blocks
    if blocks:
        assert result.status == "validation_failed"
        assert result.aborted_at is not None and result.aborted_at.interceptor == "v"
        assert result.aborted_at.type == "validation"
        assert result.final_payload is None
    else:
        assert result.final_payload == PAYLOAD
        assert result.aborted_at is None
    if kind == "failure":
        assert result.results == []
        assert [(f.interceptor, f.code, f.reason) for f in result.failures] == [("v", -32603, "boom")]
    else:
        assert [r.mode for r in result.results] == [("audit" if mode == "audit" else None)]


@pytest.mark.parametrize("severity", ["error", None, "critical"])
def test_r54_explicit_rejection_blocks_even_when_fail_open(severity: str | None) -> None:
    plan = one_plan(descriptor("v", failOpen=True))
    result, _ = simulate(plan, {"v": ok(False, severity)})
    assert result.status == "validation_failed"


def test_r46_severity_rule_py_consults_messages_only_when_severity_omitted() -> None:
    warn_only = ok(False, None, ValidationMessage(message="w", severity="warn"))
    with_error = ok(False, None, ValidationMessage(message="e", severity="error"))
    plan = one_plan(descriptor("v"))
    assert simulate(plan, {"v": warn_only})[0].status == "validation_failed"  # G5 default
    assert simulate(plan, {"v": warn_only}, severity_rule="py")[0].status == "success"
    assert simulate(plan, {"v": with_error}, severity_rule="py")[0].status == "validation_failed"
    explicit = ok(False, "warn", ValidationMessage(message="e", severity="error"))
    assert simulate(plan, {"v": explicit}, severity_rule="py")[0].status == "success"  # top-level wins


@pytest.mark.parametrize(
    ("valid", "severity", "blocks"),
    [(True, "error", False), (False, "warn", False), (False, "info", False), (False, None, True), (False, "x", True)],
)
def test_r48_is_blocking_verdict(valid: bool, severity: str | None, blocks: bool) -> None:
    assert is_blocking_verdict(ValidationResult(valid=valid, severity=severity)) is blocks


@pytest.mark.parametrize(
    ("mode", "fail_open", "blocks"),
    [("active", False, True), ("active", True, False), ("audit", False, False), ("audit", True, False)],
)
def test_r51_r52_r53_failure_blocks(mode: Any, fail_open: bool, blocks: bool) -> None:
    plan = one_plan(descriptor("v", mode=mode, failOpen=fail_open))
    assert failure_blocks(plan.validators[0].policy) is blocks


# --------------------------------------------------------------------------- mutation table (§5.3)

MUTATION_OUTCOMES = ["modified", "unmodified", "failure"]


@pytest.mark.parametrize(
    ("kind", "mode", "fail_open"),
    list(itertools.product(MUTATION_OUTCOMES, ("active", "audit"), (False, True))),
)
def test_r50_r52_r55_mutation_table_exhaustive(kind: str, mode: str, fail_open: bool) -> None:
    plan = one_plan(
        descriptor("first", "mutation", priorityHint=-1),
        descriptor("m", "mutation", mode=mode, failOpen=fail_open),
        descriptor("last", "mutation", priorityHint=1),
    )
    outcomes: dict[str, Any] = {
        "first": lambda p: mutated({**p, "first": True}),
        "m": {
            "modified": lambda p: mutated({**p, "m": True}),
            "unmodified": lambda p: Outcome(result=MutationResult(modified=False, payload=p)),
            "failure": lambda p: FAILED,
        }[kind],
        "last": lambda p: mutated({**p, "seen_by_last": sorted(p)}),
    }
    result, seen = simulate(plan, outcomes)
    aborts = kind == "failure" and mode == "active" and not fail_open
    if aborts:
        assert result.status == "mutation_failed"
        assert result.final_payload is None  # R55: nothing tentative reaches the operation
        assert result.aborted_at is not None
        assert (result.aborted_at.interceptor, result.aborted_at.type) == ("m", "mutation")
        assert invoked(seen) == ["first", "m"]
        return
    applied = kind == "modified" and mode == "active"
    expected_keys = ["first", "method", "params", *(["m"] if applied else [])]
    assert result.status == "success"
    assert result.final_payload == {
        **PAYLOAD,
        "first": True,
        **({"m": True} if applied else {}),
        "seen_by_last": sorted(expected_keys),  # R37/R50: last sees exactly the applied changes
    }


def test_r37_each_mutator_sees_the_previous_active_output() -> None:
    plan = one_plan(*(descriptor(n, "mutation", priorityHint=i) for i, n in enumerate("abc")))
    result, seen = simulate(
        plan, {n: (lambda p, n=n: mutated({**p, "trail": [*p.get("trail", []), n]})) for n in "abc"}
    )
    assert [snapshot.get("trail", []) for _, snapshot in seen] == [[], ["a"], ["a", "b"]]
    assert result.final_payload["trail"] == ["a", "b", "c"]


@pytest.mark.parametrize(
    "outcome",
    [
        Outcome(result=MutationResult(modified=False, payload={"changed": True})),
        Outcome(result=ValidationResult(valid=True)),
    ],
)
def test_r58_malformed_mutation_result_is_a_failure_and_never_applied(outcome: Outcome) -> None:
    plan = one_plan(descriptor("m", "mutation", failOpen=True), descriptor("v"))
    result, _ = simulate(plan, {"m": outcome, "v": ok()})
    assert result.status == "success"
    assert result.final_payload == PAYLOAD
    assert [f.interceptor for f in result.failures] == ["m"]
    closed, _ = simulate(one_plan(descriptor("m", "mutation")), {"m": outcome})
    assert closed.status == "mutation_failed"


@pytest.mark.parametrize("claimed", [{"n": True, "x": [0]}, {"n": 1, "x": [False]}])
def test_r58_unmodified_claim_is_checked_as_json_not_python_equality(claimed: Any) -> None:
    """Python says `True == 1` and `False == 0`; JSON does not: such a payload changed (and is never applied)."""
    plan = one_plan(descriptor("m", "mutation", failOpen=True))
    payload = {"n": 1, "x": [0]}
    outcome = Outcome(result=MutationResult(modified=False, payload=claimed))
    result, _ = simulate(plan, {"m": outcome}, payload)
    assert result.final_payload == payload and type(result.final_payload["n"]) is int
    assert [(f.interceptor, f.reason) for f in result.failures] == [
        ("m", "modified is false but the payload differs from the input")
    ]
    unchanged = Outcome(result=MutationResult(modified=False, payload={"n": 1.0, "x": [0]}))
    same, _ = simulate(plan, {"m": unchanged}, payload)
    assert same.failures == []  # 1 and 1.0 are one JSON number


def test_r58_validator_returning_a_mutation_result_is_a_failure() -> None:
    plan = one_plan(descriptor("v"))
    result, _ = simulate(plan, {"v": mutated({"evil": True})})
    assert result.status == "validation_failed"
    assert result.failures[0].reason == "expected a validation result, got type 'mutation'"
    assert result.final_payload is None


# --------------------------------------------------------------------------- gating (R56, R57) and R68


def test_r56_sending_mutation_abort_skips_active_validators_audit_sees_pass_input() -> None:
    plan = one_plan(
        descriptor("m1", "mutation", priorityHint=-1),
        descriptor("m2", "mutation"),
        descriptor("v-active"),
        descriptor("v-audit", mode="audit"),
        direction="sending",
    )
    outcomes: dict[str, Any] = {"m1": lambda p: mutated({**p, "tentative": 1}), "m2": FAILED, "v-audit": ok()}
    result, seen = simulate(plan, outcomes)
    assert invoked(seen) == ["m1", "m2", "v-audit"]
    observer_batch, snapshot = seen[-1]
    assert observer_batch.observe and snapshot == PAYLOAD  # discarded changes are never observable
    assert result.status == "mutation_failed"
    assert [(r.type, r.mode) for r in result.results] == [("mutation", None), ("validation", "audit")]
    assert [f.interceptor for f in result.failures] == ["m2"]


def test_r57_receiving_validation_block_skips_active_mutators() -> None:
    plan = one_plan(
        descriptor("v", mode="active"),
        descriptor("m-active", "mutation"),
        descriptor("m-audit", "mutation", mode="audit"),
        direction="receiving",
    )
    outcomes: dict[str, Any] = {"v": ok(False, "error"), "m-audit": lambda p: mutated({**p, "shadow": 1})}
    result, seen = simulate(plan, outcomes)
    assert invoked(seen) == ["v", "m-audit"]
    assert seen[-1][0].observe and seen[-1][1] == PAYLOAD
    assert result.status == "validation_failed"
    assert [r.mode for r in result.results] == [None, "audit"]


def test_r68_first_blocking_validator_in_plan_order_is_aborted_at() -> None:
    plan = one_plan(descriptor("a"), descriptor("b"), descriptor("c"), direction="receiving")
    result, seen = simulate(plan, {"a": ok(), "b": FAILED, "c": ok(False, "error")})
    assert len(seen) == 1 and invoked(seen) == ["a", "b", "c"]  # R42: one parallel batch, all invoked
    assert result.aborted_at is not None
    assert (result.aborted_at.interceptor, result.aborted_at.reason) == ("b", "invocation failed: boom")
    assert [r.valid for r in result.results if isinstance(r, ValidationResult)] == [True, False]
    assert result.validation_summary.errors == 1


step_st = st.tuples(
    st.sampled_from(["validation", "mutation"]),
    st.sampled_from(["active", "audit"]),
    st.booleans(),
    st.sampled_from(["allow", "deny", "fail"]),
)


@given(st.lists(step_st, min_size=1, max_size=6), st.sampled_from(["sending", "receiving"]))
def test_r56_r57_property_a_blocked_pass_never_invokes_the_next_active_pass(steps: Any, direction: Any) -> None:
    descriptors, outcomes = [], {}
    for i, (kind, mode, fail_open, what) in enumerate(steps):
        name = f"{kind[0]}{i}"
        descriptors.append(descriptor(name, kind, mode=mode, failOpen=fail_open))
        if what == "fail":
            outcomes[name] = FAILED
        elif kind == "validation":
            outcomes[name] = ok(what == "allow", "error")
        else:
            outcomes[name] = (lambda p, n=name: mutated({**p, n: 1})) if what == "allow" else unchanged_outcome
    plan = one_plan(*descriptors, direction=direction)
    result, seen = simulate(plan, outcomes)
    blocked_at = next((i for i, (batch, _) in enumerate(seen) if _blocks_after(plan, outcomes, seen[: i + 1])), None)
    if blocked_at is None:
        assert result.allowed
        return
    first_kind = seen[blocked_at][0].kind
    for batch, _ in seen[blocked_at + 1 :]:
        if batch.kind != first_kind:
            assert batch.observe and all(not step.active for step in batch.steps)
    assert not result.allowed


def unchanged_outcome(p: Any) -> Outcome:
    return Outcome(result=MutationResult(modified=False, payload=p))


def _blocks_after(plan: Plan, outcomes: Mapping[str, Any], prefix: list[tuple[Batch, Any]]) -> bool:
    run = ChainRun(plan, PAYLOAD)
    for batch, snapshot in prefix:
        got = run.next_batch()
        assert got == batch
        run.record(batch, [o(snapshot) if callable(o) else o for o in (outcomes[s.name] for s in batch.steps)])
    return run.blocked


def test_plan_describe_rows() -> None:
    plan = one_plan(descriptor("v", mode="audit"), descriptor("m", "mutation", priorityHint=3, failOpen=True))
    assert plan.describe() == [
        {"interceptor": "m", "source": "fake", "type": "mutation", "mode": "active", "failOpen": True, "priority": 3,
         "timeoutMs": None},
        {"interceptor": "v", "source": "fake", "type": "validation", "mode": "audit", "failOpen": False,
         "priority": None, "timeoutMs": None},
    ]  # fmt: skip


def test_star_hook_matches_any_event_in_plans() -> None:
    star = descriptor("star", events=["*"], phase="request")
    for event in ("tools/call", "acme/x", "sampling/createMessage"):
        assert pattern_matches("*", event)
        assert [s.name for s in plan_for([entry(star)], event, "request", "sending").steps] == ["star"]
    assert plan_for([entry(star)], "initialize", "request", "sending").steps == ()


@pytest.mark.parametrize("severity", ["warn", "info"])
@pytest.mark.parametrize("rule", ["g5", "py"])
def test_r45_warn_or_info_verdict_never_blocks(severity: str, rule: Any) -> None:
    loud = ok(False, severity, ValidationMessage(message="m", severity="error"))
    result, _ = simulate(one_plan(descriptor("v")), {"v": loud}, severity_rule=rule)
    assert result.status == "success"
    assert result.final_payload == PAYLOAD
    assert result.validation_summary.errors == 1  # still counted in the summary


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"mode": "actve"}, "override mode must be 'active' or 'audit', got 'actve'"),
        ({"failOpen": "false"}, "override failOpen must be true or false, got 'false'"),
        ({"timeoutMs": 0}, "override timeoutMs must be a finite number of milliseconds > 0, got 0"),
        ({"timeout_ms": True}, "override timeoutMs must be a finite number of milliseconds > 0, got True"),
        ({"timeoutMs": float("nan")}, "override timeoutMs must be a finite number of milliseconds > 0, got nan"),
        ({"timeoutMs": float("inf")}, "override timeoutMs must be a finite number of milliseconds > 0, got inf"),
        ({"priority": "high"}, "override priority must be a 32-bit integer or {request?, response?}, got 'high'"),
        (
            {"priorityHint": 2**31},
            "override priority must be a 32-bit integer or {request?, response?}, got 2147483648",
        ),
        ({"fail_opn": True}, "unknown override key(s) ['fail_opn']"),
        ({"priorityHint": {"req": 5}}, "override priority keys must be 'request' and/or 'response', got ['req']"),
        ({"priority": {"request": 1, "Response": 2}}, "override priority keys must be 'request' and/or 'response'"),
    ],
)
def test_r61_override_typos_fail_closed(raw: dict[str, Any], message: str) -> None:
    # regression: a misspelt mode made an active validator audit-only (never blocking), and a string
    # failOpen "false" was truthy, i.e. fail-open; a NaN timeoutMs failed every execute() (not the
    # configuration) and a priority outside int32, which a descriptor may not carry, was used as is
    with pytest.raises(ValueError) as caught:
        Overrides.from_mapping(raw)
    assert str(caught.value).startswith(message)
