"""Bounded guard state: a map that forgets entries idle past a time-to-live and evicts the least recently
used beyond a size cap, and per-session state built on it (keyed by the invocation's `sessionId`).

Guards are long-lived and see untrusted traffic, so nothing they remember may grow without bound. Where
forgetting would let something through (a tainted value), the map is filled with `add`, which refuses a new
key when full instead of evicting one, and the guard fails closed on the refusal.

Not `cachetools.TTLCache`: measured 5-7x slower per lookup (~9 µs against ~1.5 µs for a session's state,
which every invocation of a stateful guard looks up), for the same bounds.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

#: The state key for invocations that carry no `sessionId`: they share one anonymous session.
ANONYMOUS = "<anonymous>"

__all__ = ["ANONYMOUS", "SessionState", "TtlMap"]


class TtlMap(Generic[K, V]):
    """A mapping bounded in size (`set` evicts the least recently used; `add` refuses instead) and time
    (entries idle longer than `ttl_s` expire)."""

    def __init__(self, *, max_items: int, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_items = max_items
        self.ttl_s = ttl_s
        self._clock = clock
        self._items: OrderedDict[K, tuple[float, V]] = OrderedDict()
        #: No entry was last used before this (the clock never steps back, so a use only raises a stamp):
        #: while it is within the TTL, nothing can have expired.
        self._floor = math.inf

    def _expire(self, now: float) -> None:
        if now - self._floor <= self.ttl_s:  # the common case, without looking at any entry
            return
        # Entries are ordered by last use, so expired ones are at the front.
        items = self._items
        while items:
            key, (stamp, _) = next(iter(items.items()))
            if now - stamp <= self.ttl_s:
                self._floor = stamp
                return
            del items[key]
        self._floor = math.inf

    def get(self, key: K) -> V | None:
        now = self._clock()
        self._expire(now)
        entry = self._items.get(key)
        if entry is None:
            return None
        self._items[key] = (now, entry[1])
        self._items.move_to_end(key)
        return entry[1]

    def set(self, key: K, value: V) -> None:
        now = self._clock()
        self._expire(now)
        if now < self._floor:  # the map was empty
            self._floor = now
        self._items[key] = (now, value)
        self._items.move_to_end(key)
        while len(self._items) > self.max_items:
            self._items.popitem(last=False)

    def add(self, key: K, value: V) -> bool:
        """`set`, except that a new key is refused (False) while the map is full of live entries."""
        if key not in self._items:
            self._expire(self._clock())
            if len(self._items) >= self.max_items:
                return False
        self.set(key, value)
        return True

    def pop(self, key: K) -> V | None:
        entry = self._items.pop(key, None)
        return entry[1] if entry is not None else None

    def items(self) -> list[tuple[K, V]]:
        """A snapshot of the live entries, oldest first."""
        self._expire(self._clock())
        return [(key, value) for key, (_, value) in self._items.items()]

    def __len__(self) -> int:
        self._expire(self._clock())
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        self._expire(self._clock())
        return key in self._items


class SessionState(Generic[V]):
    """One state object per session, created by `factory` on first use, bounded like `TtlMap`."""

    def __init__(
        self,
        factory: Callable[[], V],
        *,
        max_sessions: int = 10_000,
        ttl_s: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._factory = factory
        self._sessions: TtlMap[str, V] = TtlMap(max_items=max_sessions, ttl_s=ttl_s, clock=clock)

    def get(self, session_id: str | None) -> V:
        key = session_id or ANONYMOUS
        state = self._sessions.get(key)
        if state is None:
            state = self._factory()
            self._sessions.set(key, state)
        return state

    def peek(self, session_id: str | None) -> V | None:
        return self._sessions.get(session_id or ANONYMOUS)

    def __len__(self) -> int:
        return len(self._sessions)
