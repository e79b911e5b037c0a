"""What a record keeps of a chain's payloads: no text a mutation removed, no value the final payload lost."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_interceptors.audit import DecisionInput
from mcp_interceptors.audit._withhold import WITHHELD, Masker, kept_text, matched_spans, removed_from
from mcp_interceptors.audit.records import body_for

KEY = "AKIA" + "Z7QH4XK2M9PL3TWB"
MAIL = "ana@example.com"
RAW = f"deploy with key {KEY}, ping {MAIL}"
NO_KEY = RAW.replace(KEY, "[REDACTED:aws_access_key]")
NO_MAIL = RAW.replace(MAIL, "[REDACTED:email]")
CLEAN = NO_KEY.replace(MAIL, "[REDACTED:email]")


def payload(text: str) -> dict[str, Any]:
    return {"method": "tools/call", "params": {"name": "save_note", "arguments": {"text": text}}}


def mutation(name: str, before: str, after: str, *, mode: str = "active") -> dict[str, Any]:
    return {
        "name": name,
        "type": "mutation",
        "mode": mode,
        "modified": before != after,
        "payload_before": payload(before),
        "payload_after": payload(after),
    }


def stored(body: dict[str, Any]) -> str:
    return orjson.dumps(body).decode()


@pytest.mark.parametrize(
    ("chain", "final"),
    [
        ([("pii", RAW, NO_MAIL), ("secrets", NO_MAIL, CLEAN)], CLEAN),
        ([("secrets", RAW, NO_KEY), ("pii", NO_KEY, CLEAN)], CLEAN),
    ],
    ids=["pii-then-secrets", "secrets-then-pii"],
)
def test_no_mutation_keeps_what_a_later_one_removed(
    make_decision: Callable[..., DecisionInput], chain: list[tuple[str, str, str]], final: str
) -> None:
    entries = [mutation(name, before, after) for name, before, after in chain]
    body = body_for(make_decision(interceptors=entries, intent_payload=payload(final), executed_payload=payload(final)))
    assert KEY not in stored(body) and MAIL not in stored(body)
    # each diff still shows what its guard did, and the last one the final text whole
    first, last = (entry["diff"][0]["value"] for entry in body["interceptors"])
    assert "[REDACTED:" in first and WITHHELD in first
    assert last == final


def test_a_shadow_mutation_shows_what_it_would_write_and_its_finding_is_withheld_everywhere(
    make_decision: Callable[..., DecisionInput],
) -> None:
    entries = [mutation("secrets", RAW, NO_KEY, mode="audit"), mutation("pii", RAW, NO_MAIL)]
    entries.append(
        {"name": "lint", "type": "validation", "valid": False, "messages": [{"message": f"saw {KEY}", "path": "$"}]}
    )
    body = body_for(make_decision(interceptors=entries, intent_payload=payload(NO_MAIL)))
    text = stored(body)
    assert KEY not in text
    shadow, active, lint = body["interceptors"]
    # the shadow's own placeholder stays; the e-mail pii removed does not come back through it
    assert shadow["diff"][0]["value"] == f"deploy with key [REDACTED:aws_access_key], ping {WITHHELD}"
    assert active["diff"][0]["value"] == f"deploy with key {WITHHELD}, ping [REDACTED:email]"
    assert lint["messages"] == [{"message": f"saw {WITHHELD}", "path": "$"}]


def test_a_denied_leg_keeps_its_mutations_operations_but_no_values(make_decision: Callable[..., DecisionInput]) -> None:
    entries = [
        mutation("pii", RAW, NO_MAIL),
        {"name": "secrets", "type": "validation", "valid": False, "messages": [{"message": "secret found"}]},
    ]
    decision = make_decision(
        interceptors=entries, decision="deny", status="validation_failed", intent_payload=None, executed_payload=None
    )
    body = body_for(decision)
    assert KEY not in stored(body) and MAIL not in stored(body)
    assert body["interceptors"][0]["diff"] == [{"op": "replace", "path": "/params/arguments/text", "value": WITHHELD}]


def test_text_removed_in_an_earlier_leg_is_withheld_from_errors_and_messages(
    make_decision: Callable[..., DecisionInput],
) -> None:
    lint = {"name": "lint", "type": "validation", "valid": True, "messages": [{"message": f"echoes {KEY}"}]}
    decision = make_decision(
        phase="response",
        decision="error",
        status="upstream_error",
        redacted=[KEY],
        interceptors=[lint],
        error={"code": -32000, "message": f"upstream says: bad key {KEY}"},
    )
    body = body_for(decision)
    assert KEY not in stored(body)
    assert body["error"] == {"code": -32000, "message": f"upstream says: bad key {WITHHELD}"}
    assert body["interceptors"][0]["messages"] == [{"message": f"echoes {WITHHELD}"}]


def test_a_removed_key_is_withheld_from_paths(make_decision: Callable[..., DecisionInput]) -> None:
    before = {"method": "tools/call", "params": {"arguments": {KEY: 1, "x": 2}}}
    after = {"method": "tools/call", "params": {"arguments": {"x": 2}}}
    entries = [{"name": "keys", "type": "mutation", "modified": True, "payload_before": before, "payload_after": after}]
    body = body_for(make_decision(interceptors=entries, intent_payload=after))
    assert KEY not in stored(body)
    assert body["interceptors"][0]["diff"] == [{"op": "remove", "path": f"/params/arguments/{WITHHELD}"}]


def test_a_value_a_later_mutation_changed_again_is_withheld(make_decision: Callable[..., DecisionInput]) -> None:
    def with_pin(pin: Any) -> dict[str, Any]:
        return {"method": "tools/call", "params": {"arguments": {"pin": pin}}}

    def step(name: str, before: int, after: int) -> dict[str, Any]:
        return {
            "name": name,
            "type": "mutation",
            "modified": True,
            "payload_before": with_pin(before),
            "payload_after": with_pin(after),
        }

    entries = [step("a", 0, 4821), step("b", 4821, -1)]
    body = body_for(make_decision(interceptors=entries, intent_payload=with_pin(-1)))
    assert "4821" not in stored(body)
    assert [entry["diff"][0]["value"] for entry in body["interceptors"]] == [WITHHELD, -1]


def test_nothing_changes_for_a_chain_whose_mutations_changed_nothing(
    make_decision: Callable[..., DecisionInput],
) -> None:
    messages = [{"message": "quotes ana@example.com"}]
    entries = [mutation("pii", CLEAN, CLEAN), {"name": "v", "type": "validation", "valid": True, "messages": messages}]
    body = body_for(make_decision(interceptors=entries))
    assert body["interceptors"][1]["messages"] == messages
    assert "diff" not in body["interceptors"][0] or body["interceptors"][0]["diff"] == []


@pytest.mark.parametrize(
    ("before", "after", "removed"),
    [
        ("emails a@x.com, b@y.com ok", "emails [R], [R] ok", {"a@x.com", "b@y.com"}),
        ("连接ana@example.com谢谢", "连接[REDACTED:email]谢谢", {"ana@example.com"}),
        ("card 4111111111111234", "card 411111111111XXXX", {"1234"}),
        ("a  b", "a b", set()),  # whitespace alone is never withheld
    ],
)
def test_removed_runs(before: str, after: str, removed: set[str]) -> None:
    found: set[str] = set()
    removed_from(before, after, found)
    assert found == removed


def test_long_texts_are_aligned_by_their_words() -> None:
    before = " ".join(f"w{index % 997}" for index in range(20_000))  # 100 kB
    after = before.replace(" w13 ", " [R] ")
    found: set[str] = set()
    removed_from(before, after, found)
    assert found == {"w13"}
    assert kept_text(before, after).count(WITHHELD) == before.count(" w13 ")


def test_texts_too_long_to_align_withhold_all_between_the_first_and_last_change() -> None:
    before = " ".join(f"w{index % 997}" for index in range(60_000))  # 300 kB
    after = before.replace(" w13 ", " [R] ")
    found: set[str] = set()
    removed_from(before, after, found)
    assert found == {"w13"}
    kept = kept_text(before, after)
    assert kept.startswith("w0 w1 w2 ") and kept.endswith(" w179") and kept.count(WITHHELD) == 1


def test_short_removed_text_is_withheld_as_a_word_only() -> None:
    masker = Masker({"ab", KEY})
    assert masker.text(f"ab cab {KEY}x") == f"{WITHHELD} cab {WITHHELD}x"


_texts = st.text(alphabet=st.sampled_from("ab c,.@\u00e9\u4e2dXY"), max_size=40)
#: Letters the texts above never hold: a secret made of them is found nowhere else.
_secrets = st.text(alphabet=st.sampled_from("QWERTUIOP"), min_size=6, max_size=20)


@settings(max_examples=300)
@given(_texts, _texts)
def test_matched_spans_are_shared_text_in_order(a: str, b: str) -> None:
    at_a = at_b = 0
    for i, j, n in matched_spans(a, b):
        assert n > 0 and i >= at_a and j >= at_b
        assert a[i : i + n] == b[j : j + n]
        at_a, at_b = i + n, j + n


@settings(max_examples=300)
@given(_texts, _texts, _secrets, _texts)
def test_a_secret_the_final_text_lacks_is_never_kept_and_always_found_removed(
    head: str, tail: str, secret: str, final: str
) -> None:
    text = head + secret + tail
    assert not any(ch in kept_text(text, final) for ch in secret)
    found: set[str] = set()
    removed_from(text, final, found)
    assert any(secret in piece for piece in found)
    assert kept_text(text, text) == text
