"""The guards of one chain run share what they derive from a payload (`executor.memo`): its compact JSON once per
payload object, and the clean-text filters of `secrets` and `pii` searched as one regex once the plan has seen
them asked together. Every verdict must be what each guard gives on its own: the same chain is run with the
memo switched off, and the outcomes compared, on payloads holding what the filters must not miss.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import anyio.lowlevel
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_whole_text_prefilter import AWS, PLAIN, TRICKY, json_values, rows

from mcp_interceptors import Chain, InterceptorHost, Invocation, guards
from mcp_interceptors.executor import memo as run_memo
from mcp_interceptors.guards import _walk, _whole_text
from mcp_interceptors.guards._detectors._engine import re2

pytestmark = pytest.mark.anyio

CONFIGS: dict[str, dict[str, dict[str, Any]]] = {
    "redact": {"secrets": {}, "pii": {}, "size-limit": {}},
    "deny": {"secrets": {"action": "deny"}, "pii": {"action": "deny"}, "size-limit": {}},
}


@contextmanager
def memo_off() -> Iterator[None]:
    """Every guard as it runs outside a chain: no memo, no notes."""
    originals = (_walk.memo_for, _whole_text.memo_for, _whole_text.plan_notes)
    _walk.memo_for = _whole_text.memo_for = lambda payload: None  # type: ignore[assignment]
    _whole_text.plan_notes = lambda: None  # type: ignore[assignment]
    try:
        yield
    finally:
        _walk.memo_for, _whole_text.memo_for, _whole_text.plan_notes = originals


def chain_of(config: dict[str, dict[str, Any]], *, suspending: bool = False) -> Chain:
    chain = Chain(role="server")
    for name, guard_config in config.items():
        chain.add_local(guards.load(name, guard_config))
    if suspending:  # a validator that awaits: the validators run in a task group, not in one loop
        host = InterceptorHost("awaits")

        @host.validator("awaits", events=["tools/call"], phase="both")
        async def awaits(inv: Invocation) -> bool:
            await anyio.lowlevel.checkpoint()
            return True

        chain.add_local(host)
    return chain


def outcome(result: Any) -> tuple[Any, ...]:
    answers = []
    for answer in result.results:
        wire = answer.to_wire()
        wire.pop("durationMs", None)
        answers.append(wire)
    return result.status, result.final_payload, result.aborted_at, answers


async def assert_same_as_each_guard_alone(payload: Any, *, suspending: bool = False) -> None:
    for config in CONFIGS.values():
        chain = chain_of(config, suspending=suspending)
        for phase in ("request", "response"):  # a server validates a request first, mutates a response first
            shared = [outcome(await chain.execute("tools/call", phase, payload)) for _ in range(3)]  # learns, merges
            with memo_off():
                alone = outcome(await chain.execute("tools/call", phase, payload))
            assert shared == [alone] * 3


def spy_serialisations(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    made: list[Any] = []
    original = _walk._compact_json

    def counting(payload: Any) -> bytes | None:
        made.append(payload)
        return original(payload)

    monkeypatch.setattr(_walk, "_compact_json", counting)
    return made


async def test_a_chain_run_serialises_a_payload_once_for_all_its_guards(monkeypatch: pytest.MonkeyPatch) -> None:
    made = spy_serialisations(monkeypatch)
    chain = chain_of(CONFIGS["redact"])
    payload = rows()
    for runs in (1, 2):
        result = await chain.execute("tools/call", "request", payload)
        assert result.allowed and result.final_payload is payload
        assert len(made) == runs  # one per run: the memo does not outlive its run
    assert run_memo.memo_for(payload) is None


async def test_a_mutated_payload_is_a_new_object_and_serialised_again(monkeypatch: pytest.MonkeyPatch) -> None:
    payload = rows(f"the key {AWS} here")
    original = len(orjson.dumps(payload))
    # The redacted payload is longer than the limit, the one sent is not: size-limit must measure the new one
    # (a server's response chain redacts, then validates).
    chain = chain_of({"secrets": {}, "size-limit": {"max_payload_bytes": original + 1}})
    made = spy_serialisations(monkeypatch)
    result = await chain.execute("tools/call", "response", payload)
    assert result.status == "validation_failed"
    assert result.aborted_at is not None and result.aborted_at.interceptor == "size-limit"
    assert len(made) == 2 and made[0] is payload and made[1] is not payload


async def test_the_plan_learns_which_filters_are_asked_together() -> None:
    if re2 is None:
        pytest.skip("the clean-text filters need google-re2")
    chain = chain_of(CONFIGS["redact"])
    await chain.execute("tools/call", "request", rows())
    notes = chain.plan("tools/call", "request").prepared[2]
    asked = notes[_whole_text._ASKED]
    assert len(asked) == 2  # secrets' filter, then pii's
    await chain.execute("tools/call", "request", rows(f"key {AWS}"))
    assert notes[_whole_text._ASKED] == asked


@pytest.mark.parametrize("at", [0, 30, 59])
@pytest.mark.parametrize("value", [*TRICKY, *PLAIN], ids=lambda v: repr(v)[:40])
async def test_each_guard_rules_as_it_does_alone(value: Any, at: int) -> None:
    await assert_same_as_each_guard_alone(rows(value, at=at))


@pytest.mark.parametrize("value", [TRICKY[0], TRICKY[1], TRICKY[2], PLAIN[1]], ids=repr)
async def test_each_guard_rules_as_it_does_alone_when_validators_run_in_parallel(value: Any) -> None:
    await assert_same_as_each_guard_alone(rows(value), suspending=True)


async def test_two_values_one_for_each_scanner_are_both_found() -> None:
    payload = rows("mail jane.roe@example.org now", at=5)
    payload["params"]["arguments"]["rows"][50]["note"] = f"key {AWS} here"
    await assert_same_as_each_guard_alone(payload)
    payload["params"]["arguments"]["rows"][2]["note"] = f"key {AWS} here"
    await assert_same_as_each_guard_alone(payload)


@settings(max_examples=60, deadline=None)
@given(st.lists(json_values, min_size=1, max_size=4), st.integers(0, 59))
def test_each_guard_rules_as_it_does_alone_on_any_payload(values: list[Any], at: int) -> None:
    payload = rows(values, at=at)
    payload["params"]["arguments"]["more"] = values
    anyio.run(assert_same_as_each_guard_alone, payload)


async def test_a_run_inside_a_run_has_a_memo_of_its_own() -> None:
    inner = chain_of({"size-limit": {}})
    seen: list[Any] = []
    host = InterceptorHost("outer")

    @host.validator("outer", events=["tools/call"], phase="request")
    async def outer(inv: Invocation) -> bool:
        mine = run_memo.memo_for(inv.payload)
        assert mine is not None
        mine["mark"] = True
        result = await inner.execute("tools/call", "request", inv.payload)
        seen.append(run_memo.memo_for(inv.payload))
        return result.allowed

    chain = Chain(role="server")
    chain.add_local(host)
    payload = rows()
    assert (await chain.execute("tools/call", "request", payload)).allowed
    assert seen == [{"mark": True}]  # back in the outer run's memo, untouched by the inner run
