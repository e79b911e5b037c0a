"""One client request through the gateway: route, request chain, dispatch, response chain, reply.

`Forwarder.handle` is where every front hands a request over and where each governed call starts and
ends (its metrics outcome is counted there). Listings go to `listings`; calls (`tools/call`,
`prompts/get`, `resources/*`, `completion/complete`) run `call`; anything else passes through.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import anyio
from mcp import MCPError
from mcp.shared.inbound import mcp_param_headers, x_mcp_header_map

from mcp_interceptors.gateway.approvals.asking import Approvals
from mcp_interceptors.gateway.approvals.verdicts import ApprovalRound, Granted
from mcp_interceptors.gateway.connections import Connections
from mcp_interceptors.gateway.governor import BlockedError, Governor
from mcp_interceptors.gateway.input_rounds import InputRounds
from mcp_interceptors.gateway.listings import Listings
from mcp_interceptors.gateway.metrics import GatewayMetrics, Outcome
from mcp_interceptors.gateway.recording import CallRecord, Leg
from mcp_interceptors.gateway.reply import Replies, reraise
from mcp_interceptors.gateway.request_state import RequestStates, opened_retry, sealed_round
from mcp_interceptors.gateway.routing import CALLS, LISTS, call_target
from mcp_interceptors.gateway.session import Downstream, DownstreamSession
from mcp_interceptors.gateway.shape import (
    recorded,
    renamed,
    shape_handshake,
    shape_modern,
    without_answers,
    without_meta,
)
from mcp_interceptors.gateway.task_extension import ungoverned_task
from mcp_interceptors.gateway.task_relay import TaskRelay
from mcp_interceptors.gateway.tasks import (
    created_task,
    is_task_augmented,
    is_task_method,
    routed_task_refusal,
    task_refusal,
    without_task_hint,
)
from mcp_interceptors.gateway.telemetry import Telemetry
from mcp_interceptors.gateway.ungoverned import broadcast, passthrough, progress_relay
from mcp_interceptors.gateway.upstream.connection import UpstreamConnection
from mcp_interceptors.protocol.invoke import InvocationContext

#: Bound on `input_required` round trips bridged for one handshake-era call (as mcp's client does).
MAX_INPUT_ROUNDS = 10


class Forwarder:
    """Serves the requests of every session. `server_info` gives the gateway's `serverInfo` stamp."""

    def __init__(
        self,
        *,
        governor: Governor,
        connections: Connections,
        listings: Listings,
        rounds: InputRounds,
        replies: Replies,
        metrics: GatewayMetrics | None,
        server_info: Callable[[], dict[str, Any]],
        advertised_equals_callable: bool,
        request_states: RequestStates | None = None,
        telemetry: Telemetry | None = None,
        tasks: TaskRelay | None = None,
        approvals: Approvals | None = None,
    ) -> None:
        self.governor = governor
        self.connections = connections
        self.listings = listings
        self.rounds = rounds
        self.replies = replies
        self.metrics = metrics
        self.server_info = server_info
        self.advertised_equals_callable = advertised_equals_callable
        self.request_states = request_states or RequestStates()
        #: Asks a person when a chain escalates (None: an escalation blocks like any error verdict).
        self.approvals = approvals
        self.telemetry = telemetry
        #: Serves handshake-era clients' tool-call tasks (None: tasks are refused, as in the 2026-07-28 era).
        self.tasks = tasks
        #: Where `handle` goes: straight to the call, or through its span when tracing is on.
        self._serve = self._measured if telemetry is None else self._traced

    async def handle(
        self,
        session: DownstreamSession,
        method: str,
        params: dict[str, Any] | None,
        downstream: Downstream,
        request_id: Any,
    ) -> dict[str, Any]:
        """Serve one request of `session`; raises `MCPError` for the client."""
        if not session.ends_calls:  # no scope for `end_calls` to cancel (an anyio scope costs ~10 us a call)
            return await self._serve(session, method, params, downstream, request_id)
        if session.end_reason is None:
            with session.call_scope() as scope:
                try:
                    return await self._serve(session, method, params, downstream, request_id)
                finally:
                    session.forget_call_scope(scope)
        ended = session.ended_error()
        assert ended is not None, "a call's scope ends it without an answer only when `end_calls` cancels it"
        raise ended

    async def _traced(
        self,
        session: DownstreamSession,
        method: str,
        params: dict[str, Any] | None,
        downstream: Downstream,
        request_id: Any,
    ) -> dict[str, Any]:
        """`_measured` inside the call's SERVER span (tracing on)."""
        assert self.telemetry is not None
        span = self.telemetry.start_call(method, params, session.guard_id, request_id)
        outcome = "error"
        error: Exception | None = None
        try:
            result = await self._measured(session, method, params, downstream, request_id)
            outcome = "ok"
            return result
        except BlockedError as exc:
            outcome, error = "blocked", exc
            raise
        except anyio.get_cancelled_exc_class():
            outcome = "cancelled"
            raise
        except Exception as exc:
            error = exc
            raise
        finally:
            span.end(outcome, self.listings.server_of(session, method, "request", params), error)

    async def _measured(
        self,
        session: DownstreamSession,
        method: str,
        params: dict[str, Any] | None,
        downstream: Downstream,
        request_id: Any,
    ) -> dict[str, Any]:
        metrics = self.metrics
        if metrics is None:
            return await self._handle(session, method, params, downstream, request_id)
        outcome: Outcome = "error"
        try:
            result = await self._handle(session, method, params, downstream, request_id)
            outcome = "ok"
            return result
        except BlockedError:
            outcome = "blocked"
            raise
        except anyio.get_cancelled_exc_class():
            outcome = "cancelled"  # the client cancelled it (or the gateway is stopping): no error was answered
            raise
        finally:
            upstream = self.listings.server_of(session, method, "request", params)
            if upstream is None and method in LISTS and len(self.connections.config.upstreams) == 1:
                upstream = next(iter(self.connections.config.upstreams))  # a listing of the only upstream
            metrics.request_done(upstream, method, outcome)

    async def _handle(
        self,
        session: DownstreamSession,
        method: str,
        params: dict[str, Any] | None,
        downstream: Downstream,
        request_id: Any,
    ) -> dict[str, Any]:
        if session.era != "legacy" and method == "tools/call":
            params = without_task_hint(params)  # SEP-2663: tolerated, and ignored
        governs_tasks = self.tasks is not None
        if (refused := task_refusal(method, params, governed=governs_tasks, era=session.era)) is not None:
            if method in LISTS or method in CALLS or method == "completion/complete":
                # A governed call: the trail says why not.
                await self.replies.refused(None, method, refused, session, request_id, call_target(method, params))
            raise refused  # before any chain or upstream: a task's result would bypass both
        session.inflight.append(downstream)
        if session.standalone is None:
            session.standalone = downstream
        try:
            if method in LISTS:
                result = await self.listings.list(session, method, params, request_id)
            elif method in CALLS or method == "completion/complete":
                result = await self.call(session, method, params, downstream, request_id)
            elif method == "logging/setLevel":
                result = await broadcast(await self.connections.of(session), session.era, method, params)
            elif is_task_method(method) and self.tasks is not None:  # those of the client's era (else refused)
                result = await self._task_request(self.tasks, session, method, params, downstream, request_id)
            else:
                conns = await self.connections.of(session)  # no event: no guard sees what comes back (D18)
                result = self.replies.scrub_result(await passthrough(conns, method, params, downstream))
        except MCPError as exc:
            # Calls and listings raise theirs scrubbed already (and the scrubber knows them: not scanned again);
            # the rest (an upstream's error to a method passed through, to `logging/setLevel`) are scrubbed here.
            reraise(exc, self.replies.scrub_error(exc))
        finally:
            session.inflight.remove(downstream)
        if session.era == "2026-07-28":
            return shape_modern(method, result, self.server_info)
        return shape_handshake(result)

    # ------------------------------------------------------------------ a governed call

    async def call(
        self,
        session: DownstreamSession,
        method: str,
        params: dict[str, Any] | None,
        downstream: Downstream,
        request_id: Any,
    ) -> dict[str, Any]:
        """Route, run the request chain, dispatch, run the response chain, and settle the call's records. It runs on
        the governor and upstream connection current when it starts, to its end: a reload changes only later calls."""
        governor = self.governor.hold()
        held: list[Governor | UpstreamConnection] = [governor]  # what it runs on: what a reload retires waits for it
        try:
            return await self._call(governor, held, session, method, params, downstream, request_id)
        finally:
            for each in held:
                each.release()

    async def _call(
        self,
        governor: Governor,
        held: list[Governor | UpstreamConnection],
        session: DownstreamSession,
        method: str,
        params: dict[str, Any] | None,
        downstream: Downstream,
        request_id: Any,
    ) -> dict[str, Any]:
        list_method = CALLS[method][0] if method in CALLS else "prompts/list"
        record: CallRecord | None = None
        target = call_target(method, params)  # as the client named it (a retry's token leaves the name in place)
        try:
            if self.advertised_equals_callable and list_method not in session.advertised:
                # What this session is shown comes first: guards learn from listings (schemas, pins).
                await self.listings.advertised(session, list_method)
            route = await self.listings.route(session, method, params)
            context = session.context(route.upstream, request_id)
            record = self.replies.new_record(context, target)
            approvals = self.approvals
            pending = approvals.take_round(session, method, params) if approvals is not None else None
            granted: Granted = {}
            if pending is not None and approvals is not None:  # a retry answering the gateway's approval round
                record, context = pending.record, pending.context
                granted = await approvals.judge_round(session, pending, params)
                params = pending.params
            else:
                if approvals is not None:  # a retry of a call a person approved: not asked again
                    granted = approvals.carried(session, params)
                asked: dict[str, str] | None = None
                if (
                    session.era == "2026-07-28"
                    and params is not None
                    and params.get("requestState") is not None
                    and getattr((await self.connections.of(session)).get(route.upstream), "era", None) == "2026-07-28"
                ):
                    # The gateway's own token (a bridged call's is its own): any replica opens it, or refuses it.
                    params, asked = opened_retry(self.request_states, session.key, route.upstream, method, params)
                await self.rounds.govern_responses(session, params, context, record, asked)
            client_params = params  # as sent: what a bridged call's retries must repeat (see `_forward`)
            approver = approvals.approver(session, downstream, context, params, granted) if approvals else None
            params = await governor.govern_request(method, params, context, record, approver)
            route = await self.listings.route(session, method, params, check=True)  # policy sees the final payload
            conn = await self.listings.serving(session, method, route, held)
            offered = conn.info.capabilities if conn.info is not None else None
            if method == "tools/call" and (refused := routed_task_refusal(params, conn.name, conn.era, offered)):
                raise refused
            upstream_params = renamed(method, params, route)
            if record.enabled:  # built only when there is a trail
                # What goes upstream is the approved payload, renamed for the upstream: intent and executed alike.
                sent = {"method": method, "params": recorded(upstream_params)}
                await record.dispatched(executed=sent, intent=sent)
        except ApprovalRound as round_:
            return round_.result  # the call waits for the client's retry with the answers (its record too)
        except MCPError as exc:
            await self.replies.refused(record, method, exc, session, request_id, target)
        except anyio.get_cancelled_exc_class():
            if record is not None:  # cancelled while its request chain ran, or after: closed before dispatch
                await record.cancelled(method, session.ended_error())
            raise
        try:
            headers = self._param_headers(session, conn, method, params, upstream_params.get("arguments"))
            result = await self._forward(
                governor,
                session,
                conn,
                method,
                upstream_params,
                context,
                downstream,
                record,
                headers,
                client_params=client_params,
                granted=approver.granted if approver is not None else {},
            )
        except MCPError as exc:
            await self.replies.failed(record, method, exc)
        except anyio.get_cancelled_exc_class():
            await record.cancelled(method, session.ended_error())  # the client gave up on the call: the trail says so
            raise
        return await self.replies.settled(result, record)

    async def _forward(
        self,
        governor: Governor,
        session: DownstreamSession,
        conn: UpstreamConnection,
        method: str,
        upstream_params: dict[str, Any],
        context: InvocationContext,
        downstream: Downstream,
        record: CallRecord,
        headers: dict[str, str],
        *,
        client_params: Mapping[str, Any] | None,
        granted: Granted,
    ) -> dict[str, Any]:
        """Send the call and govern what comes back, including `input_required` rounds."""
        relay = progress_relay(downstream, upstream_params)
        if session.era == "2026-07-28" and conn.era == "legacy":
            # What a retry of this call must repeat: the client's request, as sent, but for its answers.
            asked = {"method": method, "params": without_meta(without_answers(client_params))}
            result = await self.rounds.bridged_call(session, conn, method, upstream_params, downstream, relay, asked)
        else:
            result = await conn.request(
                method, upstream_params, on_progress=relay, headers=headers, on_notify=downstream.notify_related
            )
        if self.tasks is not None and is_task_augmented(upstream_params) and (task := created_task(result)):
            # The task's result, fetched with tasks/result, gets the response chain then, on this call's record.
            await self.tasks.created(session, conn.name, task, record)
            return self.tasks.scrubbed(result)  # its status message is scrubbed; no chain runs on it
        if result.get("resultType") == "task":  # 2026-07-28: its result, inlined on tasks/get, is governed there
            if self.tasks is None or self.tasks.extension is None:
                raise ungoverned_task(method, conn.name)
            created = await self.tasks.extension.created(session, conn, method, upstream_params, result, record)
            return created if created is not None else result
        for _ in range(MAX_INPUT_ROUNDS):
            if result.get("resultType") != "input_required":
                if method == "completion/complete":  # no event: no guard sees the values (D18)
                    result = self.replies.scrub_result(result)
                return await governor.govern_response(method, result, context, record)
            governed = await self.rounds.govern_requests(session, result, context, record)
            if session.era != "legacy":
                if conn.era == "2026-07-28":  # the retry may land on any replica: the gateway's sealed token
                    governed = sealed_round(
                        self.request_states, session.key, conn.name, method, client_params, governed
                    )
                await record.answered(Leg(method, "response", None, result), governed)
                if self.approvals is not None:  # its retry is this call: what a person approved stays approved
                    self.approvals.carry(session, governed, granted)
                return governed  # a 2026-07-28 client answers and retries itself
            # Bridge: a handshake-era client gets the embedded requests as ordinary server requests.
            state = result.get("requestState")
            requests = governed.get("inputRequests") or {}
            answers = await self.rounds.ask_client(session, requests, state, downstream, context, record)
            retry = {**upstream_params, "inputResponses": answers, "requestState": state}
            result = await conn.request(method, retry, on_progress=relay, headers=headers)
        raise MCPError(-32603, f"{method}: upstream asked for input more than {MAX_INPUT_ROUNDS} times")

    async def _task_request(
        self,
        tasks: TaskRelay,
        session: DownstreamSession,
        method: str,
        params: dict[str, Any] | None,
        downstream: Downstream,
        request_id: Any,
    ) -> dict[str, Any]:
        governor = self.governor.hold()
        try:
            return await tasks.serve(governor, session, method, params, downstream, request_id)
        finally:
            governor.release()

    def _param_headers(
        self,
        session: DownstreamSession,
        conn: UpstreamConnection,
        method: str,
        params: Mapping[str, Any] | None,
        arguments: Any,
    ) -> dict[str, str]:
        """`Mcp-Param-*` headers a 2026-07-28 HTTP upstream expects for a tool's `x-mcp-header` arguments."""
        if method != "tools/call" or not conn.is_http or conn.era != "2026-07-28" or session.catalog is None:
            return {}
        exposed = (params or {}).get("name")
        tool = session.catalog.item("tools/list", exposed) if isinstance(exposed, str) else None
        schema = tool.get("inputSchema") if tool is not None else None
        if not isinstance(schema, Mapping) or not isinstance(arguments, Mapping):
            return {}
        return mcp_param_headers(x_mcp_header_map(schema), arguments)
