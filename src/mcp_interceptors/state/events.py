"""Event stores for resumable streams: every message the gateway sends on a handshake-era session's SSE stream is
kept, with an event id, so a client that lost the stream can ask for what followed the last event it saw
(`Last-Event-ID`). `SqliteEvents` keeps them in one process (in memory, or in a file); `RedisEvents`
(`state/redis_events.py`) in a Redis that replicas share, so another replica can replay them.

Events belong to a *scope* (one session: a random key the front draws) and a *stream* (mcp's: a request's id,
or the session's GET stream). An event id is `<scope>-<sequence>`. Retention is bounded three ways: events per
stream, events per scope, and age; the oldest go first, so while the event a client names is kept, so is every
later one of its stream. A replay from an event no longer kept (or never issued) is refused, never partial.
"""

from __future__ import annotations

import re
import sqlite3
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

#: `<32 hex digits>-<decimal sequence>`: anything else names no event.
_EVENT_ID = re.compile(r"([0-9a-f]{32})-([0-9]{1,18})")


@dataclass(frozen=True)
class Retention:
    """How much a store keeps: per stream, per scope (session), and for how long (seconds)."""

    max_events_per_stream: int = 1000
    max_events_per_session: int = 10_000
    max_age_s: float = 600.0


@dataclass(frozen=True)
class StoredEvent:
    event_id: str
    #: The JSON-RPC message's JSON text; None for a priming event (an id with no message).
    message: str | None


@dataclass(frozen=True)
class Replay:
    """What followed an event on its stream, and whose session that stream is (None: not bound)."""

    scope: str
    stream: str
    events: Sequence[StoredEvent]
    session: str | None
    owner: str | None


class EventStore(Protocol):
    """Events by scope and stream; every method may raise `StateUnavailableError` (a shared store)."""

    async def append(self, scope: str, stream: str, message: str | None) -> str:
        """Keep `message` (None: a priming event) and return its new event id."""
        ...

    async def after(self, event_id: str) -> Replay | None:
        """The later events of `event_id`'s stream, oldest first; None when that event is not kept (unknown,
        expired or trimmed), so that nothing missed can go unnoticed."""
        ...

    async def bind(self, scope: str, session: str, owner: str) -> None:
        """Record which session (and principal) `scope` serves, for a replay to be checked against."""
        ...

    async def forget(self, scope: str) -> None:
        """Drop every event of `scope` (its session ended): none can be replayed."""
        ...

    async def aclose(self) -> None: ...


def new_scope() -> str:
    return uuid.uuid4().hex


def parse_event_id(event_id: str) -> tuple[str, int] | None:
    """(scope, sequence) of a well-formed event id, else None."""
    found = _EVENT_ID.fullmatch(event_id)
    return (found.group(1), int(found.group(2))) if found else None


_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    scope TEXT NOT NULL,
    stream TEXT NOT NULL,
    at REAL NOT NULL,
    message TEXT
);
CREATE INDEX IF NOT EXISTS events_by_stream ON events (scope, stream, seq);
CREATE INDEX IF NOT EXISTS events_by_age ON events (at);
CREATE TABLE IF NOT EXISTS scopes (scope TEXT PRIMARY KEY, session TEXT NOT NULL, owner TEXT NOT NULL);
"""
#: How often (seconds) appends also drop what aged out; a replay checks the age of what it returns anyway.
_PURGE_EVERY_S = 1.0


class SqliteEvents:
    """The event store of one process: SQLite in memory (`path` None) or in a file. Each statement is a short
    local read or write, run on the event loop: a thread hop would cost more than the statement."""

    def __init__(
        self, path: str | None = None, retention: Retention | None = None, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.retention = retention or Retention()
        self._clock = clock
        self._db = sqlite3.connect(path or ":memory:", isolation_level=None, check_same_thread=False)
        if path is not None:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=OFF")  # events outlive no process: durability buys nothing
        self._db.executescript(_SCHEMA)
        self._purged_at = 0.0

    async def append(self, scope: str, stream: str, message: str | None) -> str:
        now = self._clock()
        db, keep = self._db, self.retention
        seq = db.execute(
            "INSERT INTO events (scope, stream, at, message) VALUES (?, ?, ?, ?)", (scope, stream, now, message)
        ).lastrowid
        for where, args, limit in (
            ("scope = ? AND stream = ?", (scope, stream), keep.max_events_per_stream),
            ("scope = ?", (scope,), keep.max_events_per_session),
        ):
            edge = db.execute(
                f"SELECT seq FROM events WHERE {where} ORDER BY seq DESC LIMIT 1 OFFSET ?",
                (*args, limit),
            ).fetchone()
            if edge is not None:
                db.execute(f"DELETE FROM events WHERE {where} AND seq <= ?", (*args, edge[0]))
        if now - self._purged_at >= _PURGE_EVERY_S:
            self._purged_at = now
            db.execute("DELETE FROM events WHERE at < ?", (now - keep.max_age_s,))
            db.execute("DELETE FROM scopes WHERE scope NOT IN (SELECT DISTINCT scope FROM events)")
        return f"{scope}-{seq}"

    async def after(self, event_id: str) -> Replay | None:
        parsed = parse_event_id(event_id)
        if parsed is None:
            return None
        scope, seq = parsed
        cutoff = self._clock() - self.retention.max_age_s
        found = self._db.execute(
            "SELECT stream FROM events WHERE seq = ? AND scope = ? AND at >= ?", (seq, scope, cutoff)
        ).fetchone()
        if found is None:
            return None
        stream = found[0]
        rows = self._db.execute(
            "SELECT seq, message FROM events WHERE scope = ? AND stream = ? AND seq > ? AND at >= ? ORDER BY seq",
            (scope, stream, seq, cutoff),
        ).fetchall()
        bound = self._db.execute("SELECT session, owner FROM scopes WHERE scope = ?", (scope,)).fetchone()
        events = [StoredEvent(f"{scope}-{later}", message) for later, message in rows]
        return Replay(scope, stream, events, bound[0] if bound else None, bound[1] if bound else None)

    async def bind(self, scope: str, session: str, owner: str) -> None:
        row = (scope, session, owner)
        self._db.execute("INSERT OR REPLACE INTO scopes (scope, session, owner) VALUES (?, ?, ?)", row)

    async def forget(self, scope: str) -> None:
        self._db.execute("DELETE FROM events WHERE scope = ?", (scope,))
        self._db.execute("DELETE FROM scopes WHERE scope = ?", (scope,))

    async def aclose(self) -> None:
        self._db.close()
