"""The `Gateway`: one mcp `Server` whose middleware forwards every request to upstream sessions.

The downstream side is a bare low-level `Server` (so every serving transport and both eras work);
its one middleware hands requests to the right `DownstreamSession`. The gateway also answers, as an
interceptor host, `interceptors/list` (what it enforces), `interceptor/invoke`, and, opt-in,
`interceptor/executeChain`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
)
from mcp.shared.message import ServerMessageMetadata
from mcp_types import CONNECTION_CLOSED, Notification, Request, Result
from mcp_types import methods as wire_methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, ValidationError

from mcp_interceptors.executor import Call
from mcp_interceptors.gateway.auth import current_principal
from mcp_interceptors.gateway.bridge import BRIDGE_TIMEOUT_S, Bridges
from mcp_interceptors.gateway.config import GatewayConfig
from mcp_interceptors.gateway.host_input import chain_body, result_body, vouched_context
from mcp_interceptors.gateway.jsonrpc.framing import INTERNAL_ERROR, INVALID_REQUEST, too_many_in_flight
from mcp_interceptors.gateway.legs import Governor
from mcp_interceptors.gateway.metrics import GatewayMetrics, serve_metrics
from mcp_interceptors.gateway.recording import RECEIPT_META_KEY, CallRecord, Leg, OpenInput, receipt_meta
from mcp_interceptors.gateway.routing import CALLS, LISTS, Catalog
from mcp_interceptors.gateway.scrub import Scrubber
from mcp_interceptors.gateway.session import STDIO_SESSION_KEY, DownstreamSession, Era
from mcp_interceptors.gateway.tasks import without_tasks
from mcp_interceptors.gateway.upstream.connection import UpstreamConnection
from mcp_interceptors.gateway.upstream.errors import UpstreamUnavailableError
from mcp_interceptors.gateway.upstream.handshake import GATEWAY_CLIENT_INFO
from mcp_interceptors.host import parse_invoke_params

if TYPE_CHECKING:
    from mcp_interceptors.audit import RecordWriter
from mcp_interceptors.invoker import Chain
from mcp_interceptors.planning import direction_for
from mcp_interceptors.protocol.chain import ChainExecutionParams
from mcp_interceptors.protocol.descriptors import InterceptorDescriptor, supported_events
from mcp_interceptors.protocol.errors import (
    REQUEST_CANCELLED,
    HookMismatchError,
    InterceptorNotFoundError,
    InterceptorsError,
    unknown_interceptors_error,
)
from mcp_interceptors.protocol.events import EXTENSION_ID
from mcp_interceptors.protocol.invoke import (
    EXECUTE_CHAIN_METHOD,
    INVOKE_METHOD,
    LIST_METHOD,
    InvocationContext,
    Principal,
    RawParams,
    check_payload,
)

logger = logging.getLogger(__name__)
#: The session of 2026-07-28 requests without a token (see `session_key`).
ANONYMOUS_SESSION_KEY = "modern:anonymous"
#: Sessions of the legacy SSE endpoint are keyed by its `session_id` query parameter, so prefixed.
SSE_SESSION_PREFIX = "sse:"

#: Requests the gateway's own `Server` answers instead of forwarding.
LOCAL_METHODS = frozenset(
    {"initialize", "server/discover", "ping", "subscriptions/listen", LIST_METHOD, INVOKE_METHOD, EXECUTE_CHAIN_METHOD}
)
#: With several upstreams, how long the start waits for the others once one is connected (they go on
#: connecting in the background and are listed when they are up).
_START_GRACE_S = 10.0
#: How long a request an upstream sends before the stdio client's handshake waits for that client.
_STDIO_CLIENT_WAIT_S = 30.0
#: Input requests awaiting a 2026-07-28 client's answer that the audit trail keeps linkable (oldest go first).
_OPEN_INPUTS_KEPT = 10_000
_CAPABILITY_KEYS = ("tools", "prompts", "resources", "logging", "completions")
#: Tool schemas whose `x-mcp-header` check is remembered (all are forgotten past it: listings are refreshed).
_HEADER_SCHEMAS_KEPT = 4096


class RawRequest(Request[dict[str, Any] | None, str]):
    method: str
    params: dict[str, Any] | None = None


class RawNotification(Notification[dict[str, Any] | None, str]):
    method: str
    params: dict[str, Any] | None = None


class RawResult(Result):
    model_config = ConfigDict(extra="allow")


class ServerSessionDownstream:
    """Reaches the client through mcp's `ServerSession`: on the request's own stream when in flight."""

    def __init__(self, ctx: ServerRequestContext[Any, Any], *, scoped: bool = True) -> None:
        self.ctx = ctx
        self.scoped = scoped and ctx.request_id is not None

    async def request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        metadata = ServerMessageMetadata(related_request_id=self.ctx.request_id) if self.scoped else None
        raw = await self.ctx.session.send_request(
            RawRequest(method=method, params=params),  # type: ignore[arg-type]
            RawResult,
            metadata=metadata,
        )
        return raw.model_dump(by_alias=True, mode="json", exclude_unset=True)

    async def notify(self, method: str, params: dict[str, Any] | None) -> None:
        await self.ctx.session.send_notification(RawNotification(method=method, params=params))  # type: ignore[arg-type]

    async def notify_related(self, method: str, params: dict[str, Any] | None) -> None:
        notification = RawNotification(method=method, params=params)
        await self.ctx.session.send_notification(notification, related_request_id=self.ctx.request_id)  # type: ignore[arg-type]

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        await self.ctx.session.report_progress(progress, total, message)


class Gateway:
    """Fronts the configured upstreams and enforces the chain on every governed message."""

    def __init__(self, config: GatewayConfig, chain: Chain, *, audit_writer: RecordWriter | None = None) -> None:
        self.config = config
        self.chain = chain
        self.governor = Governor(
            chain,
            deadline_ms=config.chain.deadline_ms,
            include_details=config.chain.include_error_details,
            directions=config.chain.directions,
            config=config.interceptors.config or None,
        )
        #: Kept only when something exposes them (`http.metrics`, `metrics.listen`): otherwise no cost at all.
        self.metrics: GatewayMetrics | None = None
        if config.collects_metrics:
            self.metrics = GatewayMetrics(
                config.upstreams,
                open_sessions=lambda: len(self.sessions),
                connections=self.upstream_connections,
                audit_stats=lambda: self.audit_writer.stats if self.audit_writer is not None else None,
            )
            self.governor.metrics = self.metrics
        #: [OURS] Redacts errors, log lines and progress messages with the `secrets`/`pii` guards' scanners.
        self.scrubber = Scrubber.from_config(config)
        self.prefixes = {name: config.prefix_for(name) for name in config.upstreams}
        self.shared: dict[str, UpstreamConnection] = {}
        # keyed by downstream session too: an upstream's requestState may be the same for every call (a constant)
        self._open_inputs: OrderedDict[tuple[str, str, str], OpenInput] = OrderedDict()
        self.sessions: dict[str, DownstreamSession] = {}
        #: id(inputSchema) -> (that schema, whether it declares an `x-mcp-header`): see `tool_input_schema`
        self._header_schemas: dict[int, tuple[Mapping[str, Any], bool]] = {}
        #: session key -> its HTTP requests in flight (`http.max_requests_in_flight`); gone at 0
        self._in_flight: dict[str, int] = {}
        #: sessions refused since they were last under the cap: one warning each time a session reaches it
        self._at_cap: set[str] = set()
        #: Shutting down (`close_upstreams`): no upstream session opens any more.
        self.closing = False
        #: The `sessionId` guards see for the stdio client (see `STDIO_SESSION_KEY`).
        self.stdio_session_id = f"stdio:{uuid.uuid4().hex}"
        self.bus = InMemorySubscriptionBus()
        self.bridges = Bridges(on_end=self._bridged_call_ended)
        #: (upstream, uri) -> listen streams of 2026-07-28 clients subscribed to it there
        self._listen_subscriptions: dict[tuple[str, str], int] = {}
        self.startup_catalog: Catalog | None = None
        self.audit_writer = audit_writer
        self._stdio_client: anyio.Event | None = None
        #: Upstreams that refused a handshake-era session: their handshake-era clients use the shared one.
        self.handshake_refused: set[str] = set()
        #: Upstreams whose handshake-era sessions advertised `resources.subscribe` (its 2026-07-28 flag says
        #: subscriptions/listen serves resources, not that resources/subscribe works in that era).
        self.handshake_subscribe: set[str] = set()
        self.server: Server[Any] = Server(
            config.name,
            version=GATEWAY_CLIENT_INFO["version"],  # serverInfo needs one: clients warn on an empty version
            on_subscriptions_listen=ListenHandler(self.bus),
        )
        # mcp installs a tracing middleware by default; it costs on every forwarded message and the
        # gateway records its own decisions, so the gateway's middleware is the only one.
        self.server.middleware[:] = [self.middleware]
        # mcp validates `Mcp-Param-*` headers (SEP-2243) against the called tool's schema before dispatch.
        self.server.get_tool_input_schema = self.tool_input_schema
        self._register_host_methods()
        self._tg: anyio.abc.TaskGroup | None = None

    # ------------------------------------------------------------------ lifecycle

    def tool_input_schema(self, name: str) -> Mapping[str, Any] | None:
        """The `inputSchema` of an exposed tool, from the freshest listing any session holds; None when it
        declares no `x-mcp-header` (mcp then has no header to check, and skips walking the schema)."""
        catalogs = [session.catalog for session in reversed(self.sessions.values())] + [self.startup_catalog]
        for catalog in catalogs:
            tool = catalog.item("tools/list", name) if catalog is not None else None
            if tool is not None and isinstance(tool.get("inputSchema"), Mapping):
                schema: Mapping[str, Any] = tool["inputSchema"]
                return schema if self._declares_headers(schema) else None
        return None

    def _declares_headers(self, schema: Mapping[str, Any]) -> bool:
        """Whether `x-mcp-header` appears anywhere in `schema`, remembered per listed schema (by identity:
        a listing's items are not changed in place, only replaced)."""
        known = self._header_schemas.get(id(schema))
        if known is not None and known[0] is schema:
            return known[1]
        if len(self._header_schemas) >= _HEADER_SCHEMAS_KEPT:
            self._header_schemas.clear()
        declares = _mentions(schema, "x-mcp-header")
        self._header_schemas[id(schema)] = (schema, declares)
        return declares

    def new_record(self, context: InvocationContext) -> CallRecord:
        """The audit record of one call (inert when auditing is off)."""
        if self.audit_writer is None:
            return CallRecord(None, context, call_id="")
        return CallRecord(self.audit_writer, context)

    async def open_input(self, session: str, request_state: str, key: str, opened: OpenInput) -> None:
        """Remember an input request sent to a 2026-07-28 client of downstream `session`, until its answer
        comes. The oldest is forgotten past `_OPEN_INPUTS_KEPT`, its audit call closed (an answer to it opens a
        call of its own)."""
        self._open_inputs[(session, request_state, key)] = opened
        while len(self._open_inputs) > _OPEN_INPUTS_KEPT:
            _, oldest = self._open_inputs.popitem(last=False)
            await self._unanswered(oldest, f"{_OPEN_INPUTS_KEPT} newer input requests were awaiting answers")

    def close_input(self, session: str, request_state: str, key: str) -> OpenInput | None:
        """The input request an answer in a retry of downstream `session` responds to, if one is open: never
        another session's, whose upstream call may have been given the same `requestState`."""
        return self._open_inputs.pop((session, request_state, key), None)

    async def forget_inputs(self, why: str, keys: Iterable[tuple[str, str, str]] | None = None) -> None:
        """Forget input requests still awaiting answers (those `(session, request_state, key)` names, else all): they
        will not be answered (`why`: their call ended, the gateway stops), so their audit calls are closed."""
        for key in list(self._open_inputs) if keys is None else keys:
            opened = self._open_inputs.pop(key, None)
            if opened is not None:
                await self._unanswered(opened, why)

    async def _bridged_call_ended(self, token: str) -> None:
        """A bridged call is over (its result taken, or it expired): its questions can no longer be answered."""
        if self._open_inputs:
            ended = [key for key in self._open_inputs if key[1] == token]
            await self.forget_inputs(
                f"the bridged call ended (bridged calls last at most {BRIDGE_TIMEOUT_S:g} s)", ended
            )

    async def _unanswered(self, opened: OpenInput, why: str) -> None:
        if self.audit_writer is not None and opened.call_id and opened.context is not None:
            record = CallRecord(self.audit_writer, opened.context, call_id=opened.call_id, opened=True)
            message = f"never answered: {why}"
            await record.cancelled(opened.method, MCPError(REQUEST_CANCELLED, message, {"reason": "input_unanswered"}))

    async def start(self, tg: anyio.abc.TaskGroup, *, connect: bool = True) -> None:
        """Start the audit writer and, unless `connect` is false (a stdio gateway waits for its client
        to say who it is), connect the upstreams."""
        self._tg = tg
        if self.audit_writer is None and self.config.audit.enabled:
            self.audit_writer = await start_audit_writer(self.config, tg)
        if self.metrics is not None and (address := self.config.metrics.address) is not None:
            await tg.start(serve_metrics, self.metrics, *address)
        if connect:
            await self.connect_upstreams()
        tg.start_soon(self.sweep_idle_sessions, self.config.http.session_idle_s)

    @property
    def connected(self) -> bool:
        """Whether the upstreams are connected (a stdio gateway waits for its client's first message)."""
        return self.startup_catalog is not None

    async def connect_upstreams(
        self, client_params: Mapping[str, Any] | None = None, client_era: Era | None = None
    ) -> None:
        """Connect every upstream and check collisions. If none can start, fail with the first one's error;
        if some can, serve with those and keep retrying the others (listed once they connect).

        `client_params` are the `initialize` params the connections present and `client_era` the era
        that `era: auto` upstreams try first: a stdio gateway's one client's, else the gateway's own
        identity, every client feature it relays, and 2026-07-28 first.
        """
        tg = self._tg
        assert tg is not None, "gateway not started"
        conns = {
            name: UpstreamConnection(
                name,
                upstream_config,
                era="legacy-first" if client_era == "legacy" and upstream_config.era == "auto" else "auto",
                client_params=client_params,
                on_request=self._shared_request_handler(name),
                on_notify=self._shared_notify_handler(name),
            )
            for name, upstream_config in self.config.upstreams.items()
        }
        for name, conn in conns.items():
            self._time_requests(name, conn)
        failures: dict[str, Exception] = {}
        one_ready = anyio.Event()
        pending = set(conns)

        async def connect(name: str, conn: UpstreamConnection) -> None:
            try:
                await tg.start(conn.run)
                one_ready.set()
            except Exception as exc:
                failures[name] = exc
            pending.discard(name)
            if not pending:
                starting.cancel_scope.cancel()  # every one settled: no grace left to wait out

        async def grace() -> None:
            """One upstream that hangs in its start-up does not hold the others back for long."""
            await one_ready.wait()
            await anyio.sleep(_START_GRACE_S)
            for name in pending:
                failures[name] = UpstreamUnavailableError(
                    CONNECTION_CLOSED, f"upstream {name!r} did not connect within {_START_GRACE_S:g} s of the first"
                )
            starting.cancel_scope.cancel()

        # All at once: a client waits on the slowest server's start-up, not on the sum of them.
        async with anyio.create_task_group() as starting:
            for name, conn in conns.items():
                starting.start_soon(connect, name, conn)
            if len(conns) > 1:
                starting.start_soon(grace)
        if failures and len(failures) == len(conns):
            raise next(failures[name] for name in conns if name in failures)  # the first in config order
        for name, exc in failures.items():
            # Several upstreams: the others serve; this one is retried with backoff and listed once back.
            logger.error("upstream %r is unavailable (%s); serving without it until it connects", name, exc)
            conns[name].left_out = True
            tg.start_soon(partial(conns[name].run, retry_start=True))
        self.shared.update(conns)
        probe = DownstreamSession(self, key="startup", era="2026-07-28")
        await probe.refresh_catalog()  # raises RoutingError on a collision
        self.startup_catalog = probe.catalog

    async def sweep_idle_sessions(self, idle_s: float, *, every_s: float | None = None) -> None:
        """Close handshake-era sessions (and their upstream sessions) unused for `idle_s` seconds.

        Sweeps every `every_s` seconds, by default a quarter of `idle_s` (at most a minute): a session
        closes at most a quarter late.
        """
        if every_s is None:
            every_s = min(60.0, idle_s / 4)
        while True:
            await anyio.sleep(every_s)
            cutoff = time.monotonic() - idle_s
            for key, session in list(self.sessions.items()):
                if session.last_used < cutoff and not session.inflight:
                    logger.info("closing idle session %s", key)
                    self.close_session(key, why=f"the client's session was idle for {idle_s:g} s")

    async def open_session_upstreams(self, session: DownstreamSession) -> dict[str, UpstreamConnection]:
        """Per-session upstream sessions for a handshake-era client, presenting its own initialize params.
        Ending the session (or shutting down) meanwhile closes those opened so far and raises -32000 at once."""
        try:
            return await self._open_session_upstreams(session)
        finally:
            session.opening.clear()

    async def _open_session_upstreams(self, session: DownstreamSession) -> dict[str, UpstreamConnection]:
        assert self._tg is not None, "gateway not started"
        conns: dict[str, UpstreamConnection] = {}
        down: list[UpstreamUnavailableError] = []
        for name, upstream_config in self.config.upstreams.items():
            if session.ended or self.closing:  # shutting down, or the session ended: it opens nothing more
                self._close_own(session.opening, self._closing_why())
                why = "the gateway is shutting down" if self.closing else "the session ended"
                message = f"{why}: no session is opened with upstream {name!r}"
                raise UpstreamUnavailableError(CONNECTION_CLOSED, message, {"upstream": name})
            conn = UpstreamConnection(
                name,
                upstream_config,
                era="legacy",
                client_params=session.client_params,
                on_request=partial(session.from_upstream, name),
                on_notify=partial(session.upstream_notification, name),
            )
            self._time_requests(name, conn)
            session.opening.append(conn)  # closing the session meanwhile closes it (see `close_session`)
            shared = self.shared.get(name)
            if shared is not None and not shared.up and len(self.config.upstreams) > 1:
                # Down for the gateway too: not worth a session's wait; it joins the session once it connects.
                if name in self.handshake_refused:
                    conns[name] = shared  # it reconnects itself
                    continue
                conn.left_out = True
                self._tg.start_soon(partial(conn.run, retry_start=True))
                down.append(shared.unavailable())
                conns[name] = conn
                continue
            try:
                await conn.open(self._tg)
                if conn.info is not None and (conn.info.capabilities.get("resources") or {}).get("subscribe"):
                    self.handshake_subscribe.add(name)
            except UpstreamUnavailableError as exc:
                if session.ended or self.closing:  # closed while it opened: none of the others may outlive it
                    self._close_own(session.opening, self._closing_why())
                    raise
                if shared is not None and shared.era == "2026-07-28":
                    # A 2026-07-28-only upstream: share its connection; input requests are bridged per call.
                    logger.info("upstream %r refuses a handshake-era session; bridging through the shared one", name)
                    self.handshake_refused.add(name)
                    conn = shared
                elif len(self.config.upstreams) == 1:
                    raise
                else:  # down: the session uses the others, and this one joins when it connects
                    logger.error("upstream %r is unavailable for session %s: %s", name, session.key, exc.message)
                    conn.left_out = True
                    self._tg.start_soon(partial(conn.run, retry_start=True))
                    down.append(exc)
            conns[name] = conn
        if len(down) == len(conns):
            for conn in conns.values():
                conn.close()  # all the session's own: a shared connection is never counted down here
            if len(down) == 1:
                raise down[0]
            # Every one: naming only the first said a call to another upstream's tool failed on that one.
            names = list(conns)
            reasons = "; ".join(exc.message for exc in down)
            message = f"no upstream session could be opened: {reasons}"
            raise UpstreamUnavailableError(CONNECTION_CLOSED, message, {"upstreams": names})
        return conns

    def upstream_connections(self) -> list[tuple[str, bool]]:
        """`(upstream, up)` for every open upstream connection, each once: the shared ones and the
        handshake-era sessions' own (the metrics' `upstream_up` and `upstream_connections`)."""
        conns = {id(conn): conn for conn in self.shared.values()}
        for session in self.sessions.values():
            conns.update((id(conn), conn) for conn in session.upstreams.values())
        return [(conn.name, conn.up) for conn in conns.values() if not conn.closed]

    def _close_own(self, conns: Iterable[UpstreamConnection], why: str) -> None:
        """Close those of `conns` that are a session's own (never a shared connection)."""
        shared = {id(conn) for conn in self.shared.values()}
        for conn in conns:
            if id(conn) not in shared:
                conn.close(why)

    def _closing_why(self) -> str:
        return "shutting down" if self.closing else "the client's session ended"

    def _time_requests(self, name: str, conn: UpstreamConnection) -> None:
        """Metrics for an upstream connection, and the scrub of the log lines and progress it relays."""
        conn.scrubber = self.scrubber
        if self.metrics is not None:
            conn.on_duration = self.metrics.upstream_timer(name)
            conn.on_restart = self.metrics.upstream_restarter(name)

    def close_upstreams(self) -> None:
        """Close every upstream connection, shared and per-session (shutting down): calls still waiting
        on one fail with an error naming it."""
        self.closing = True  # a session opened from now on (a request already on its way) opens no upstream
        for key in list(self.sessions):
            self.close_session(key)
        for conn in self.shared.values():
            conn.close()

    def end_session_calls(self, key: str, principal: Principal | None) -> bool:
        """A handshake-era client ends its session (HTTP `DELETE`): its requests in flight end first, each
        answered -32000 and cancelled upstream, while their streams are open. Whether any was; nothing ends
        when the session is not `principal`'s (mcp then answers the `DELETE` 404)."""
        session = self.sessions.get(key)
        if session is None or session.era != "legacy" or _owner(session.principal) != _owner(principal):
            return False
        return session.end_calls("the client ended its session (HTTP DELETE)")

    def close_session(self, key: str, *, why: str | None = None) -> None:
        """End a handshake-era session's upstream sessions, those still opening too: a call waiting for one
        gets -32000 naming it, and `why` (by default: shutting down, or the client ended the session), at once."""
        session = self.sessions.pop(key, None)
        if session is None or session.era != "legacy":
            return
        session.ended = True
        self._close_own([*session.opening, *session.upstreams.values()], why or self._closing_why())

    # ------------------------------------------------------------------ the middleware

    async def middleware(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        method = ctx.method
        if ctx.request_id is None:
            if method in wire_methods.SPEC_CLIENT_METHODS:
                # A request whose id mcp's models cannot read (null, a fraction, an object) comes as a notification:
                # relayed, a `tools/call` reached the upstream past the chain. A direct server ignores it too.
                logger.warning("ignored a %s without a usable id (a string or an integer)", method)
            elif method not in ("notifications/cancelled", "notifications/initialized"):
                params = dict(ctx.params) if ctx.params is not None else None
                await self.session_for(ctx).client_notification(method, params)
            return await call_next(ctx)
        key = self._http_session_key(ctx)
        if key is None:
            return await self._request(ctx, call_next)
        self._claim_a_request_slot(key)
        try:
            return await self._request(ctx, call_next)
        finally:
            self._release_a_request_slot(key)

    def _http_session_key(self, ctx: ServerRequestContext[Any, Any]) -> str | None:
        """What an HTTP request counts against for `http.max_requests_in_flight`: the key of its
        `DownstreamSession`, and for a 2026-07-28 request without a token, the address it came from (those share
        one session, but one client's slow calls must not use up every other client's budget). None off HTTP
        (the stdio front counts its own) and for a handshake-era request without a session yet (an
        `initialize`: `http.max_sessions` bounds those)."""
        if ctx.request is None:
            return None
        era, transport_session = self._era_and_transport_session(ctx)
        if era == "legacy" and transport_session is None:
            return None
        principal = current_principal()
        key = session_key(era, transport_session, principal)
        if era != "legacy" and principal is None:
            peer = ctx.request.client
            key += f"@{peer.host if peer is not None else 'unknown'}"
        return key

    def _claim_a_request_slot(self, key: str) -> None:
        """Count one more request in flight for session `key`, or refuse it past the limit (as the stdio
        front does): each held a task, its body and an upstream call, with no bound."""
        limit = self.config.http.max_requests_in_flight
        held = self._in_flight.get(key, 0)
        if held >= limit:
            if key not in self._at_cap:  # once per time at the cap: a client retrying in a loop floods no log
                self._at_cap.add(key)
                logger.warning(
                    "refusing requests of session %s: %d requests in flight (http.max_requests_in_flight)",
                    key[:64],
                    limit,
                )
            message, data = too_many_in_flight(limit, "http.max_requests_in_flight")
            if key.startswith(ANONYMOUS_SESSION_KEY + "@"):
                message += (
                    "; requests without a token count per client address: for a limit of its own, give each "
                    "client a token (`auth.tokens`)"
                )
            raise MCPError(INTERNAL_ERROR, message, data)
        self._in_flight[key] = held + 1

    def _release_a_request_slot(self, key: str) -> None:
        self._at_cap.discard(key)
        left = self._in_flight[key] - 1
        if left:
            self._in_flight[key] = left
        else:
            del self._in_flight[key]

    async def _request(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        method = ctx.method
        if method == "subscriptions/listen" and ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return await self._listen(ctx, call_next)
        if method in LOCAL_METHODS:
            result: HandlerResult = await call_next(ctx)
            if method in ("initialize", "server/discover") and isinstance(result, dict):
                self._advertise(result, legacy=method == "initialize")
            return result
        params = dict(ctx.params) if ctx.params is not None else None
        self._check_surface(method, ctx.protocol_version, params)
        session = self.session_for(ctx)
        if session.standalone is None:
            # What the upstreams send outside any call (roots/list after a list_changed, say) goes on the
            # connection's own channel (the GET stream on HTTP): a request's stream closes with its request.
            session.standalone = ServerSessionDownstream(ctx, scoped=False)
        try:
            return await session.handle(method, params, ServerSessionDownstream(ctx), ctx.request_id)
        except InterceptorsError as exc:
            raise MCPError(exc.code, exc.message, exc.data) from None

    async def _listen(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """A 2026-07-28 `subscriptions/listen`: its `resourceSubscriptions` are the client's
        `resources/subscribe` (that era has no such request), governed and sent to each resource's
        handshake-era upstream, which sends updates only for what it was subscribed to. The upstream
        is unsubscribed when the last stream that wanted a resource ends."""
        # A malformed listen gets an error naming the field, not mcp's bare one.
        self._check_surface(ctx.method, ctx.protocol_version, ctx.params)
        notifications = (ctx.params or {}).get("notifications")
        wanted = notifications.get("resourceSubscriptions") if isinstance(notifications, Mapping) else None
        if not isinstance(wanted, list) or not wanted:
            return await call_next(ctx)
        session = self.session_for(ctx)
        subscribed: list[tuple[UpstreamConnection, str]] = []
        try:
            for uri in dict.fromkeys(uri for uri in wanted if isinstance(uri, str)):
                conn = await session.subscription_owner(uri)
                if conn is None:
                    continue
                # Counted before the upstream is asked, so a stream ending meanwhile does not unsubscribe it.
                key = (conn.name, uri)
                self._listen_subscriptions[key] = self._listen_subscriptions.get(key, 0) + 1
                subscribed.append((conn, uri))
                await session.subscribe(uri, ServerSessionDownstream(ctx), ctx.request_id)
            return await call_next(ctx)
        except InterceptorsError as exc:
            raise MCPError(exc.code, exc.message, exc.data) from None
        finally:
            with anyio.CancelScope(shield=True):
                for conn, uri in subscribed:
                    await self._listen_unsubscribe(conn, uri)

    async def _listen_unsubscribe(self, conn: UpstreamConnection, uri: str) -> None:
        key = (conn.name, uri)
        left = self._listen_subscriptions.get(key, 1) - 1
        if left > 0:
            self._listen_subscriptions[key] = left
            return
        self._listen_subscriptions.pop(key, None)
        try:
            with anyio.fail_after(conn.config.timeout_ms / 1000):
                await conn.request("resources/unsubscribe", {"uri": uri})
        except (MCPError, TimeoutError) as exc:
            logger.info("upstream %r: resources/unsubscribe %s failed: %s", conn.name, uri, exc)

    def _check_surface(self, method: str, version: str, params: Mapping[str, Any] | None) -> None:
        """Answer malformed or era-foreign spec requests as a direct server would."""
        if method not in wire_methods.SPEC_CLIENT_METHODS:
            return
        try:
            wire_methods.validate_client_request(method, version, params)
        except KeyError:
            raise MCPError(-32601, "Method not found", method) from None
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            field = ".".join(str(part) for part in error["loc"][1:]) or "params"
            raise MCPError(-32602, f"Invalid request parameters: {field}: {error['msg']}", {"field": field}) from None
        except ValueError:
            return

    def session_for(self, ctx: ServerRequestContext[Any, Any]) -> DownstreamSession:
        era, header = self._era_and_transport_session(ctx)
        principal = current_principal()
        params = None
        if session_key(era, header, principal) not in self.sessions:  # the client's params count when it opens
            client_params = ctx.session.client_params
            params = client_params.model_dump(by_alias=True, mode="json", exclude_none=True) if client_params else None
        return self.session(era, header, principal, params)

    @staticmethod
    def _era_and_transport_session(ctx: ServerRequestContext[Any, Any]) -> tuple[Era, str | None]:
        """The request's era and, for a handshake-era HTTP request, the transport session it names."""
        era: Era = "2026-07-28" if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS else "legacy"
        request = ctx.request
        header = None
        if request is not None and era == "legacy":
            header = request.headers.get("mcp-session-id")
            if header is None and (sse := request.query_params.get("session_id")):  # the legacy SSE endpoint
                header = SSE_SESSION_PREFIX + sse
        return era, header

    def session(
        self,
        era: Era,
        transport_session: str | None,
        principal: Principal | None,
        client_params: dict[str, Any] | None,
    ) -> DownstreamSession:
        """The session a request belongs to: a handshake-era client's by its transport session (one
        `default` session on stdio), 2026-07-28 requests by principal."""
        key = session_key(era, transport_session, principal)
        session = self.sessions.get(key)
        if session is not None and _owner(session.principal) != _owner(principal):
            # Transports bind a session to the credential that opened it; this holds whatever names the key.
            logger.warning("refused a request for session %s: it belongs to another principal", key[:64])
            raise MCPError(INVALID_REQUEST, "Session not found", {"reason": "session belongs to another principal"})
        if session is not None:
            session.principal = principal  # the same caller; its latest token's claims (roles, scopes) count
        else:
            if era == "legacy" and transport_session is not None:
                self._check_room_for_a_session()
            session = DownstreamSession(self, key=key, era=era, principal=principal, client_params=client_params)
            if era == "legacy" and self._can_share(session):
                session.upstreams = dict(self.shared)
                for conn in self.shared.values():
                    conn.speak_for(client_params)
            self.sessions[key] = session
        session.last_used = time.monotonic()
        return session

    def _check_room_for_a_session(self) -> None:
        """Each handshake-era HTTP session opens upstream sessions of its own (a process per stdio
        upstream): past `http.max_sessions` a new one is refused, not opened."""
        limit = self.config.http.max_sessions
        if sum(1 for session in self.sessions.values() if session.era == "legacy") >= limit:
            logger.warning("refused a new session: %d sessions are open (http.max_sessions)", limit)
            message = f"the gateway serves at most {limit} sessions; end one (or wait for an idle one to close)"
            data = {"reason": "too_many_sessions", "limit": limit, "setting": "http.max_sessions"}
            raise MCPError(INTERNAL_ERROR, message, data)

    def _can_share(self, session: DownstreamSession) -> bool:
        """A stdio gateway has one client: it adopts the startup connections, so each upstream runs once.

        A 2026-07-28 connection serves a handshake-era client through the bridge (its `input_required`
        rounds become server requests), as it does for an upstream that speaks only 2026-07-28.
        """
        return session.key == STDIO_SESSION_KEY

    # ------------------------------------------------------------------ shared connections

    def await_stdio_client(self) -> None:
        """Serving one stdio client: requests the upstreams send before its handshake wait for it.

        Servers ask for roots (say) right after their own handshake, which the gateway makes while the
        client's `initialize` waits, before the client can answer.
        """
        self._stdio_client = anyio.Event()

    def stdio_client_ready(self) -> None:
        """The stdio client finished its handshake (or sent a first request): held requests go on."""
        if self._stdio_client is not None:
            self._stdio_client.set()

    def _shared_request_handler(self, upstream: str) -> Any:
        """A request from a shared connection: to a bridged 2026-07-28 call, else to the stdio client."""

        async def handle(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
            try:
                bridged = self.bridges.asker(upstream, method)
            except MCPError as refused:
                logger.warning("upstream %r: %s", upstream, refused.message)
                raise
            if bridged is not None:
                return await bridged.ask(method, params)
            waiting = self._stdio_client
            if waiting is not None and not waiting.is_set():
                with anyio.move_on_after(_STDIO_CLIENT_WAIT_S):
                    await waiting.wait()
            session = self.sessions.get(STDIO_SESSION_KEY)
            if session is None or session.era != "legacy":
                raise MCPError(-32600, f"no downstream session can answer {method} from {upstream!r}")
            return await session.from_upstream(upstream, method, params)

        return handle

    @property
    def task_group(self) -> anyio.abc.TaskGroup:
        assert self._tg is not None, "gateway not started"
        return self._tg

    def _shared_notify_handler(self, upstream: str) -> Any:
        async def handle(method: str, params: dict[str, Any] | None) -> None:
            event = _bus_event(method, params)
            for session in list(self.sessions.values()):
                if session.era != "legacy" or session.upstreams.get(upstream) is self.shared.get(upstream):
                    await session.upstream_notification(upstream, method, params)
            if event is not None:
                await self.bus.publish(event)

        return handle

    # ------------------------------------------------------------------ advertisement

    def _advertise(self, result: dict[str, Any], *, legacy: bool) -> None:
        """Patch the handshake result: merged upstream capabilities plus our extension."""
        merged: dict[str, Any] = {}
        for name, conn in self.shared.items():
            caps = conn.info.capabilities if conn.info is not None else {}
            for key in _CAPABILITY_KEYS:
                if key in caps:
                    mine = merged.setdefault(key, {})
                    for flag, value in (caps[key] or {}).items():
                        if key == "resources" and flag == "subscribe" and self._unrelayed_subscribe(name, legacy):
                            continue
                        mine[flag] = bool(mine.get(flag)) or value
        settings = {"supportedEvents": supported_events(self.descriptors())}
        capabilities = {**merged, **{k: v for k, v in (result.get("capabilities") or {}).items() if k not in merged}}
        for key in _CAPABILITY_KEYS:
            if key not in merged:
                capabilities.pop(key, None)
        only = next(iter(self.shared.values())).info if len(self.shared) == 1 else None
        if only is not None:
            # One upstream: its extension methods are forwarded, so its extensions are advertised as it
            # advertises them (`extensions` only where the era's wire has them); ours wins on our own id.
            for key in ("experimental",) if legacy else ("experimental", "extensions"):
                if isinstance(theirs := only.capabilities.get(key), Mapping) and theirs:
                    capabilities[key] = {**theirs, **(capabilities.get(key) or {})}
        if legacy:
            capabilities["experimental"] = {**(capabilities.get("experimental") or {}), EXTENSION_ID: settings}
        else:
            capabilities["extensions"] = {**(capabilities.get("extensions") or {}), EXTENSION_ID: settings}
        # Never tasks, whatever an upstream advertises: the gateway refuses them (gateway/tasks.py).
        result["capabilities"] = without_tasks(capabilities)
        if only is not None and only.instructions:
            # No event carries the handshake: the scrub (D18) stands in for the guards.
            scrubber = self.scrubber
            result["instructions"] = only.instructions if scrubber is None else scrubber.result(only.instructions)

    def _unrelayed_subscribe(self, upstream: str, legacy: bool) -> bool:
        """Whether `upstream`'s `resources.subscribe` would promise the client what the gateway cannot relay.

        On a 2026-07-28 connection it promises `resourceSubscriptions` on subscriptions/listen: the gateway
        does not ask the upstream for those (README, Known limits), and a handshake-era client's
        resources/subscribe cannot be forwarded there either. A handshake-era client with sessions of its
        own is promised it once such a session showed the upstream serves resources/subscribe (an mcp
        server advertises the 2026-07-28 flag whenever it serves subscriptions/listen, and answers
        resources/subscribe `-32601` in the handshake era unless it has a handler)."""
        conn = self.shared.get(upstream)
        if conn is None or conn.era != "2026-07-28":
            return False
        return not legacy or self._bridges_handshake(upstream) or upstream not in self.handshake_subscribe

    def _bridges_handshake(self, upstream: str) -> bool:
        """Whether handshake-era clients reach `upstream` through its 2026-07-28 connection: a stdio
        gateway's client adopts it; an HTTP gateway's clients do once the upstream refused a session
        of their own (the first such client is advertised before its sessions open)."""
        conn = self.shared.get(upstream)
        if conn is None or conn.era != "2026-07-28":
            return False
        return self._stdio_client is not None or upstream in self.handshake_refused

    # ------------------------------------------------------------------ the gateway as an interceptor host

    def descriptors(self) -> list[InterceptorDescriptor]:
        """What the gateway enforces: each interceptor once, with its configured overrides applied."""
        seen: set[str] = set()
        out = []
        for entry in self.chain.entries:
            if entry.name not in seen:
                seen.add(entry.name)
                out.append(entry.effective())
        return out

    def _register_host_methods(self) -> None:
        self.server.add_request_handler(LIST_METHOD, RawParams, self._serve_list)
        self.server.add_request_handler(INVOKE_METHOD, RawParams, self._serve_invoke)
        if self.config.expose_execute_chain:
            self.server.add_request_handler(EXECUTE_CHAIN_METHOD, RawParams, self._serve_execute_chain)

    async def _serve_list(self, ctx: ServerRequestContext[Any, Any], params: RawParams) -> dict[str, Any]:
        event = (ctx.params or {}).get("event")
        if event is not None and not isinstance(event, str):  # as the plain host answers (host.py)
            raise MCPError(-32602, "interceptors/list: `event` must be a string", data={"field": "event"})
        found = self.descriptors()
        if event is not None:
            found = [d for d in found if d.matches_event(event)]
        return {"interceptors": [d.to_wire() for d in found]}

    async def _serve_invoke(self, ctx: ServerRequestContext[Any, Any], params: RawParams) -> dict[str, Any]:
        try:
            parsed = parse_invoke_params(ctx.params)
            entry = next((e for e in self.chain.entries if e.name == parsed.name), None)
            if entry is None:
                raise InterceptorNotFoundError(parsed.name)
            enforced = entry.effective()
            if not enforced.covers(parsed.event, parsed.phase):  # R22, as the gateway lists it (hooks narrowed)
                raise HookMismatchError(parsed.name, parsed.event, parsed.phase, [h.to_wire() for h in enforced.hooks])
            check_payload(parsed.payload, interceptor=parsed.name)
            check_payload(parsed.config, field="config", interceptor=parsed.name)
            context = self._host_context(ctx, parsed.context, parsed.event, parsed.phase, parsed.payload)
            configured = self.config.interceptors.config.get(parsed.name)
            update: dict[str, Any] = {"context": context}
            if configured is not None:  # the verdict the gateway enforces, not one the client configures
                update["config"] = dict(configured)
            call = Call.for_params(parsed.model_copy(update=update), entry.descriptor.type)
            result = await self.chain.sources[entry.source].invoke(call)
            return result_body(result, parsed.name)
        except InterceptorsError as exc:
            raise MCPError(exc.code, exc.message, exc.data) from None

    async def _serve_execute_chain(self, ctx: ServerRequestContext[Any, Any], params: RawParams) -> dict[str, Any]:
        body = {k: v for k, v in (ctx.params or {}).items() if k != "_meta"}
        try:
            parsed = ChainExecutionParams.model_validate(body)
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            field = ".".join(str(part) for part in error["loc"])
            message = f"Invalid interceptor/executeChain params: {field}: {error['msg']}"
            raise MCPError(-32602, message, {"field": field}) from None
        try:
            check_payload(parsed.payload, event=parsed.event, phase=parsed.phase)
            check_payload(parsed.config, field="config", event=parsed.event, phase=parsed.phase)
            unknown = sorted(set(parsed.config or {}) - {d.name for d in self.descriptors()})
            if unknown:  # as for `interceptors`: a misspelt name must not silently drop the caller's config
                raise unknown_interceptors_error(unknown, field="config")
            context = self._host_context(ctx, parsed.context, parsed.event, parsed.phase, parsed.payload)
            result = await self.chain.execute(
                parsed.event,
                parsed.phase,
                parsed.payload,
                direction=parsed.direction or direction_for("client", parsed.event, parsed.phase),
                config={**(parsed.config or {}), **self.config.interceptors.config},
                context=context,
                timeout_ms=parsed.timeout_ms,
                interceptors=parsed.interceptors,
            )
            body = chain_body(result)
            record = self.new_record(context)
            if not record.enabled:
                return body
            # A chain the gateway ran is recorded like a leg (docs/audit.md), and durable before the answer.
            leg = Leg(parsed.event, parsed.phase, result, parsed.payload)
            if result.allowed:
                await record.chain_ran(leg, result.final_payload)
                receipts = await record.settle()
            else:
                receipts = await record.denied(leg)
            meta = receipt_meta(receipts) if self.config.audit.receipts else None
            return body if meta is None else {**body, "_meta": {RECEIPT_META_KEY: meta}}
        except InterceptorsError as exc:
            raise MCPError(exc.code, exc.message, exc.data) from None

    def _host_context(
        self,
        ctx: ServerRequestContext[Any, Any],
        supplied: InvocationContext | None,
        event: str,
        phase: str,
        payload: Any,
    ) -> InvocationContext:
        """The context of a client's invoke or executeChain: principal and session from the gateway's own
        view of the request, exactly as its legs set them for this client, so guard state (rate limits,
        flows) is keyed the same; only the client's correlation fields pass through (spec §7)."""
        session = self.session_for(ctx)
        own = session.context(self.server_of(session, event, phase, payload), ctx.request_id)
        return vouched_context(own, supplied)

    def server_of(self, session: DownstreamSession, event: str, phase: str, payload: Any) -> str | None:
        """The upstream the gateway's legs would attribute `payload` to, as far as it can tell without
        asking: a call's owner by the catalog, else the only upstream (a listing request has none)."""
        if phase == "request" and event in CALLS:
            params = payload.get("params") if isinstance(payload, dict) and "method" in payload else payload
            key = params.get(CALLS[event][1]) if isinstance(params, dict) else None
            catalog = session.catalog or self.startup_catalog
            route = catalog.route(event, key) if catalog is not None and isinstance(key, str) else None
            if route is not None:
                return route.upstream
        if len(self.config.upstreams) != 1 or (phase == "request" and event in LISTS):
            return None
        return next(iter(self.config.upstreams))


def audit_store_location(config: GatewayConfig, *, create: bool = True) -> str:
    """The store URL or path; a relative path is relative to the config file, and its folder is created
    (unless `create=False`)."""
    target = config.audit.store
    if "://" in target:
        return target
    path = Path(target)
    if config.base_dir is not None and not path.is_absolute():
        path = Path(config.base_dir) / path
    if create:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # owner-only, as the store makes it
    return str(path)


def audit_key_location(config: GatewayConfig) -> Path | None:
    """The configured key file, relative to the config file's folder (None: the default location)."""
    if not config.audit.key_file:
        return None
    path = Path(config.audit.key_file).expanduser()
    if config.base_dir is not None and not path.is_absolute():
        path = Path(config.base_dir) / path
    return path


async def start_audit_writer(config: GatewayConfig, tg: anyio.abc.TaskGroup) -> RecordWriter:
    """Open the configured store and key and run the writer in `tg` (cancelling `tg` flushes it)."""
    from mcp_interceptors.audit import DEFAULT_KEY_PATH, AuditWriter, load_or_create_key, open_store
    from mcp_interceptors.gateway.audit_process import ProcessAuditWriter, usable_cpus

    location = audit_store_location(config)
    store = open_store(location)  # here, so a bad store or key fails the start-up with its own error
    key_file = audit_key_location(config) or DEFAULT_KEY_PATH.expanduser()
    key = load_or_create_key(key_file)
    writer: RecordWriter
    kind = config.audit.writer
    if kind == "auto":
        cpus = usable_cpus()
        kind = "process" if cpus >= 2 else "in-process"
        logger.info("audit.writer auto: %s (%g CPUs usable)", kind, cpus)
    if kind == "process":
        store.close()
        writer = ProcessAuditWriter(location, key_file, receipts=config.audit.receipts)
    else:
        writer = AuditWriter(store, key)
    await tg.start(writer.run)
    return writer


def session_key(era: Era, transport_session: str | None, principal: Principal | None) -> str:
    """The key of a request's `DownstreamSession`: a handshake-era client's transport session (one
    `default` session on stdio); 2026-07-28 requests, which carry none, share one per principal."""
    if era == "legacy":
        return transport_session or STDIO_SESSION_KEY
    return f"modern:{principal.type}:{principal.id}" if principal is not None else ANONYMOUS_SESSION_KEY


def _owner(principal: Principal | None) -> tuple[str, str | None] | None:
    """Who a session belongs to: a principal's type and id (its claims may differ from token to token)."""
    return (principal.type, principal.id) if principal is not None else None


def _mentions(value: Any, key: str) -> bool:
    """Whether a mapping with `key` appears anywhere in the JSON value `value`."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            if key in node:
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def _bus_event(method: str, params: Mapping[str, Any] | None) -> ServerEvent | None:
    if method == "notifications/tools/list_changed":
        return ToolsListChanged()
    if method == "notifications/prompts/list_changed":
        return PromptsListChanged()
    if method == "notifications/resources/list_changed":
        return ResourcesListChanged()
    if method == "notifications/resources/updated" and isinstance((params or {}).get("uri"), str):
        return ResourceUpdated(uri=str((params or {})["uri"]))
    return None
