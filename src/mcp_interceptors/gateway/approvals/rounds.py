"""Approval questions asked of 2026-07-28 clients in `input_required` rounds, awaiting the client's retry.

A 2026-07-28 client cannot be sent a request, so the call is answered with an `input_required` result
whose `elicitation/create` requests ask the questions, under an unguessable `requestState` token; the
retry brings the answers. A round not answered in time is closed (the call is denied, and recorded so);
a late retry learns that it timed out.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc

from mcp_interceptors.gateway.recording import CallRecord, Leg
from mcp_interceptors.protocol.escalation import Escalation
from mcp_interceptors.protocol.invoke import InvocationContext

#: Every token the gateway mints for an approval round starts so: a retry with one is the gateway's to answer.
ROUND_PREFIX = "mcpi-approval."
#: Rounds awaiting answers at once (the oldest is closed as timed out past it).
MAX_OPEN_ROUNDS = 10_000
#: How long a timed-out round's token is still recognised, so a late retry is told it timed out.
_EXPIRED_KEPT_S = 3600.0


@dataclass(frozen=True)
class Question:
    """One escalation put to a person: which interceptor asked, and what."""

    interceptor: str
    escalation: Escalation

    @property
    def ident(self) -> str:
        """What makes two questions the same one: the interceptor and the escalation's key (or message)."""
        return f"{self.interceptor}|{self.escalation.key or self.escalation.message}"


@dataclass
class PendingRound:
    """An `input_required` round sent to a 2026-07-28 client, awaiting its retry."""

    token: str
    owner: str
    #: The request a retry must repeat, `{method, params}` without `_meta` and answers.
    request: dict[str, Any]
    #: The params the call goes on with once approved (the first request's, as governed then).
    params: dict[str, Any] | None
    context: InvocationContext
    record: CallRecord
    #: The chain result the escalations blocked, and the payload it ran on: a denial is recorded with them.
    leg: Leg
    #: `inputRequests` key -> the question it asks.
    questions: dict[str, Question]
    #: Approvals this call already had (another point's chain, a remembered one).
    granted: dict[str, dict[str, Any]]
    asked_at: str
    deadline: float
    taken: anyio.Event = field(default_factory=anyio.Event)


Expire = Callable[[PendingRound], Awaitable[None]]


class Rounds:
    """The rounds awaiting answers, by token; `on_expired` closes one that timed out."""

    def __init__(self, on_expired: Expire) -> None:
        self.on_expired = on_expired
        self._open: OrderedDict[str, PendingRound] = OrderedDict()
        #: Token of a round closed unanswered -> (kept until, the interceptor that asked).
        self._expired: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self._tg: anyio.abc.TaskGroup | None = None

    def run_in(self, tg: anyio.abc.TaskGroup) -> None:
        self._tg = tg

    @staticmethod
    def new_token() -> str:
        return ROUND_PREFIX + secrets.token_urlsafe(24)

    def open(self, pending: PendingRound) -> None:
        """Keep `pending` until its retry or its deadline (closed by `on_expired` then)."""
        assert self._tg is not None, "gateway not started"
        self._open[pending.token] = pending
        self._tg.start_soon(self._expire_at_deadline, pending)
        while len(self._open) > MAX_OPEN_ROUNDS:
            _, oldest = self._open.popitem(last=False)
            oldest.deadline = 0.0
            oldest.taken.set()  # its expiry task closes it now

    def take(self, token: str, owner: str) -> PendingRound | None:
        """The round `token` names for a retry of `owner` (never another session's), no longer open."""
        pending = self._open.get(token)
        if pending is None or pending.owner != owner:
            return None
        del self._open[token]
        pending.taken.set()
        return pending

    def put_back(self, pending: PendingRound) -> None:
        """A retry that did not repeat the request: the round stays open for the right one, until its deadline."""
        if time.monotonic() < pending.deadline:
            pending.taken = anyio.Event()
            self._open[pending.token] = pending
            assert self._tg is not None
            self._tg.start_soon(self._expire_at_deadline, pending)

    def timed_out(self, token: str) -> str | None:
        """The interceptor that asked, if `token` named a round that was closed unanswered (recently)."""
        now = time.monotonic()
        while self._expired and next(iter(self._expired.values()))[0] < now:
            self._expired.popitem(last=False)
        kept = self._expired.get(token)
        return kept[1] if kept is not None else None

    async def _expire_at_deadline(self, pending: PendingRound) -> None:
        taken = pending.taken  # `put_back` gives the round a fresh event, and a fresh wait on it
        try:
            with anyio.move_on_after(max(0.0, pending.deadline - time.monotonic())):
                await taken.wait()
        except anyio.get_cancelled_exc_class():  # the gateway is stopping: the round is never answered
            if self._open.pop(pending.token, None) is pending:
                with anyio.CancelScope(shield=True):
                    await pending.record.cancelled(pending.leg.event)
            raise
        if taken.is_set() and pending.deadline > 0.0:
            return  # answered, or put back
        if self._open.get(pending.token) is pending:
            del self._open[pending.token]
        await self._expired_now(pending)

    async def _expired_now(self, pending: PendingRound) -> None:
        asker = next(iter(pending.questions.values())).interceptor if pending.questions else ""
        self._expired[pending.token] = (time.monotonic() + _EXPIRED_KEPT_S, asker)
        while len(self._expired) > MAX_OPEN_ROUNDS:
            self._expired.popitem(last=False)
        with anyio.CancelScope(shield=True):
            await self.on_expired(pending)
