"""How many handshake-era HTTP sessions are open, and whose: admission against `http.max_sessions` and
each principal's share (`http.max_sessions_per_principal`).

A slot is taken before mcp opens a Streamable HTTP session (a request naming none) or an `/sse` stream,
so a client that only sends `initialize` counts from its first request. It is given back when the
opening fails, the client ends the session (DELETE), the stream closes, or the session has had no request
in flight for `http.session_idle_s` (mcp expires it then too). Pure bookkeeping: the clock is passed in.
"""

from __future__ import annotations

from typing import Any

from mcp_interceptors.protocol.invoke import Principal

#: Who a slot counts against: a principal's type and id; None without auth (the global limit only).
Owner = tuple[str, str | None] | None


def owner_of(principal: Principal | None) -> Owner:
    return (principal.type, principal.id) if principal is not None else None


class SessionRefusedError(Exception):
    """No room for one more session: `data` is the `-32603` error's (`reason: too_many_sessions`)."""

    def __init__(self, message: str, data: dict[str, Any]) -> None:
        super().__init__(message)
        self.message = message
        self.data = data


class Slot:
    """One open (or opening) session: the key it holds once known, and its requests in flight."""

    def __init__(self, owner: Owner, now: float) -> None:
        self.owner = owner
        #: A Streamable HTTP session id, once mcp opened it (`/sse` streams keep None: they end with their GET).
        self.key: str | None = None
        self.in_flight = 1  # the request that takes it
        self.idle_since = now
        self.released = False
        #: The scope its SSE events are kept under (`streams.resumable`; `fronts/resume.py`).
        self.stream_scope: str | None = None


class SessionSlots:
    """The open slots: at most `limit` in all and `share` per owner (without auth, only `limit` counts)."""

    def __init__(self, limit: int, share: int) -> None:
        self.limit = limit
        self.share = share
        self._open = 0
        self._by_owner: dict[Owner, int] = {}
        #: session key -> the slot holding it
        self.by_key: dict[str, Slot] = {}

    def __len__(self) -> int:
        return self._open

    def held_by(self, owner: Owner) -> int:
        return self._by_owner.get(owner, 0)

    def take(self, owner: Owner, now: float) -> Slot:
        """A slot for `owner` (its opening request in flight), or `SessionRefusedError` naming the limit."""
        if self._open >= self.limit:
            raise SessionRefusedError(
                f"the gateway serves at most {self.limit} sessions; end one (or wait for an idle one to close)",
                {"reason": "too_many_sessions", "limit": self.limit, "setting": "http.max_sessions"},
            )
        if owner is not None and self.held_by(owner) >= self.share:
            raise SessionRefusedError(
                f"this principal holds {self.share} sessions, its share of the gateway's; end one (or wait for "
                "an idle one to close)",
                {"reason": "too_many_sessions", "limit": self.share, "setting": "http.max_sessions_per_principal"},
            )
        self._open += 1
        if owner is not None:
            self._by_owner[owner] = self.held_by(owner) + 1
        return Slot(owner, now)

    def bind(self, slot: Slot, key: str) -> None:
        """`slot` holds session `key` (mcp answered its opening request with it)."""
        if not slot.released:
            slot.key = key
            self.by_key[key] = slot

    def started(self, key: str, owner: Owner) -> Slot | None:
        """A request of session `key` (by its owner) starts: the session is not idle while it runs."""
        slot = self.by_key.get(key)
        if slot is None or slot.owner != owner:
            return None
        slot.in_flight += 1
        return slot

    def done(self, slot: Slot, now: float) -> None:
        slot.in_flight -= 1
        if not slot.in_flight:
            slot.idle_since = now

    def release(self, slot: Slot) -> None:
        """Give `slot` back (idempotent)."""
        if slot.released:
            return
        slot.released = True
        self._open -= 1
        if slot.key is not None and self.by_key.get(slot.key) is slot:
            del self.by_key[slot.key]
        if slot.owner is not None:
            left = self.held_by(slot.owner) - 1
            if left:
                self._by_owner[slot.owner] = left
            else:
                del self._by_owner[slot.owner]

    def idle(self, cutoff: float) -> list[Slot]:
        """The sessions with no request in flight since before `cutoff`."""
        return [slot for slot in self.by_key.values() if not slot.in_flight and slot.idle_since < cutoff]
