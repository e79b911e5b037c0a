"""Client features across eras: sampling, elicitation and roots requests, governed on their way to the
client and back, whether they come as server requests (the handshake era) or `input_required` rounds (2026-07-28).

Mixed eras are bridged: a handshake-era client answers a 2026-07-28 upstream's input requests as server
requests; a 2026-07-28 client gets a handshake-era upstream's server requests as input requests
(`bridge.Bridges`). `OpenInputs` links each input request's audit call to the answer a retry brings.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
import anyio.abc
from mcp import MCPError

from mcp_interceptors.gateway.bridge import BridgedCall, Bridges
from mcp_interceptors.gateway.governor import GOVERNED_EVENTS, Governor
from mcp_interceptors.gateway.jsonrpc.framing import INVALID_REQUEST
from mcp_interceptors.gateway.open_inputs import OpenInputs
from mcp_interceptors.gateway.recording import CallRecord, OpenInput
from mcp_interceptors.gateway.reply import Replies, reraise
from mcp_interceptors.gateway.session import Downstream, DownstreamSession
from mcp_interceptors.gateway.sessions import Sessions
from mcp_interceptors.gateway.shape import recorded, without_answers
from mcp_interceptors.gateway.upstream.connection import OnUpstreamRequest, UpstreamConnection
from mcp_interceptors.protocol.errors import INVALID_PARAMS, InterceptorsError
from mcp_interceptors.protocol.invoke import InvocationContext

logger = logging.getLogger(__name__)

#: How long a request an upstream sends before the stdio client's handshake waits for that client.
_STDIO_CLIENT_WAIT_S = 30.0
Progress = Callable[[float, float | None, str | None], Awaitable[None]]


class InputRounds:
    """Governs client-feature requests and their answers, in either era, bridging where the eras differ."""

    def __init__(self, governor: Governor, replies: Replies, sessions: Sessions) -> None:
        self.governor = governor
        self.replies = replies
        self.sessions = sessions
        self.open_inputs = OpenInputs(replies)
        self.bridges = Bridges(on_end=self.open_inputs.bridged_call_ended)
        self._tg: anyio.abc.TaskGroup | None = None
        #: The upstreams told "no roots" (`_no_roots`), each logged once.
        self._answered_no_roots: set[str] = set()

    def run_in(self, tg: anyio.abc.TaskGroup) -> None:
        """The task group bridged calls run in (the gateway's)."""
        self._tg = tg

    # ------------------------------------------------------------------ handshake era: server requests

    async def from_upstream(
        self, session: DownstreamSession, upstream: str, method: str, params: dict[str, Any] | None
    ) -> dict[str, Any]:
        """A server-initiated request (handshake era): govern, ask the client, govern the answer."""
        context = session.context(upstream)
        governor = self.governor
        record = self.replies.new_record(context)
        governed = method in GOVERNED_EVENTS
        if governed:
            try:
                params = await governor.govern_request(method, params, context, record)
            except anyio.get_cancelled_exc_class():
                await record.cancelled(method)  # the upstream gave up on it while its request chain ran
                raise
        target = session.target()
        if target is None:
            refused = MCPError(INVALID_REQUEST, "no downstream client is connected to answer " + method)
            if governed:
                await record.refused(method, refused)  # never sent: recorded as the gateway's refusal, not left open
            raise refused
        if governed:
            sent = {"method": method, "params": recorded(params)}
            await record.dispatched(executed=sent, intent=sent)
        try:
            result = await target.request(method, params)
        except MCPError as exc:
            await self.replies.failed(record, method, exc)  # the client's error answer, for the upstream
        except anyio.get_cancelled_exc_class():
            await record.cancelled(method)  # the upstream gave up on it, or the gateway is stopping
            raise
        if method in GOVERNED_EVENTS:
            result = await governor.govern_response(method, result, context, record)
        await record.settle()
        return result

    def shared_request_handler(self, upstream: str) -> OnUpstreamRequest:
        """A request from a shared connection: to a bridged 2026-07-28 call, else to the stdio client."""

        async def handle(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
            try:
                bridged = self.bridges.asker(upstream, method)
            except MCPError as refused:
                logger.warning("upstream %r: %s", upstream, refused.message)
                raise
            if bridged is not None:
                return await bridged.ask(method, params)
            session = await self.sessions.stdio_session(_STDIO_CLIENT_WAIT_S)
            if session is None and method == "roots/list":
                return self._no_roots(upstream)
            if session is None:
                raise MCPError(-32600, f"no downstream session can answer {method} from {upstream!r}")
            return await self.from_upstream(session, upstream, method, params)

        return handle

    def _no_roots(self, upstream: str) -> dict[str, Any]:
        """No roots, for a `roots/list` no client can answer: an HTTP gateway's shared connection asked outside
        any call, as servers do right after their handshake. An error only made them log a failure at start."""
        if upstream not in self._answered_no_roots:
            self._answered_no_roots.add(upstream)
            logger.info("upstream %r asked for roots/list with no client to ask (outside any call): no roots", upstream)
        return {"roots": []}

    # ------------------------------------------------------------------ 2026-07-28: input_required rounds

    async def govern_requests(
        self, session: DownstreamSession, result: dict[str, Any], context: InvocationContext, record: CallRecord
    ) -> dict[str, Any]:
        """Each embedded sampling/elicitation/roots request of an `input_required` result runs its own
        request chain; a refusal ends the bridged call the round belongs to, if any."""
        try:
            return await self._govern_requests(session, result, context, record)
        except (MCPError, InterceptorsError) as exc:
            self.abandon_bridged(session, result.get("requestState"), exc)  # a question is refused: so is the call
            raise

    async def _govern_requests(
        self, session: DownstreamSession, result: dict[str, Any], context: InvocationContext, record: CallRecord
    ) -> dict[str, Any]:
        requests = result.get("inputRequests")
        if not isinstance(requests, Mapping):
            return result
        governed: dict[str, Any] = {}
        state = result.get("requestState")
        # Recorded as sent once every one is approved: a denied one stops the round, and its siblings with it.
        approved: list[tuple[str, str, CallRecord, dict[str, Any]]] = []
        current: tuple[str, CallRecord] | None = None
        try:
            for key, request in requests.items():
                method = request.get("method") if isinstance(request, Mapping) else None
                if isinstance(method, str) and method in GOVERNED_EVENTS:
                    embedded = record.embedded()
                    current = (method, embedded)
                    params = request.get("params")
                    if session.era == "legacy":  # bridged to a handshake-era client: what it is sent is governed
                        params = _for_handshake_client(method, params)
                    params = await self.governor.govern_request(method, params, context, embedded)
                    approved.append((str(key), method, embedded, {"method": method, "params": recorded(params)}))
                    governed[key] = {**request, "params": params}
                else:
                    governed[key] = request
        except BaseException as exc:
            await _withheld(approved, current, exc)
            raise
        for key, method, embedded, sent in approved:
            await embedded.dispatched(executed=sent, intent=sent)
            if isinstance(state, str):  # its answer comes with the retry
                opened = OpenInput(method, embedded.call_id, context) if record.enabled else OpenInput(method)
                await self.open_inputs.open(session.key, state, key, opened)
        return {**result, "inputRequests": governed}

    async def govern_responses(
        self,
        session: DownstreamSession,
        params: dict[str, Any] | None,
        context: InvocationContext,
        record: CallRecord,
        asked: Mapping[str, str] | None = None,
    ) -> None:
        """2026-07-28 retry (of any call that can ask for input): the client's answers run the response chain
        of the request they answer: the one the gateway sent under that key (it remembers them), and every
        one the answer's shape could be read as (roots with an `action`, say), so no guard is skipped. A
        refused answer ends the bridged call it was for, if any. `asked` (from the gateway's sealed `requestState`)
        names the request each key answered where this replica did not send it."""
        responses = (params or {}).get("inputResponses")
        if not isinstance(responses, dict):  # not a retry: every call comes here first
            return
        try:
            state = (params or {}).get("requestState")
            await self._govern_responses(session, responses, state, context, record, asked or {})
        except (MCPError, InterceptorsError) as exc:
            # The answer is refused: so is the call.
            self.abandon_bridged(session, (params or {}).get("requestState"), exc)
            raise

    async def _govern_responses(
        self,
        session: DownstreamSession,
        responses: dict[str, Any],
        state: Any,
        context: InvocationContext,
        record: CallRecord,
        asked: Mapping[str, str],
    ) -> None:
        for key, value in list(responses.items()):
            # The request it answers; its audit call, so request and answer make one compound receipt.
            opened = self.open_inputs.close(session.key, state, str(key)) if isinstance(state, str) else None
            if opened is None and str(key) in asked:  # sent by another replica: its method, without its call
                opened = OpenInput(asked[str(key)])
            methods = input_response_methods(value)
            if opened is not None and opened.method not in methods:
                methods = (opened.method, *methods)
            answer_record: CallRecord | None = None
            try:
                if methods and not isinstance(value, dict):
                    raise MCPError(
                        INVALID_PARAMS,
                        f"inputResponses.{key} must be an object: the result of the {methods[0]} request it answers",
                        {"field": f"inputResponses.{key}"},
                    )
                for method in methods:
                    linked = opened is not None and opened.method == method and bool(opened.call_id)
                    answer_record = record.embedded(opened.call_id if opened is not None and linked else None)
                    value = await self.governor.govern_response(method, value, context, answer_record)
            except BaseException:
                if opened is not None and isinstance(state, str):  # still unanswered: a later retry is governed alike
                    if answer_record is not None and answer_record.ended:  # its audit call is closed (denied)
                        opened = OpenInput(opened.method)
                    await self.open_inputs.open(session.key, state, str(key), opened)
                raise
            responses[key] = value

    async def ask_client(
        self,
        session: DownstreamSession,
        requests: Mapping[str, Any],
        state: Any,
        downstream: Downstream,
        context: InvocationContext,
        record: CallRecord,
    ) -> dict[str, Any]:
        """Bridge: a handshake-era client answers a 2026-07-28 upstream's input requests as server requests.

        Each answer closes the audit call its request opened (`govern_requests`), as a 2026-07-28 client's
        retry does, so request and answer make one compound receipt."""
        answers: dict[str, Any] = {}
        try:
            for key, request in requests.items():
                method, params = request.get("method"), request.get("params")
                opened = self.open_inputs.close(session.key, state, str(key)) if isinstance(state, str) else None
                linked = opened is not None and opened.method == method and bool(opened.call_id)
                answer_record = record.embedded(opened.call_id if opened is not None and linked else None)
                try:
                    answer = await downstream.request(method, params)
                except MCPError as exc:
                    scrubbed = self.replies.scrub_error(exc)
                    if linked:
                        await answer_record.failed(method, scrubbed.code, scrubbed.message)
                    reraise(exc, scrubbed)
                except anyio.get_cancelled_exc_class():
                    if linked:
                        await answer_record.cancelled(method)
                    raise
                if method in GOVERNED_EVENTS:
                    answer = await self.governor.govern_response(method, answer, context, answer_record)
                answers[key] = answer
        except BaseException:
            if isinstance(state, str):  # the requests not asked yet never will be
                unasked = [(session.key, state, str(key)) for key in requests if key not in answers]
                with anyio.CancelScope(shield=True):
                    await self.open_inputs.forget("the call ended before the client was asked it", unasked)
            raise
        return answers

    # ------------------------------------------------------------------ a 2026-07-28 client, a handshake-era upstream

    async def bridged_call(
        self,
        session: DownstreamSession,
        conn: UpstreamConnection,
        method: str,
        params: dict[str, Any],
        downstream: Downstream,
        relay: Progress | None,
        asked: dict[str, Any],
    ) -> dict[str, Any]:
        """The upstream's requests to the client become input requests. `asked` is what a retry of this call
        must repeat (the client's request, as sent, but for its answers).

        The request now waiting (the first, then each retry) gets the upstream's progress and log lines;
        if it is cancelled, so is the upstream call.
        """
        bridges = self.bridges
        token = params.get("requestState")  # an explicit null counts as absent, as in mcp's servers
        bridged = bridges.find(token, session.key)
        if token is not None and bridged is None:
            # A retry of a call that is over (answered, abandoned or from before a restart), or a token
            # this gateway never minted: refused as a direct server would, never run again.
            raise MCPError(
                INVALID_PARAMS,
                "Invalid or expired requestState",
                {"reason": "invalid_request_state", "field": "requestState"},
            )
        if bridged is None:
            body = without_answers(params)

            async def call(bridged: BridgedCall) -> dict[str, Any]:
                return await conn.request(method, body, on_progress=bridged.progress, on_notify=bridged.notify)

            assert self._tg is not None, "gateway not started"
            bridged = bridges.start(self._tg, session.key, conn.name, call)
            bridged.request = asked
        elif bridged.request != asked:
            # A retry is the same request plus answers: another tool or other arguments would be governed
            # (and recorded) as sent while the call its token names went on.
            raise MCPError(
                INVALID_PARAMS,
                "requestState was issued for another request (a retry must repeat the request's method and params)",
                {"reason": "request_state_mismatch", "field": "requestState"},
            )
        if bridged.waiting:
            bridged.resume_refused()
        bridged.on_progress, bridged.on_notify = relay, downstream.notify_related
        answers = params.get("inputResponses")
        try:
            return await bridged.resume(answers if isinstance(answers, dict) else {})
        except anyio.get_cancelled_exc_class():
            bridged.scope.cancel()  # the client gave up on the call: so does the upstream
            raise
        finally:
            bridged.on_progress = bridged.on_notify = None

    def abandon_bridged(self, session: DownstreamSession, token: Any, exc: MCPError | InterceptorsError) -> None:
        """End the bridged call `token` names, if any: its client was refused, so the upstream is too."""
        bridged = self.bridges.find(token, session.key) if session.era == "2026-07-28" else None
        if bridged is not None:
            bridged.abandon(exc if isinstance(exc, MCPError) else MCPError(exc.code, exc.message, exc.data))


async def _withheld(
    approved: list[tuple[str, str, CallRecord, dict[str, Any]]],
    current: tuple[str, CallRecord] | None,
    exc: BaseException,
) -> None:
    """Close the audit calls of an `input_required` round that ended before it was sent: the `current`
    request's (refused, unless its chain's denial closed it; cancelled, if the call was) and those of the
    requests approved before it, none of which was sent."""
    why = exc if isinstance(exc, (MCPError, InterceptorsError)) else None
    stopped = current[1] if current is not None and why is not None else None
    if current is not None:
        method, embedded = current
        if isinstance(exc, MCPError):
            await embedded.refused(method, exc)
        elif stopped is None:
            await embedded.cancelled(method)
    for _, method, embedded, _ in approved:
        if stopped is not None and why is not None:
            await embedded.withheld(method, stopped, why)
        else:
            await embedded.cancelled(method)


def _for_handshake_client(method: str, params: Any) -> Any:
    """A 2026-07-28 input request as a handshake-era client must get it: URL-mode elicitation there requires
    an `elicitationId`, which 2026-07-28 removed (a client refuses the request without one)."""
    if (
        method == "elicitation/create"
        and isinstance(params, Mapping)
        and params.get("mode") == "url"
        and not isinstance(params.get("elicitationId"), str)
    ):
        return {**params, "elicitationId": uuid.uuid4().hex}
    return params


def input_response_methods(value: Any) -> tuple[str, ...]:
    """Which client features an `inputResponses` entry may answer, from its shape: every one it could be
    read as (an upstream reads the fields it asked for and ignores the others)."""
    if not isinstance(value, Mapping):
        return ()
    methods = []
    if "action" in value:
        methods.append("elicitation/create")
    if "roots" in value:
        methods.append("roots/list")
    if "role" in value or "model" in value:
        methods.append("sampling/createMessage")
    return tuple(methods)
