"""Pure record building: canonical JSON, hashes, diffs, drift, entries and compound receipts."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import datetime
from typing import Any

import orjson
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_interceptors.audit import CanonicalizationError, DecisionInput, apply_json_diff, canonical_json, json_diff
from mcp_interceptors.audit.records import (
    GENESIS_HASH,
    MAX_TARGET_CHARS,
    CallEnd,
    body_for,
    drift_for,
    entry_for,
    hash_of,
    payload_hash,
    prepare_entry,
    receipt_for,
    seal_record,
)

_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=30,
)


# -- canonical JSON --------------------------------------------------------------------------------


@settings(max_examples=400)
@given(json_values)
def test_canonical_json_matches_the_rfc8785_package(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


@settings(max_examples=2000)
@given(st.floats(allow_nan=False, allow_infinity=False) | st.floats(min_value=1e-5, max_value=1e17))
def test_canonical_numbers_match_the_rfc8785_package(number: float) -> None:
    assert canonical_json(number) == rfc8785.dumps(number)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"b": 1, "a": 2}, b'{"a":2,"b":1}'),
        (
            [1e-4, 1234567890123456.0, 1e16, 123456789.125, 0.1, 3.0],
            b"[0.0001,1234567890123456,10000000000000000,123456789.125,0.1,3]",
        ),
        ({"\ue000": 1, "\U0001f600": 2}, '{"\U0001f600":2,"\ue000":1}'.encode()),  # UTF-16 order
        ([1.0, 1e21, 1.5e-7, -0.0], b"[1,1e+21,1.5e-7,0]"),
        ({"n": 2**60 + 1}, b'{"n":1152921504606847000}'),  # beyond 2**53: an IEEE double, as RFC 8785 says
        ((1, "x"), b'[1,"x"]'),
        ("é\n\u2028", '"é\\n\u2028"'.encode()),
    ],
)
def test_canonical_json_table(value: Any, expected: bytes) -> None:
    assert canonical_json(value) == expected


@pytest.mark.parametrize("value", [float("nan"), float("inf"), {1: "x"}, {"a": object()}, b"bytes"])
def test_canonical_json_rejects_non_json(value: Any) -> None:
    with pytest.raises(CanonicalizationError):
        canonical_json(value)


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (10**400, None),
        ({"params": {"arguments": {"x": [1, -(10**400)]}}}, "params.arguments.x.1"),
        ({"\U0001f600": {"n": 2**1024}}, "\U0001f600.n"),  # the slow path (keys past U+FFFF) too
        ({"a": [float("nan")]}, "a.0"),
    ],
)
def test_canonical_json_names_the_value_without_a_form(value: Any, field: str | None) -> None:
    # An integer past the largest double has no IEEE form (JavaScript reads it as Infinity): it is
    # refused like NaN, with the path to it, never an OverflowError.
    with pytest.raises(CanonicalizationError) as caught:
        canonical_json(value)
    assert caught.value.field == field


@given(st.dictionaries(st.text(max_size=6), json_values, max_size=8))
def test_payload_hash_is_stable_under_key_order(value: dict[str, Any]) -> None:
    reordered = dict(reversed(list(value.items())))
    assert payload_hash(reordered) == payload_hash(value)
    assert payload_hash(value) == hashlib.sha256(rfc8785.dumps(value)).hexdigest()


def test_payload_hash_distinguishes_true_from_one_and_ignores_int_float() -> None:
    assert payload_hash({"a": 1}) == payload_hash({"a": 1.0})
    assert payload_hash({"a": 1}) != payload_hash({"a": True})
    assert payload_hash(None) is None


# -- JSON diff -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after", "ops"),
    [
        ({"a": 1}, {"a": 1}, []),
        ({"a": 1}, {"a": 2}, [{"op": "replace", "path": "/a", "value": 2}]),
        ({"a": 1, "b": 2}, {"a": 1}, [{"op": "remove", "path": "/b"}]),
        ({}, {"x/y~z": 1}, [{"op": "add", "path": "/x~1y~0z", "value": 1}]),
        (
            {"t": "key=AKIA0000EXAMPLE"},
            {"t": "key=[SECRET]"},
            [{"op": "replace", "path": "/t", "value": "key=[SECRET]"}],
        ),
        ([1, 2, 3], [1, 9, 2, 3], [{"op": "add", "path": "/1", "value": 9}]),
        ([1, 2, 3, 4], [1, 4], [{"op": "remove", "path": "/2"}, {"op": "remove", "path": "/1"}]),
        ({"a": [1, {"b": 1}]}, {"a": [1, {"b": 2}]}, [{"op": "replace", "path": "/a/1/b", "value": 2}]),
        ({"a": 1}, {"a": True}, [{"op": "replace", "path": "/a", "value": True}]),
        ({"a": 1}, {"a": 1.0}, []),
        ({"a": 1}, [1], [{"op": "replace", "path": "", "value": [1]}]),
    ],
)
def test_json_diff_table(before: Any, after: Any, ops: list[dict[str, Any]]) -> None:
    assert json_diff(before, after) == ops
    assert canonical_json(apply_json_diff(before, ops)) == canonical_json(after)


@settings(max_examples=300)
@given(json_values, json_values)
def test_applying_the_diff_gives_the_after_payload(before: Any, after: Any) -> None:
    assert canonical_json(apply_json_diff(before, json_diff(before, after))) == canonical_json(after)


def test_diff_never_carries_removed_or_replaced_values() -> None:
    ops = json_diff({"secret": "AKIA0000EXAMPLE", "k": ["AKIA1"]}, {"k": ["[SECRET]"]})
    assert "AKIA" not in orjson.dumps(ops).decode()


# -- decision bodies -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("intent", "executed", "drift"),
    [("a" * 64, "a" * 64, False), ("a" * 64, "b" * 64, True), (None, "a" * 64, None), ("a" * 64, None, None)],
)
def test_drift_for(intent: str | None, executed: str | None, drift: bool | None) -> None:
    assert drift_for(intent, executed) is drift


def test_body_records_hashes_and_drift(make_decision: Callable[..., DecisionInput]) -> None:
    approved = {"method": "tools/call", "params": {"arguments": {"text": "[SECRET]"}}}
    sent = {"method": "tools/call", "params": {"arguments": {"text": "AKIA0000EXAMPLE"}}}
    body = body_for(make_decision(intent_payload=approved, executed_payload=sent))
    assert body["intent_hash"] == payload_hash(approved)
    assert body["executed_hash"] == payload_hash(sent)
    assert body["drift"] is True
    assert body["time"] == "2026-09-01T10:00:00.000000Z"
    same = body_for(make_decision(intent_payload=approved, executed_payload=dict(approved)))
    assert same["drift"] is False


def test_body_names_its_target_and_null_without_one(make_decision: Callable[..., DecisionInput]) -> None:
    assert body_for(make_decision(target="post_note"))["target"] == "post_note"
    listing = body_for(make_decision(event="tools/list", intent_payload=None, executed_payload=None))
    assert "target" in listing and listing["target"] is None


def test_a_target_keeps_no_text_a_mutation_removed_and_is_cut_when_long(
    make_decision: Callable[..., DecisionInput],
) -> None:
    token = "tok_9f8e7d6c5b4a"
    uri = f"https://files.example/report?token={token}"
    before = {"method": "resources/read", "params": {"uri": uri}}
    after = {"method": "resources/read", "params": {"uri": "https://files.example/report?token=[REDACTED]"}}
    scrub = {"name": "secrets", "type": "mutation", "mode": "active", "modified": True}
    leg = make_decision(
        event="resources/read",
        target=uri,
        interceptors=[{**scrub, "payload_before": before, "payload_after": after}],
        intent_payload=after,
        executed_payload=after,
    )
    assert body_for(leg)["target"] == "https://files.example/report?token=[withheld]"
    later = make_decision(event="resources/read", phase="response", target=uri, redacted=[token])
    assert token not in body_for(later)["target"]
    long = body_for(make_decision(target="t" * 5000))["target"]
    assert len(long) == MAX_TARGET_CHARS and long.endswith("…")


def test_denial_body_has_no_payload_hashes(make_decision: Callable[..., DecisionInput]) -> None:
    body = body_for(
        make_decision(decision="deny", status="validation_failed", intent_payload=None, executed_payload=None)
    )
    assert (body["intent_hash"], body["executed_hash"], body["drift"]) == (None, None, None)


def test_mutator_entry_stores_a_diff_not_payloads() -> None:
    entry = entry_for(
        {
            "name": "secret-scrubber",
            "type": "mutation",
            "mode": "active",
            "modified": True,
            "duration_ms": 3.1,
            "payload_before": {"text": "key=AKIA0000EXAMPLE"},
            "payload_after": {"text": "key=[SECRET]"},
            "info": {"raw": "AKIA0000EXAMPLE"},
        }
    )
    assert entry == {
        "name": "secret-scrubber",
        "type": "mutation",
        "mode": "active",
        "modified": True,
        "duration_ms": 3.1,
        "diff": [{"op": "replace", "path": "/text", "value": "key=[SECRET]"}],
    }


def test_ready_diff_is_kept() -> None:
    ops = [{"op": "remove", "path": "/x"}]
    assert entry_for({"name": "m", "type": "mutation", "diff": ops})["diff"] == ops


@pytest.mark.parametrize(
    ("phase", "decision", "call_id", "opens", "closes"),
    [
        ("request", "allow", "c", True, False),
        ("request", "deny", "c", False, True),
        ("request", "error", "c", False, True),
        ("response", "allow", "c", False, True),
        ("response", "deny", "c", False, True),
        ("request", "allow", None, False, False),
        ("response", "allow", None, False, False),
    ],
)
def test_which_records_open_and_close_a_call(
    make_decision: Callable[..., DecisionInput],
    phase: str,
    decision: str,
    call_id: str | None,
    opens: bool,
    closes: bool,
) -> None:
    status = "success" if decision == "allow" else "validation_failed"
    entry = prepare_entry(make_decision(phase=phase, decision=decision, status=status, call_id=call_id))
    assert (entry.opens_call, entry.closes_call) == (opens, closes)


@pytest.mark.parametrize(
    ("field", "value"), [("phase", "both"), ("direction", "up"), ("decision", "maybe"), ("status", "ok")]
)
def test_decision_input_rejects_unknown_words(
    make_decision: Callable[..., DecisionInput], field: str, value: str
) -> None:
    with pytest.raises(ValueError, match=field):
        make_decision(**{field: value})


def test_decision_input_requires_an_aware_timestamp(make_decision: Callable[..., DecisionInput]) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        make_decision(timestamp=datetime(2026, 9, 1, 10, 0))


# -- sealing -------------------------------------------------------------------------------------------


def _fake_sign(digest: bytes) -> str:
    return "sig:" + digest.hex()[:8]


def test_sealed_record_hash_is_the_canonical_hash_of_its_content(make_decision: Callable[..., DecisionInput]) -> None:
    entry = prepare_entry(make_decision())
    sealed = seal_record(
        kind="decision", segment_id="s", seq=1, prev_hash=GENESIS_HASH, key_id="k", body=entry.body, sign=_fake_sign
    )
    stored = orjson.loads(sealed.json)
    assert stored["id"] == sealed.id == "s-1"
    assert stored["prev_hash"] == GENESIS_HASH
    assert hash_of(stored) == sealed.hash == stored["hash"]
    assert stored["signature"] == _fake_sign(bytes.fromhex(sealed.hash))
    stored["body"]["decision"] = "deny"
    assert hash_of(stored) != sealed.hash


def test_compound_receipt_binds_both_records_and_times() -> None:
    request = CallEnd(id="s-1", hash="1" * 64, time="2026-09-01T10:00:00.000000Z")
    response = CallEnd(id="s-2", hash="2" * 64, time="2026-09-01T10:00:01.000000Z")
    receipt = receipt_for(call_id="c-1", request=request, response=response, closing_id="s-2", key_id="k")
    document = receipt.to_dict()
    assert document["request"] == {"id": "s-1", "hash": "1" * 64, "time": "2026-09-01T10:00:00.000000Z"}
    assert document["response"]["hash"] == "2" * 64
    assert hash_of(document) == receipt.hash
    later = receipt_for(
        call_id="c-1",
        request=request,
        response=CallEnd(id="s-2", hash="2" * 64, time="2026-09-01T10:00:02.000000Z"),
        closing_id="s-2",
        key_id="k",
    )
    assert later.hash != receipt.hash
