"""Ask a person to approve the escalations that blocked a call, in the client's own era, and remember a yes.

A handshake-era client is sent `elicitation/create` while its call waits; a 2026-07-28 client's call is
answered with an `input_required` round (`rounds`), and its retry brings the answers. A client without
elicitation is not asked: the call is denied. Only `accept` with content matching the requested schema
approves (`answers.judge`); each answer, whatever it is, goes into the call's audit record.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
from mcp import MCPError
from mcp_types import CLIENT_CAPABILITIES_META_KEY
from mcp_types.methods import INPUT_REQUIRED_METHODS

from mcp_interceptors.gateway.approvals.answers import Answer, approval_error, judge, schema_problem
from mcp_interceptors.gateway.approvals.memory import ApprovalMemory, Remembered, StateApprovals
from mcp_interceptors.gateway.approvals.rounds import ROUND_PREFIX, PendingRound, Question, Rounds
from mcp_interceptors.gateway.approvals.verdicts import ApprovalDenied, ApprovalRound, Granted
from mcp_interceptors.gateway.approvals.webhook import Webhook
from mcp_interceptors.gateway.governor import BlockedError
from mcp_interceptors.gateway.recording import CallRecord, Leg
from mcp_interceptors.gateway.session import Downstream, DownstreamSession
from mcp_interceptors.gateway.shape import without_answers, without_meta
from mcp_interceptors.protocol.errors import INVALID_PARAMS
from mcp_interceptors.protocol.events import CLIENT_INITIATED_EVENTS
from mcp_interceptors.protocol.invoke import InvocationContext, now_iso
from mcp_interceptors.state.memory import MemoryState

#: How long a yes with `remember: session` is kept when the escalation names no time.
SESSION_REMEMBER_S = 12 * 3600.0
#: Upstream `requestState` tokens a 2026-07-28 call approved for is kept under, so its retries are not asked again.
_CARRIED_KEPT = 10_000


def entry_for(question: Question, answer: Answer, *, asked: str, via: str, asked_at: str) -> dict[str, Any]:
    """The audit entry of one question: who was asked (`asked`, `via`), what, the answer and when."""
    entry: dict[str, Any] = {
        "asked": asked,
        "via": via,
        "message": question.escalation.message,
        "answer": answer.outcome,
        "asked_at": asked_at,
    }
    if answer.outcome != "timeout":
        entry["answered_at"] = now_iso()
    if answer.content:
        entry["content"] = answer.content
    if answer.detail:
        entry["detail"] = answer.detail
    entry.update(answer.extra)
    return entry


def can_elicit(capabilities: Any) -> bool:
    """Whether client capabilities let the gateway ask a form elicitation (`{}` means form, as in the spec)."""
    if not isinstance(capabilities, Mapping):
        return False
    elicitation = capabilities.get("elicitation")
    if not isinstance(elicitation, Mapping):
        return False
    return "form" in elicitation or "url" not in elicitation


class Approvals:
    """Asks, judges and remembers approvals for every session; `memory` keeps the remembered ones (in the
    process, unless it is given the state store the replicas share)."""

    def __init__(self, memory: ApprovalMemory | None = None, webhooks: Mapping[str, Webhook] | None = None) -> None:
        self.memory: ApprovalMemory = memory if memory is not None else StateApprovals(MemoryState())
        #: Per escalating interceptor, the webhook that asks when its client cannot be asked.
        self.webhooks = dict(webhooks or {})
        self.rounds = Rounds(self._round_expired)
        #: (session key, an upstream's requestState) -> the approvals of the call that was given it.
        self._carried: dict[tuple[str, str], Granted] = {}

    def run_in(self, tg: anyio.abc.TaskGroup) -> None:
        self.rounds.run_in(tg)

    def approver(
        self,
        session: DownstreamSession,
        downstream: Downstream | None,
        context: InvocationContext,
        params: Mapping[str, Any] | None,
        granted: Granted | None = None,
    ) -> CallApprover:
        """The approver of one call (`params` as the client sent them)."""
        return CallApprover(self, session, downstream, context, params, dict(granted or {}))

    # ------------------------------------------------------------------ a 2026-07-28 client's retry

    def take_round(
        self, session: DownstreamSession, method: str, params: Mapping[str, Any] | None
    ) -> PendingRound | None:
        """The approval round a retry answers (None: it answers none of the gateway's); a retry naming one it
        cannot have (another session's, an unknown or timed-out token, another request) is refused."""
        token = (params or {}).get("requestState")
        if not isinstance(token, str) or not token.startswith(ROUND_PREFIX):
            return None
        pending = self.rounds.take(token, session.key)
        if pending is None:
            asker = self.rounds.timed_out(token)
            if asker is not None:
                raise MCPError(
                    INVALID_PARAMS,
                    f"Blocked: approval timed out ({asker}): the call was denied; send it again to be asked again",
                    {"interceptor": asker, "reason": "timeout", "field": "requestState", "approval": "timeout"},
                )
            raise MCPError(
                INVALID_PARAMS,
                "Invalid or expired requestState",
                {"reason": "invalid_request_state", "field": "requestState"},
            )
        if pending.request != _request_of(method, params):
            self.rounds.put_back(pending)
            raise MCPError(
                INVALID_PARAMS,
                "requestState was issued for another request (a retry must repeat the request's method and params)",
                {"reason": "request_state_mismatch", "field": "requestState"},
            )
        return pending

    async def judge_round(
        self, session: DownstreamSession, pending: PendingRound, params: Mapping[str, Any] | None
    ) -> Granted:
        """The approvals a retry's answers give; a missing answer or one that is no yes denies the call (recorded)."""
        responses = (params or {}).get("inputResponses")
        responses = responses if isinstance(responses, Mapping) else {}
        granted = dict(pending.granted)
        entries: Granted = {}
        refused: tuple[Question, Answer] | None = None
        for key, question in pending.questions.items():
            if key in responses:
                answer = judge(responses[key], question.escalation)
            else:
                answer = Answer("invalid", detail=f"the retry has no answer to inputRequests.{key}")
            entry = entry_for(question, answer, asked="client", via="input_required", asked_at=pending.asked_at)
            entries[question.interceptor] = entry
            if answer.approved:
                granted[question.ident] = entry
                await self._remember(session, pending.context, question, entry)
            elif refused is None:
                refused = (question, answer)
        if refused is not None:
            question, answer = refused
            error = approval_error(question.interceptor, pending.leg.event, answer)
            await pending.record.denied(_with_approvals(pending.leg, entries), error)
            raise BlockedError.of(error)
        return granted

    def carry(self, session: DownstreamSession, result: Mapping[str, Any], granted: Granted) -> None:
        """A 2026-07-28 call approved by a person got an `input_required` round of its upstream's: its retry
        (with that round's `requestState`) is the same call, so it is not asked again."""
        token = result.get("requestState")
        if granted and isinstance(token, str):
            self._carried[(session.key, token)] = dict(granted)
            while len(self._carried) > _CARRIED_KEPT:
                self._carried.pop(next(iter(self._carried)))

    def carried(self, session: DownstreamSession, params: Mapping[str, Any] | None) -> Granted:
        token = (params or {}).get("requestState")
        return self._carried.pop((session.key, token), {}) if isinstance(token, str) else {}

    # ------------------------------------------------------------------ remembering

    def memory_key(self, session: DownstreamSession, context: InvocationContext, question: Question) -> str | None:
        """Where a yes to `question` is remembered for its scope (None: this call only). A principal scope
        without a principal id falls back to the session."""
        scope = question.escalation.remember
        if scope == "call":
            return None
        principal = context.principal
        if scope == "principal" and principal is not None and principal.id:
            who = f"principal:{principal.type}:{principal.id}"
        else:
            who = f"session:{session.key}"
        return f"{who}|{question.ident}"

    async def recall(
        self, session: DownstreamSession, context: InvocationContext, question: Question
    ) -> dict[str, Any] | None:
        key = self.memory_key(session, context, question)
        kept = await self.memory.recall(key) if key is not None else None
        if kept is None:
            return None
        return {
            "asked": "remembered",
            "via": question.escalation.remember,
            "message": question.escalation.message,
            "answer": "accept",
            "approved_at": kept.approved_at,
        }

    async def _remember(
        self, session: DownstreamSession, context: InvocationContext, question: Question, entry: dict[str, Any]
    ) -> None:
        key = self.memory_key(session, context, question)
        if key is None:
            return
        ms = question.escalation.remember_ms
        ttl = ms / 1000 if ms is not None else SESSION_REMEMBER_S
        await self.memory.remember(key, Remembered(entry.get("answered_at", now_iso()), entry), ttl)

    async def _round_expired(self, pending: PendingRound) -> None:
        """Nobody answered in time: the call is denied, and its record says so."""
        entries = {
            question.interceptor: entry_for(
                question, Answer("timeout"), asked="client", via="input_required", asked_at=pending.asked_at
            )
            for question in pending.questions.values()
        }
        first = next(iter(pending.questions.values()))
        error = approval_error(first.interceptor, pending.leg.event, Answer("timeout"))
        await pending.record.denied(_with_approvals(pending.leg, entries), error)


class CallApprover:
    """The approver of one call: asks what this call, its session or its principal has not approved yet."""

    def __init__(
        self,
        approvals: Approvals,
        session: DownstreamSession,
        downstream: Downstream | None,
        context: InvocationContext,
        params: Mapping[str, Any] | None,
        granted: Granted,
    ) -> None:
        self.approvals = approvals
        self.session = session
        self.downstream = downstream
        self.context = context
        self.params = params
        #: Question ident -> its approval: what this call has been approved for so far.
        self.granted = granted

    async def __call__(self, leg: Leg, record: CallRecord | None) -> Granted:
        assert leg.result is not None
        entries: Granted = {}
        to_ask: list[Question] = []
        for item in leg.result.escalations:
            question = Question(item.interceptor, item.escalation)
            known = self.granted.get(question.ident) or await self.approvals.recall(
                self.session, self.context, question
            )
            if known is not None:
                entries[question.interceptor] = self.granted[question.ident] = known
            else:
                to_ask.append(question)
        if not to_ask:
            return entries
        problem = self._cannot_ask(leg, to_ask)
        if problem is not None and problem.client_side and self._webhooks_for(to_ask):
            return await self._ask_all(leg, to_ask, entries, via_webhook=True)
        if problem is not None:
            self._deny(leg, to_ask[0], Answer("unavailable", detail=problem.detail), "nobody", "", entries)
        if self.session.era != "legacy":
            assert record is not None
            raise ApprovalRound(self._open_round(leg, record, to_ask))
        return await self._ask_all(leg, to_ask, entries, via_webhook=False)

    def _webhooks_for(self, questions: list[Question]) -> bool:
        return all(question.interceptor in self.approvals.webhooks for question in questions)

    async def _ask_all(self, leg: Leg, to_ask: list[Question], entries: Granted, *, via_webhook: bool) -> Granted:
        """Ask each question in turn (the client's user, or the interceptor's webhook); the first no denies."""
        for question in to_ask:
            asked_at = now_iso()
            if via_webhook:
                webhook = self.approvals.webhooks[question.interceptor]
                payload = leg.result.pending_payload if leg.result is not None else None
                answer = await webhook.ask(question, self.context, leg.event, payload)
                entry = entry_for(question, answer, asked="webhook", via=webhook.shown_url, asked_at=asked_at)
            else:
                answer = await self._ask_client(question)
                entry = entry_for(question, answer, asked="client", via="elicitation/create", asked_at=asked_at)
            entries[question.interceptor] = entry
            if not answer.approved:
                raise ApprovalDenied(approval_error(question.interceptor, leg.event, answer), entries)
            self.granted[question.ident] = entry
            await self.approvals._remember(self.session, self.context, question, entry)
        return entries

    def _cannot_ask(self, leg: Leg, questions: list[Question]) -> _Unaskable | None:
        """Why the client's user cannot be asked these questions here, or None."""
        if leg.phase != "request" or leg.event not in CLIENT_INITIATED_EVENTS:
            return _Unaskable(f"an approval can be asked for a client's request, not a {leg.event} {leg.phase}")
        for question in questions:
            problem = schema_problem(question.escalation.requested_schema)
            if problem is not None:
                return _Unaskable(f"{question.interceptor} asks for a form an elicitation cannot carry: {problem}")
        detail = self._client_cannot_answer(leg)
        return _Unaskable(detail, client_side=True) if detail is not None else None

    def _client_cannot_answer(self, leg: Leg) -> str | None:
        """Why this client cannot be asked (a webhook may ask instead), or None."""
        modern = self.session.era != "legacy"
        if modern and leg.event not in INPUT_REQUIRED_METHODS:
            return f"a 2026-07-28 client can be asked only during {', '.join(sorted(INPUT_REQUIRED_METHODS))}"
        if modern:
            meta = (self.params or {}).get("_meta")
            capabilities = meta.get(CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, Mapping) else None
        else:
            capabilities = (self.session.client_params or {}).get("capabilities")
        if not can_elicit(capabilities):
            return "the client did not declare the elicitation capability (form mode)"
        if not modern and self.downstream is None:
            return "no client is connected to ask"
        return None

    def _deny(self, leg: Leg, question: Question, answer: Answer, asked: str, via: str, entries: Granted) -> None:
        entries[question.interceptor] = entry_for(question, answer, asked=asked, via=via, asked_at=now_iso())
        raise ApprovalDenied(approval_error(question.interceptor, leg.event, answer), entries)

    async def _ask_client(self, question: Question) -> Answer:
        """Ask a handshake-era client's user with `elicitation/create`, within the escalation's timeout."""
        assert self.downstream is not None
        params = {"message": question.escalation.message, "requestedSchema": question.escalation.requested_schema}
        answer = Answer("timeout", detail=f"no answer within {question.escalation.timeout_ms / 1000:g} s")
        with anyio.move_on_after(question.escalation.timeout_ms / 1000):
            try:
                raw = await self.downstream.request("elicitation/create", params)
            except MCPError as exc:
                return Answer("unavailable", detail=f"the client answered error {exc.error.code}: {exc.error.message}")
            answer = judge(raw, question.escalation)
        return answer

    def _open_round(self, leg: Leg, record: CallRecord, questions: list[Question]) -> dict[str, Any]:
        """Answer a 2026-07-28 client's call with an `input_required` round asking `questions`."""
        rounds = self.approvals.rounds
        token = rounds.new_token()
        keyed = {f"approval-{index}": question for index, question in enumerate(questions)}
        timeout_s = min(question.escalation.timeout_ms for question in questions) / 1000
        method = leg.event
        rounds.open(
            PendingRound(
                token=token,
                owner=self.session.key,
                request=_request_of(method, self.params),
                params=dict(self.params) if self.params is not None else None,
                context=self.context,
                record=record,
                leg=leg,
                questions=keyed,
                granted=dict(self.granted),
                asked_at=now_iso(),
                deadline=time.monotonic() + timeout_s,
            )
        )
        requests = {
            key: {
                "method": "elicitation/create",
                "params": {"message": q.escalation.message, "requestedSchema": q.escalation.requested_schema},
            }
            for key, q in keyed.items()
        }
        return {"resultType": "input_required", "inputRequests": requests, "requestState": token}


@dataclass(frozen=True)
class _Unaskable:
    """Why a call's questions cannot be put to its client; `client_side`: a webhook may ask instead."""

    detail: str
    client_side: bool = False


def _request_of(method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a retry must repeat: the method and params, without `_meta` and the answers of a retry."""
    return {"method": method, "params": without_meta(without_answers(params))}


def _with_approvals(leg: Leg, approvals: Granted) -> Leg:
    return Leg(leg.event, leg.phase, leg.result, leg.payload_in, approvals)
