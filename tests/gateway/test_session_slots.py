"""`SessionSlots`: the global limit, each owner's share, binding, idleness and idempotent release."""

from __future__ import annotations

import pytest

from mcp_interceptors.gateway.session_slots import SessionRefusedError, SessionSlots

ALICE = ("user", "alice")
BOB = ("user", "bob")


def test_an_owner_past_its_share_is_refused_while_others_still_get_slots() -> None:
    slots = SessionSlots(limit=3, share=2)
    held = [slots.take(ALICE, 0.0), slots.take(ALICE, 0.0)]
    with pytest.raises(SessionRefusedError) as caught:
        slots.take(ALICE, 0.0)
    share = {"reason": "too_many_sessions", "limit": 2, "setting": "http.max_sessions_per_principal"}
    assert caught.value.data == share
    slots.take(BOB, 0.0)
    with pytest.raises(SessionRefusedError) as caught:
        slots.take(None, 0.0)
    assert caught.value.data["setting"] == "http.max_sessions"
    slots.release(held[0])
    slots.release(held[0])  # idempotent
    assert (len(slots), slots.held_by(ALICE)) == (2, 1)
    slots.take(ALICE, 0.0)


def test_a_bound_slot_is_idle_only_with_nothing_in_flight_and_leaves_its_key_when_released() -> None:
    slots = SessionSlots(limit=2, share=2)
    slot = slots.take(None, 0.0)
    slots.bind(slot, "abc")
    assert slots.idle(cutoff=100.0) == []  # its opening request is still in flight
    slots.done(slot, 1.0)
    assert slots.started("abc", ALICE) is None  # another owner's request does not touch it
    assert slots.started("abc", None) is slot
    slots.done(slot, 5.0)
    assert slots.idle(cutoff=4.0) == [] and slots.idle(cutoff=6.0) == [slot]
    slots.release(slot)
    assert (len(slots), slots.by_key) == (0, {})
