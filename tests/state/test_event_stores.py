"""The event stores of resumable streams (`state/events.py`), the same in SQLite and in a real Redis: ids, replay
after an event of its stream only, retention by count and age, refusal of what is not kept."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import anyio
import pytest
from helpers import free_tcp_port

from mcp_interceptors.protocol.errors import StateUnavailableError
from mcp_interceptors.state.events import EventStore, Retention, SqliteEvents, new_scope, parse_event_id
from mcp_interceptors.state.redis import RedisState
from mcp_interceptors.state.redis_events import RedisEvents

pytestmark = pytest.mark.anyio

SMALL = Retention(max_events_per_stream=3, max_events_per_session=5, max_age_s=60)


async def open_store(request: pytest.FixtureRequest, kind: str, retention: Retention) -> AsyncIterator[EventStore]:
    if kind == "sqlite":
        store = SqliteEvents(None, retention)
        yield store
        await store.aclose()
        return
    state = RedisState(request.getfixturevalue("redis_url"), key_prefix=f"t{uuid.uuid4().hex[:8]}:")
    try:
        yield RedisEvents(state, retention)
    finally:
        await state.aclose()


@pytest.fixture(params=["sqlite", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[EventStore]:
    async for opened in open_store(request, request.param, SMALL):
        yield opened


@pytest.fixture(params=["sqlite", "redis"])
async def short_lived(request: pytest.FixtureRequest) -> AsyncIterator[EventStore]:
    async for opened in open_store(request, request.param, Retention(max_age_s=0.3)):
        yield opened


async def test_a_replay_holds_the_later_events_of_the_same_stream_only(store: EventStore) -> None:
    scope, other = new_scope(), new_scope()
    priming = await store.append(scope, "1", None)
    first = await store.append(scope, "1", '{"n":1}')
    await store.append(scope, "2", '{"other":"stream"}')
    await store.append(other, "1", '{"other":"scope"}')
    second = await store.append(scope, "1", '{"n":2}')
    assert parse_event_id(first) is not None and len({priming, first, second}) == 3
    await store.bind(scope, "session-a", '["user","alice"]')

    replay = await store.after(priming)
    assert replay is not None
    assert (replay.scope, replay.stream) == (scope, "1")
    assert [(e.event_id, e.message) for e in replay.events] == [(first, '{"n":1}'), (second, '{"n":2}')]
    assert (replay.session, replay.owner) == ("session-a", '["user","alice"]')

    last = await store.after(second)
    assert last is not None and list(last.events) == []
    unbound = await store.after(await store.append(other, "9", None))
    assert unbound is not None and unbound.session is None


async def test_unknown_and_malformed_event_ids_name_nothing(store: EventStore) -> None:
    scope = new_scope()
    known = await store.append(scope, "1", "{}")
    number = parse_event_id(known)
    assert number is not None
    for event_id in ("", "nonsense", f"{scope}-{number[1] + 100}", f"{new_scope()}-{number[1]}", known + "x"):
        assert await store.after(event_id) is None, event_id


async def test_retention_by_count_per_stream_and_per_session(store: EventStore) -> None:
    scope = new_scope()
    ids = [await store.append(scope, "1", f'{{"n":{n}}}') for n in range(5)]
    assert await store.after(ids[0]) is None  # trimmed: a replay from it would miss events
    assert await store.after(ids[1]) is None
    kept = await store.after(ids[2])
    assert kept is not None and [e.message for e in kept.events] == ['{"n":3}', '{"n":4}']

    others = [await store.append(scope, f"s{n}", "{}") for n in range(4)]  # 3 of stream 1 + 4: past 5 per session
    assert await store.after(ids[2]) is None and await store.after(ids[3]) is None
    assert await store.after(ids[4]) is not None
    assert all([await store.after(event_id) is not None for event_id in others])


async def test_retention_by_age(short_lived: EventStore) -> None:
    scope = new_scope()
    old = await short_lived.append(scope, "1", '{"n":1}')
    with anyio.fail_after(5):
        # the age is the stores' clock (Redis's own, in Redis): nothing to wait on but time passing
        while await short_lived.after(old) is not None:  # noqa: ASYNC110
            await anyio.sleep(0.05)
    fresh = await short_lived.append(scope, "1", '{"n":2}')
    assert await short_lived.after(fresh) is not None


async def test_forget_drops_a_scope(store: EventStore) -> None:
    scope, other = new_scope(), new_scope()
    event = await store.append(scope, "1", "{}")
    kept = await store.append(other, "1", "{}")
    await store.bind(scope, "s", "null")
    await store.forget(scope)
    assert await store.after(event) is None
    assert await store.after(kept) is not None


async def test_sqlite_in_a_file_is_shared_by_reopening(tmp_path: object) -> None:
    path = str(tmp_path) + "/events.db"
    first = SqliteEvents(path)
    event = await first.append(new_scope(), "1", None)
    later = await first.append(parse_event_id(event)[0], "1", '{"n":1}')  # type: ignore[index]
    await first.aclose()
    again = SqliteEvents(path)
    replay = await again.after(event)
    await again.aclose()
    assert replay is not None and [e.event_id for e in replay.events] == [later]


async def test_an_unreachable_redis_raises_state_unavailable() -> None:
    state = RedisState(f"redis://127.0.0.1:{free_tcp_port()}/0", timeout_s=0.2)
    events = RedisEvents(state)
    try:
        with anyio.fail_after(5), pytest.raises(StateUnavailableError):
            await events.append(new_scope(), "1", None)
        with anyio.fail_after(5), pytest.raises(StateUnavailableError):
            await events.after(f"{new_scope()}-1")
    finally:
        await state.aclose()
