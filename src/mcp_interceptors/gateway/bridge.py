"""Bridge a handshake-era upstream's server-initiated requests to a 2026-07-28 client.

A 2026-07-28 client cannot receive requests, so while the upstream call is pending the gateway
answers the client with an `input_required` result carrying the upstream's requests, keyed by
an unguessable `requestState` token; the client's retry delivers the answers and the call goes on.
A call that ends between rounds keeps its outcome for the client's next retry, so the retry gets it
instead of running the call again.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import MCPError

#: How long an abandoned bridged call (a client that never retries) keeps its upstream call alive.
BRIDGE_TIMEOUT_S = 300.0


@dataclass
class _Question:
    key: str
    method: str
    params: dict[str, Any] | None
    answered: anyio.Event = field(default_factory=anyio.Event)
    answer: dict[str, Any] | None = None
    #: Sent to the client in an `input_required` round (so a retry without its answer asks it again).
    shown: bool = False
    #: Why it will never be answered (the call was abandoned): what the upstream gets instead.
    error: MCPError | None = None


@dataclass
class BridgedCall:
    """One upstream call whose server-initiated requests travel to the client as input requests."""

    token: str
    owner: str
    upstream: str
    send: MemoryObjectSendStream[tuple[str, Any]]
    receive: MemoryObjectReceiveStream[tuple[str, Any]]
    questions: dict[str, _Question] = field(default_factory=dict)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    #: The client request now waiting on this call (the first one, then each retry): where the
    #: upstream's progress and request-scoped notifications go; None between rounds.
    on_progress: Callable[[float, float | None, str | None], Awaitable[None]] | None = None
    on_notify: Callable[[str, dict[str, Any] | None], Awaitable[None]] | None = None
    #: Set once a client request has taken the call's final result or error.
    delivered: anyio.Event = field(default_factory=anyio.Event)
    #: A client request is waiting on this call now (a second retry with the same token is refused).
    waiting: bool = False
    #: The request this call runs (`{method, params}` as sent upstream, without `_meta`): what a retry repeats.
    request: dict[str, Any] | None = None
    asked: int = 0

    @property
    def has_open_question(self) -> bool:
        """Whether a question of this call awaits its answer (its upstream handler is waiting on it)."""
        return any(not question.answered.is_set() for question in self.questions.values())

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        if self.on_progress is not None:
            await self.on_progress(progress, total, message)

    async def notify(self, method: str, params: dict[str, Any] | None) -> None:
        if self.on_notify is not None:
            await self.on_notify(method, params)

    async def ask(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        """Called for each upstream request: park it until the client's retry answers it."""
        self.asked += 1
        question = _Question(key=f"q{self.asked}", method=method, params=params)
        self.questions[question.key] = question
        try:
            await self.send.send(("request", question))
            with anyio.fail_after(BRIDGE_TIMEOUT_S):
                await question.answered.wait()
        finally:
            if not question.answered.is_set():  # the upstream stopped waiting: never asked again
                self.questions.pop(question.key, None)
        if question.error is not None:
            raise question.error
        assert question.answer is not None
        return question.answer

    def abandon(self, error: MCPError) -> None:
        """The client's request on this call failed (a guard blocked a question or an answer): the
        upstream gets `error` for every question still open, and its call is cancelled. Left running,
        the call would wait for answers that never come, and take the questions of the owner's other
        calls (the newest call gets them) to its grave."""
        self.fail_questions(error)
        self.scope.cancel()

    def fail_questions(self, error: MCPError) -> None:
        for question in self.questions.values():
            if not question.answered.is_set():
                question.error = error
                question.answered.set()

    def deliver(self, answers: dict[str, Any]) -> None:
        for key, answer in answers.items():
            question = self.questions.get(key)
            if question is not None and not question.answered.is_set() and isinstance(answer, dict):
                question.answer = answer
                question.answered.set()

    async def resume(self, answers: dict[str, Any]) -> dict[str, Any]:
        """A client request (the first, or a retry with this call's token): deliver its answers, then
        wait for the next reply. Refused while another request waits on this call: a replayed retry
        must not take (or hide) the round meant for the one already waiting."""
        if self.waiting:
            self.resume_refused()
        self.deliver(answers)
        self.waiting = True
        try:
            return await self.next_reply()
        finally:
            self.waiting = False

    def resume_refused(self) -> NoReturn:
        raise MCPError(
            -32602,
            "requestState is in use: another request with it is still waiting for this call",
            {"reason": "request_state_in_use", "field": "requestState"},
        )

    async def next_reply(self) -> dict[str, Any]:
        """The upstream's result, or an `input_required` result with every request now waiting.

        Requests a retry left unanswered are asked again at once (as a direct server asks for a
        missing input response): the upstream is waiting on them, so nothing else can come first.
        """
        unanswered = [q for q in self.questions.values() if q.shown and not q.answered.is_set()]
        if unanswered:
            return self._round(unanswered + await self._queued_requests())
        try:
            kind, value = await self.receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise MCPError(
                -32603, f"the upstream call ended without an answer (bridged calls last at most {BRIDGE_TIMEOUT_S:g} s)"
            ) from None
        if kind == "result":
            self.delivered.set()
            return dict(value)
        if kind == "error":
            self.delivered.set()
            raise value
        return self._round([value, *await self._queued_requests()])

    async def _queued_requests(self) -> list[_Question]:
        """Every request already queued, so the client answers them in one round."""
        pending: list[_Question] = []
        while True:
            try:
                kind, more = self.receive.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                return pending
            if kind != "request":
                await self.send.send((kind, more))  # keep the final outcome for the next round
                return pending
            pending.append(more)

    def _round(self, pending: list[_Question]) -> dict[str, Any]:
        for question in pending:
            question.shown = True
        return {
            "resultType": "input_required",
            "inputRequests": {q.key: {"method": q.method, "params": q.params or {}} for q in pending},
            "requestState": self.token,
        }


class Bridges:
    """Bridged calls in flight, by token and by upstream (newest first for routing requests)."""

    def __init__(self, on_end: Callable[[str], Awaitable[None]] | None = None) -> None:
        self.by_token: dict[str, BridgedCall] = {}
        self.by_upstream: dict[str, list[BridgedCall]] = {}
        #: Told each call's token once it is over: a retry with it is refused from then on.
        self.on_end = on_end

    def start(
        self,
        tg: anyio.abc.TaskGroup,
        owner: str,
        upstream: str,
        call: Callable[[BridgedCall], Awaitable[dict[str, Any]]],
    ) -> BridgedCall:
        send, receive = anyio.create_memory_object_stream[tuple[str, Any]](16)
        bridged = BridgedCall(secrets.token_urlsafe(24), owner, upstream, send, receive)
        self.by_token[bridged.token] = bridged
        self.by_upstream.setdefault(upstream, []).append(bridged)
        tg.start_soon(self._run, bridged, call)
        return bridged

    async def _run(self, bridged: BridgedCall, call: Callable[[BridgedCall], Awaitable[dict[str, Any]]]) -> None:
        try:
            with bridged.scope, anyio.move_on_after(BRIDGE_TIMEOUT_S):
                try:
                    outcome: tuple[str, Any] = ("result", await call(bridged))
                except MCPError as exc:
                    outcome = ("error", exc)
                await bridged.send.send(outcome)
                self._leave_upstream(bridged)
                # The call may have ended between rounds (an upstream that stopped waiting for its
                # answer): its outcome waits for the client's next retry, which must not run it again.
                await bridged.delivered.wait()
        finally:
            self.by_token.pop(bridged.token, None)
            self._leave_upstream(bridged)
            # Questions still open (the call timed out or was cancelled) get an error, not a long wait.
            bridged.fail_questions(
                MCPError(-32603, "the call this request was shown in ended before the client answered it")
            )
            bridged.send.close()  # a client request still waiting gets an error, not a hang
            bridged.receive.close()
            if self.on_end is not None:
                with anyio.CancelScope(shield=True):
                    await self.on_end(bridged.token)

    def _leave_upstream(self, bridged: BridgedCall) -> None:
        calls = self.by_upstream.get(bridged.upstream, [])
        if bridged in calls:
            calls.remove(bridged)

    def find(self, token: Any, owner: str) -> BridgedCall | None:
        bridged = self.by_token.get(token) if isinstance(token, str) else None
        return bridged if bridged is not None and bridged.owner == owner else None

    def asker(self, upstream: str, method: str) -> BridgedCall | None:
        """The bridged call a server request from `upstream` goes to, or None when none is in flight.

        The wire does not say which of our calls a server request belongs to, so the newest call a client
        request is waiting on takes it (else the newest call), but only when every call in flight there has
        one owner: with several owners, refused, since a guess could show one client's question to another
        and hand it that client's answer. A call between rounds has a question open, so its upstream handler
        is waiting on that answer, not asking; and its client may never come back (a retry is optional).
        So calls with no question open come first: when several calls' handlers ask at once, each question
        goes to a call of its own, and no client request is left waiting out the bridge timeout because
        another call took its question as well.
        """
        calls = self.by_upstream.get(upstream)
        if not calls:
            return None
        owners = {bridged.owner for bridged in calls}
        if len(owners) > 1:
            raise MCPError(
                -32600,
                f"gateway refused {method}: calls of {len(owners)} different clients are in flight on this "
                "connection and it cannot tell which one the request belongs to",
                {"reason": "ambiguous_caller", "upstream": upstream},
            )
        candidates = [bridged for bridged in calls if not bridged.has_open_question] or calls
        waiting = [bridged for bridged in candidates if bridged.waiting]
        return (waiting or candidates)[-1]
