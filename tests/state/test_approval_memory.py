"""Remembered approvals in the state store: a yes kept through one replica's store is recalled through another's
sharing the same real Redis, until its time is up; an unreachable Redis never grants (the person is asked
again) and never fails the call a person approved."""

from __future__ import annotations

import uuid

import anyio
import pytest
from helpers import free_tcp_port

from mcp_interceptors.gateway.approvals.memory import Remembered, StateApprovals
from mcp_interceptors.state import open_state

pytestmark = pytest.mark.anyio

YES = Remembered("2026-12-03T07:00:00.000Z", {"asked": "client", "answer": "accept", "content": {"confirm": "yes"}})


async def test_a_yes_remembered_through_one_replica_is_recalled_through_another(redis_url: str) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    first, second = open_state(redis_url, key_prefix=prefix), open_state(redis_url, key_prefix=prefix)
    try:
        one, other = StateApprovals(first), StateApprovals(second)
        key = "principal:user:alice|approval|payments:pay"
        assert await other.recall(key) is None
        await one.remember(key, YES, 1.0)
        assert await other.recall(key) == YES
        assert await other.recall("principal:user:bob|approval|payments:pay") is None  # another principal's
        with anyio.fail_after(5):  # Redis expires it after its second
            while True:
                if await other.recall(key) is None:
                    break
                await anyio.sleep(0.05)
    finally:
        await first.aclose()
        await second.aclose()


async def test_a_value_that_is_no_approval_is_not_one(redis_url: str) -> None:
    state = open_state(redis_url, key_prefix=f"t{uuid.uuid4().hex[:8]}:")
    try:
        await state.put("approval:k", "yes", "not json", ttl_s=60)
        await state.put("approval:j", "yes", '{"approved_at": "x"}', ttl_s=60)
        memory = StateApprovals(state)
        assert await memory.recall("k") is None
        assert await memory.recall("j") is None
    finally:
        await state.aclose()


async def test_an_unreachable_redis_never_grants_and_never_fails_the_approved_call() -> None:
    state = open_state(f"redis://127.0.0.1:{free_tcp_port()}/0", timeout_s=0.5)
    try:
        memory = StateApprovals(state)
        with anyio.fail_after(10):
            await memory.remember("session:s|approval|wipe:delete_all", YES, 60)  # logged, not raised
            assert await memory.recall("session:s|approval|wipe:delete_all") is None
    finally:
        await state.aclose()
