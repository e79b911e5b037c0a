"""The `Gateway`: the composition root. It builds the forwarder and what it needs from the config, owns the
task group the shared upstreams, bridged calls and the audit writer run in, and connects and closes them.

Below it the call path: `server` (mcp's transports deliver requests there) and the fronts (`fronts/`) hand
each request to `forward.Forwarder`, which runs it through `listings`, `governor` and `connections`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio.abc

from mcp_interceptors.gateway.advertise import Advertiser
from mcp_interceptors.gateway.approvals.asking import Approvals
from mcp_interceptors.gateway.approvals.callbacks import Callbacks
from mcp_interceptors.gateway.approvals.memory import StateApprovals
from mcp_interceptors.gateway.approvals.webhook import approval_webhooks
from mcp_interceptors.gateway.auditing import start_audit_writer
from mcp_interceptors.gateway.client_scope import ClientScope
from mcp_interceptors.gateway.config import GatewayConfig
from mcp_interceptors.gateway.connections import Connections, retire
from mcp_interceptors.gateway.forward import Forwarder
from mcp_interceptors.gateway.governor import Governor
from mcp_interceptors.gateway.host_methods import HostMethods
from mcp_interceptors.gateway.input_rounds import InputRounds
from mcp_interceptors.gateway.listings import Listings
from mcp_interceptors.gateway.metrics import GatewayMetrics, serve_metrics
from mcp_interceptors.gateway.notifications import Notifications
from mcp_interceptors.gateway.reply import Replies
from mcp_interceptors.gateway.request_state import RequestStates
from mcp_interceptors.gateway.scrub import Scrubber
from mcp_interceptors.gateway.server import GatewayServer, new_server
from mcp_interceptors.gateway.session import STDIO_SESSION_KEY, DownstreamSession, Era
from mcp_interceptors.gateway.sessions import Sessions
from mcp_interceptors.gateway.task_extension import ExtensionTasks
from mcp_interceptors.gateway.task_relay import TaskRegistry, TaskRelay
from mcp_interceptors.gateway.telemetry import Telemetry
from mcp_interceptors.gateway.upstream.connection import OnUpstreamNotify, OnUpstreamRequest, UpstreamConnection
from mcp_interceptors.gateway.upstream.early import EarlyUpstreams
from mcp_interceptors.gateway.upstream.handshake import GATEWAY_CLIENT_INFO
from mcp_interceptors.gateway.upstream_reload import UpstreamChange
from mcp_interceptors.invoker import Chain
from mcp_interceptors.state import StateStore
from mcp_interceptors.state.memory import MemoryState

if TYPE_CHECKING:
    from mcp_interceptors.audit import RecordWriter

logger = logging.getLogger(__name__)


class Gateway:
    """Fronts the configured upstreams and enforces the chain on every governed message."""

    def __init__(
        self,
        config: GatewayConfig,
        chain: Chain,
        *,
        audit_writer: RecordWriter | None = None,
        state: StateStore | None = None,
        telemetry: Telemetry | None = None,
        early_upstreams: EarlyUpstreams | None = None,
    ) -> None:
        self.config = config
        self.chain = chain
        #: The state store replicas share (`state.redis_url`), which the guards were given; None in memory.
        self.state = state
        #: Tracing (`telemetry.telemetry_for`), None when off: then no hook does anything.
        self.telemetry = telemetry
        self.governor = _governor_for(config, chain)
        #: Kept only when something exposes them (`http.metrics`, `metrics.listen`): otherwise no cost at all.
        self.metrics: GatewayMetrics | None = None
        if config.collects_metrics:
            self.metrics = GatewayMetrics(
                config.upstreams,
                open_sessions=lambda: len(self.sessions),
                connections=lambda: self.connections.open_connections(self.sessions.by_key.values()),
                audit_stats=lambda: self.replies.writer.stats if self.replies.writer is not None else None,
            )
            self.governor.metrics = self.metrics
        #: [OURS] Redacts errors, log lines and progress messages with the `secrets`/`pii` guards' scanners.
        self.scrubber = Scrubber.from_config(config)
        self.replies = Replies(self.scrubber, receipts=config.audit.receipts, writer=audit_writer)
        self.connections = Connections(config, self.scrubber, self.metrics)
        #: The stdio upstreams' processes, started while the rest of the gateway was built (`upstream.early`).
        self.connections.early = early_upstreams
        chain.tracing = None  # its spans come from the gateway's own provider (`_trace_with`), never the global one
        if telemetry is not None:
            self._trace_with(telemetry)
        self.sessions = Sessions(config, self.connections)
        self.listings = Listings(config, self.governor, self.connections, self.replies)
        self.rounds = InputRounds(self.governor, self.replies, self.sessions)
        #: Who owns each governed task, in the shared state when there is one (any replica serves its owner).
        self.tasks = TaskRegistry(state if state is not None else MemoryState())
        self.notifications = Notifications(self.sessions, self.connections, self.tasks)
        self.connections.traffic = _Traffic(self.rounds, self.notifications)
        #: The mcp `Server` the fronts serve (`server.GatewayServer` is its middleware).
        self.server = new_server(config.name, GATEWAY_CLIENT_INFO["version"], self.notifications)
        server = self.server
        #: Asks the client's user when a chain escalates (the `approval` guard, or an interceptor server's).
        #: Webhook questions waiting for an answer at the HTTP front's callback URL.
        self.callbacks = Callbacks()
        webhooks = approval_webhooks(config, self.callbacks)
        self.approvals = Approvals(StateApprovals(state) if state is not None else None, webhooks)
        self.forwarder = Forwarder(
            governor=self.governor,
            connections=self.connections,
            listings=self.listings,
            rounds=self.rounds,
            replies=self.replies,
            metrics=self.metrics,
            server_info=lambda: server.server_info_stamp,
            advertised_equals_callable=config.advertised_equals_callable,
            request_states=RequestStates(
                [key.encode("utf-8") for key in config.state.request_state_keys],
                ttl_s=config.state.request_state_ttl_seconds,
            ),
            telemetry=telemetry,
            tasks=TaskRelay(
                self.tasks,
                self.connections,
                self.replies,
                ExtensionTasks(self.tasks, self.connections, self.replies, self.rounds),
            ),
            approvals=self.approvals,
        )
        self.mcp_server = GatewayServer(
            server,
            sessions=self.sessions,
            forwarder=self.forwarder,
            listings=self.listings,
            notifications=self.notifications,
            advertiser=Advertiser(
                chain,
                self.connections,
                self.sessions,
                self.scrubber,
                extension=config.client_interceptor_methods != "off",
            ),
            host_methods=HostMethods(config, chain, self.replies, self.listings, self.sessions.for_context),
        )
        self._tg: anyio.abc.TaskGroup | None = None

    def _trace_with(self, telemetry: Telemetry) -> None:
        """Hand tracing to the parts with a hook: chain runs, records, upstream and interceptor server requests."""
        self.replies.telemetry = telemetry
        self.connections.telemetry = telemetry
        self._trace_sources(self.chain, telemetry)

    @staticmethod
    def _trace_sources(chain: Chain, telemetry: Telemetry) -> None:
        """Chain runs get spans; interceptor servers' requests CLIENT spans and the trace context, as upstreams' do."""
        chain.tracing = telemetry.chain_spans
        for source in chain.sources.values():
            conn = getattr(source, "conn", None)  # an interceptor server's (`ConnectionSource`)
            if isinstance(conn, UpstreamConnection):
                conn.telemetry = telemetry

    @property
    def audit_writer(self) -> RecordWriter | None:
        return self.replies.writer

    @property
    def task_group(self) -> anyio.abc.TaskGroup:
        assert self._tg is not None, "gateway not started"
        return self._tg

    async def start(self, tg: anyio.abc.TaskGroup, *, connect: bool = True) -> None:
        """Start the audit writer and, unless `connect` is false (a stdio gateway waits for its client
        to say who it is), connect the upstreams."""
        self._tg = tg
        self.connections.run_in(tg)
        self.rounds.run_in(tg)
        self.approvals.run_in(tg)
        if self.replies.writer is None and self.config.audit.enabled:
            self.replies.writer = await start_audit_writer(self.config, tg)
        if self.metrics is not None and (address := self.config.metrics.address) is not None:
            await tg.start(serve_metrics, self.metrics, *address)
        if connect:
            await self.connect_upstreams()
        tg.start_soon(self.sessions.sweep_idle, self.config.http.session_idle_s)

    @property
    def connected(self) -> bool:
        """Whether the upstreams are connected (a stdio gateway waits for its client's first message)."""
        return self.listings.startup is not None

    async def connect_upstreams(
        self, client_params: Mapping[str, Any] | None = None, client_era: Era | None = None
    ) -> None:
        """Connect every upstream (see `Connections.connect_shared`) and list them, checking collisions."""
        await self.connections.connect_shared(client_params, client_era)
        await self.listings.list_at_start()  # raises RoutingError on a collision

    def close_upstreams(self) -> None:
        """Close every upstream connection, shared and per-session (shutting down): calls still waiting
        on one fail with an error naming it."""
        self.connections.closing = True  # a session opened from now on (a request on its way) opens no upstream
        self.sessions.close_all()
        self.connections.close_shared()

    def await_stdio_client(self) -> None:
        """Serving one stdio client: requests the upstreams send before its handshake wait for it."""
        self.sessions.await_stdio_client()

    def replace_policy(
        self, config: GatewayConfig, chain: Chain, upstreams: UpstreamChange | None = None
    ) -> tuple[Chain, Governor, list[UpstreamConnection]]:
        """New calls run on `chain` and the chain settings and scrubbing of `config` (its `interceptors` and
        `chain` sections), and on its upstream set (`upstreams`, prepared: see `upstream_reload`); calls in flight
        finish on the old ones. Returns the old chain and governor, for the caller to retire, and the upstream
        connections taken out of service (each closed once its calls are done)."""
        old = self.chain, self.governor
        governor = _governor_for(config, chain)
        governor.metrics = self.metrics
        chain.tracing = None
        if self.telemetry is not None:
            self._trace_sources(chain, self.telemetry)
        scrubber = Scrubber.from_config(config)
        # No await from here on: a call starts on the old policy or on the new one, never on a mix.
        self.config, self.chain, self.governor, self.scrubber = config, chain, governor, scrubber
        self.forwarder.governor = self.listings.governor = self.rounds.governor = governor
        self.mcp_server.advertiser.chain = self.mcp_server.host_methods.chain = chain
        self.mcp_server.host_methods.config = config
        self.mcp_server.host_methods.scope = ClientScope(config, chain)  # clients' own guards, from the new config
        self.replies.scrubber = self.connections.scrubber = self.mcp_server.advertiser.scrubber = scrubber
        retired = [] if upstreams is None else self._replace_upstreams(config, upstreams)
        for conn in self.connections.every_connection(self.sessions.by_key.values()):
            conn.scrubber = scrubber
        return (*old, retired)

    def _replace_upstreams(self, config: GatewayConfig, change: UpstreamChange) -> list[UpstreamConnection]:
        """Swap in `config`'s upstream set (no await: part of `replace_policy`'s one step). Sessions on the shared
        connections move to the new ones; a handshake-era session keeps its own connections to the upstreams that
        did not change and opens the others on its next request. Every session's listings are dropped."""
        assert change.catalog is not None, "an upstream change is prepared before it is swapped in"
        conns = self.connections
        shared = {name: change.started.get(name) or conns.shared[name] for name in config.upstreams}
        retired = [conn for name, conn in conns.shared.items() if shared.get(name) is not conn]
        gone = {self.listings.prefixes.get(name, ""): name for name in change.removed}
        conns.config, conns.shared = config, shared
        for name in [*change.removed, *change.changed]:
            conns.handshake_refused.discard(name)
            conns.handshake_subscribe.discard(name)
        self.listings.replace_upstreams(config, change.catalog, gone)
        for session in self.sessions.by_key.values():
            if session.upstreams and (session.era != "legacy" or session.key == STDIO_SESSION_KEY):
                session.upstreams = dict(shared)  # it serves on the shared connections (a stdio client speaks in them)
                if session.era == "legacy":
                    for name in change.started:
                        shared[name].speak_for(session.client_params)
            else:
                retired.extend(conns.drop_stale(session))
            session.invalidate()
        kept = {id(conn) for conn in shared.values()}
        retired = list({id(conn): conn for conn in retired if id(conn) not in kept}.values())
        for conn in retired:
            conns.task_group.start_soon(retire, conn, "a config reload removed or changed it")
        return retired

    async def forget_inputs(self, why: str) -> None:
        """Input requests still awaiting answers will never get them (`why`: the gateway stopped)."""
        await self.rounds.open_inputs.forget(why)


def _governor_for(config: GatewayConfig, chain: Chain) -> Governor:
    return Governor(
        chain,
        deadline_ms=config.chain.deadline_ms,
        include_details=config.chain.include_error_details,
        directions=config.chain.directions,
        config=config.interceptors.config or None,
    )


class _Traffic:
    """What an upstream sends on its own: requests to `input_rounds`, notifications to `notifications`."""

    def __init__(self, rounds: InputRounds, notifications: Notifications) -> None:
        self.rounds = rounds
        self.notifications = notifications

    def shared(self, upstream: str) -> tuple[OnUpstreamRequest, OnUpstreamNotify]:
        return self.rounds.shared_request_handler(upstream), self.notifications.shared_handler(upstream)

    def of_session(self, session: DownstreamSession, upstream: str) -> tuple[OnUpstreamRequest, OnUpstreamNotify]:
        async def on_request(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
            return await self.rounds.from_upstream(session, upstream, method, params)

        async def on_notify(method: str, params: dict[str, Any] | None) -> None:
            await self.notifications.from_upstream(session, upstream, method, params)

        return on_request, on_notify
