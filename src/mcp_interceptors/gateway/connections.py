"""The gateway's upstream connections: one shared connection per upstream, and each handshake-era session's own.

The shared ones connect at start (`connect_shared`); a handshake-era client's open on its first use
(`of`), presenting its own `initialize` params. What an upstream sends on its own goes to the handlers
`Traffic` gives (`input_rounds` for requests, `notifications` for notifications).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from functools import partial
from typing import Any, Protocol

import anyio
import anyio.abc
from mcp_types import CONNECTION_CLOSED

from mcp_interceptors.gateway.config import GatewayConfig, TransportConfig, UpstreamConfig
from mcp_interceptors.gateway.metrics import GatewayMetrics
from mcp_interceptors.gateway.scrub import Scrubber
from mcp_interceptors.gateway.session import DownstreamSession, Era
from mcp_interceptors.gateway.telemetry import Telemetry
from mcp_interceptors.gateway.upstream.connection import OnUpstreamNotify, OnUpstreamRequest, UpstreamConnection
from mcp_interceptors.gateway.upstream.early import EarlyUpstreams
from mcp_interceptors.gateway.upstream.errors import UpstreamUnavailableError
from mcp_interceptors.gateway.upstream.handshake import EraPreference

logger = logging.getLogger(__name__)

#: With several upstreams, how long the start waits for the others once one is connected (they go on
#: connecting in the background and are listed when they are up).
_START_GRACE_S = 10.0


class _Start:
    """The task status a shared connection's first `run` gets: `ready` once its first handshake is done,
    `settled` then or when its start failed."""

    def __init__(self) -> None:
        self.ready = False
        self.settled = anyio.Event()

    def started(self, value: None = None) -> None:
        self.ready = True
        self.settled.set()


async def _wait_for_start(starts: list[_Start]) -> None:
    """Until every connection is up or failed, or, with several, `_START_GRACE_S` after the first is up."""
    async with anyio.create_task_group() as starting:

        async def grace_after(start: _Start) -> None:
            await start.settled.wait()
            if start.ready:  # one that hangs in its start does not hold the others back for long
                await anyio.sleep(_START_GRACE_S)
                starting.cancel_scope.cancel()

        async def all_settled() -> None:
            for start in starts:
                await start.settled.wait()
            starting.cancel_scope.cancel()

        starting.start_soon(all_settled)
        if len(starts) > 1:
            for start in starts:
                starting.start_soon(grace_after, start)


class Traffic(Protocol):
    """Where what an upstream sends on its own goes: `(on_request, on_notify)` for a connection."""

    def shared(self, upstream: str) -> tuple[OnUpstreamRequest, OnUpstreamNotify]: ...

    def of_session(self, session: DownstreamSession, upstream: str) -> tuple[OnUpstreamRequest, OnUpstreamNotify]: ...


class Connections:
    """Opens, shares and closes upstream connections; `traffic` is set before the first one connects."""

    def __init__(self, config: GatewayConfig, scrubber: Scrubber | None, metrics: GatewayMetrics | None) -> None:
        self.config = config
        self.scrubber = scrubber
        self.metrics = metrics
        self.traffic: Traffic | None = None
        #: Tracing (None: off), given to every connection made.
        self.telemetry: Telemetry | None = None
        self.shared: dict[str, UpstreamConnection] = {}
        #: Shutting down (`close_all`): no upstream session opens any more.
        self.closing = False
        #: Upstreams that refused a handshake-era session: their handshake-era clients use the shared one.
        self.handshake_refused: set[str] = set()
        #: Upstreams whose handshake-era sessions advertised `resources.subscribe` (its 2026-07-28 flag says
        #: subscriptions/listen serves resources, not that resources/subscribe works in that era).
        self.handshake_subscribe: set[str] = set()
        self._tg: anyio.abc.TaskGroup | None = None
        #: What the shared connections present (`connect_shared`'s arguments), for those a reload starts.
        self._client_params: Mapping[str, Any] | None = None
        self._client_era: Era | None = None
        #: The stdio upstreams' processes started at start (`early`): each shared connection takes its own.
        self.early: EarlyUpstreams | None = None

    def run_in(self, tg: anyio.abc.TaskGroup) -> None:
        """The task group every connection runs in (the gateway's)."""
        self._tg = tg

    @property
    def task_group(self) -> anyio.abc.TaskGroup:
        assert self._tg is not None, "gateway not started"
        return self._tg

    # ------------------------------------------------------------------ the shared connections

    async def connect_shared(self, client_params: Mapping[str, Any] | None, client_era: Era | None) -> None:
        """Connect every upstream at once. If none can start, fail with the first one's error; if some can,
        keep retrying the others (listed once they connect).

        `client_params` are the `initialize` params the connections present and `client_era` the era that
        `era: auto` upstreams try first: a stdio gateway's one client's, else the gateway's own identity,
        every client feature it relays, and 2026-07-28 first.
        """
        tg = self.task_group
        self._client_params, self._client_era = client_params, client_era
        conns = {name: self._new_shared(name, upstream) for name, upstream in self.config.upstreams.items()}
        failures: dict[str, UpstreamUnavailableError] = {}
        starts = {name: _Start() for name in conns}
        decided = anyio.Event()

        async def supervise(name: str, conn: UpstreamConnection) -> None:
            """Run the connection in the gateway's task group from the start: one slow to start is never cut off
            (killed mid-start, a server started through `npx` was started again and again); once the gateway
            serves without it, it goes on connecting and is listed when it is up."""
            try:
                await conn.run(task_status=starts[name])
                return
            except UpstreamUnavailableError as exc:  # raised only before it was ready: later failures are retried
                failures[name] = exc
            finally:
                starts[name].settled.set()
            await decided.wait()
            if self.shared.get(name) is conn and not conn.closed:  # the gateway serves without it: retry
                await conn.run(retry_start=True)

        for name, conn in conns.items():
            tg.start_soon(supervise, name, conn)
        try:
            await _wait_for_start(list(starts.values()))
        except BaseException:  # cancelled while starting: nothing is left connecting
            for conn in conns.values():
                conn.close()
            decided.set()
            raise
        if len(failures) == len(conns):
            decided.set()  # nothing serves: the gateway fails to start, and none is retried
            raise next(failures[name] for name in conns)  # the first in config order
        for name, conn in conns.items():
            if not starts[name].ready:
                # Several upstreams: the others serve; this one goes on connecting and is listed once up.
                why = failures[name].message if name in failures else f"not connected within {_START_GRACE_S:g} s"
                logger.error("upstream %r is unavailable (%s); serving without it until it connects", name, why)
                conn.left_out = True
        self.shared.update(conns)
        decided.set()

    def _new_shared(self, name: str, upstream: UpstreamConfig) -> UpstreamConnection:
        """A shared connection to `upstream`, presenting what `connect_shared` was given."""
        assert self.traffic is not None, "no traffic handlers"
        on_request, on_notify = self.traffic.shared(name)
        legacy_first = self._client_era == "legacy" and upstream.era == "auto"
        era: EraPreference = "legacy-first" if legacy_first else "auto"
        conn = UpstreamConnection(
            name, upstream, era=era, client_params=self._client_params, on_request=on_request, on_notify=on_notify
        )
        conn.early = self.early
        return self._instrumented(conn)

    async def start_shared(self, upstreams: Mapping[str, UpstreamConfig]) -> dict[str, UpstreamConnection]:
        """Start shared connections to `upstreams` (a config reload's new and changed ones), all at once; once
        each is past its handshake, return them. If one cannot start, close them all and raise its error."""
        conns = {name: self._new_shared(name, upstream) for name, upstream in upstreams.items()}
        try:
            async with anyio.create_task_group() as starting:
                for conn in conns.values():
                    starting.start_soon(conn.open, self.task_group)
        except BaseException as exc:
            for conn in conns.values():
                conn.close("the config reload that started it was refused")
            if isinstance(exc, BaseExceptionGroup):
                failed = [e for e in exc.exceptions if isinstance(e, UpstreamUnavailableError)]
                if failed:
                    raise failed[0] from None
            raise
        return conns

    def is_shared(self, upstream: str, conn: UpstreamConnection | None) -> bool:
        return conn is not None and self.shared.get(upstream) is conn

    # ------------------------------------------------------------------ a session's own

    async def of(self, session: DownstreamSession) -> dict[str, UpstreamConnection]:
        """The session's upstream connections; a handshake-era session opens its own on first use."""
        if session.upstreams and len(session.upstreams) == len(self.config.upstreams):
            return session.upstreams
        if session.era != "legacy":
            session.upstreams = dict(self.shared)
            return session.upstreams
        async with session.opening_lock:
            # A reload may add upstreams (opened here) or change and remove some while they open (dropped here).
            while missing := [name for name in self.config.upstreams if name not in session.upstreams]:
                try:
                    opened = await self._open_for(session, missing)
                finally:
                    session.opening.clear()
                session.upstreams = {**session.upstreams, **opened}
                for conn in self.drop_stale(session):
                    self.task_group.start_soon(retire, conn, "a config reload removed or changed it")
        return session.upstreams

    def drop_stale(self, session: DownstreamSession) -> list[UpstreamConnection]:
        """Take out of `session` the connections to upstreams a reload removed or changed; those that are its own
        (not shared) are returned, for the caller to `retire`."""
        stale = {
            name: conn
            for name, conn in session.upstreams.items()
            if name not in self.config.upstreams or not same_server(conn.config, self.config.upstreams[name])
        }
        if not stale:
            return []
        session.upstreams = {name: conn for name, conn in session.upstreams.items() if name not in stale}
        return [conn for conn in stale.values() if not self.is_shared(conn.name, conn)]

    async def _open_for(self, session: DownstreamSession, names: list[str]) -> dict[str, UpstreamConnection]:
        """Per-session upstream sessions to `names` for a handshake-era client, presenting its own initialize
        params. Ending the session (or shutting down) meanwhile closes those opened so far and raises -32000 at
        once."""
        tg = self.task_group
        assert self.traffic is not None, "no traffic handlers"
        conns: dict[str, UpstreamConnection] = {}
        down: list[UpstreamUnavailableError] = []
        adding = bool(session.upstreams)  # a reload added upstreams to a session that has others: they serve
        for name in names:
            upstream_config = self.config.upstreams.get(name)
            if upstream_config is None:  # a reload removed it while the others opened
                continue
            if session.ended or self.closing:  # shutting down, or the session ended: it opens nothing more
                self.close_own(session.opening, self.closing_why())
                why = "the gateway is shutting down" if self.closing else "the session ended"
                message = f"{why}: no session is opened with upstream {name!r}"
                raise UpstreamUnavailableError(CONNECTION_CLOSED, message, {"upstream": name})
            on_request, on_notify = self.traffic.of_session(session, name)
            conn = self._instrumented(
                UpstreamConnection(
                    name,
                    upstream_config,
                    era="legacy",
                    client_params=session.client_params,
                    on_request=on_request,
                    on_notify=on_notify,
                )
            )
            session.opening.append(conn)  # closing the session meanwhile closes it (see `Sessions.close`)
            shared = self.shared.get(name)
            if shared is not None and not shared.up and len(self.config.upstreams) > 1:
                # Down for the gateway too: not worth a session's wait; it joins the session once it connects.
                if name in self.handshake_refused:
                    conns[name] = shared  # it reconnects itself
                    continue
                conn.left_out = True
                tg.start_soon(partial(conn.run, retry_start=True))
                down.append(shared.unavailable())
                conns[name] = conn
                continue
            try:
                await conn.open(tg)
                if conn.info is not None and (conn.info.capabilities.get("resources") or {}).get("subscribe"):
                    self.handshake_subscribe.add(name)
            except UpstreamUnavailableError as exc:
                if session.ended or self.closing:  # closed while it opened: none of the others may outlive it
                    self.close_own(session.opening, self.closing_why())
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
                    tg.start_soon(partial(conn.run, retry_start=True))
                    down.append(exc)
            conns[name] = conn
        if down and len(down) == len(conns) and not adding:
            for conn in conns.values():
                conn.close()  # all the session's own: a shared connection is never counted down here
            if len(down) == 1:
                raise down[0]
            # Every one: naming only the first said a call to another upstream's tool failed on that one.
            reasons = "; ".join(exc.message for exc in down)
            message = f"no upstream session could be opened: {reasons}"
            raise UpstreamUnavailableError(CONNECTION_CLOSED, message, {"upstreams": list(conns)})
        return conns

    def _instrumented(self, conn: UpstreamConnection) -> UpstreamConnection:
        """Metrics for an upstream connection, and the scrub of the log lines and progress it relays."""
        conn.scrubber = self.scrubber
        conn.telemetry = self.telemetry
        if self.metrics is not None:
            conn.on_duration = self.metrics.upstream_timer(conn.name)
            conn.on_restart = self.metrics.upstream_restarter(conn.name)
        return conn

    # ------------------------------------------------------------------ closing

    def close_own(self, conns: Iterable[UpstreamConnection], why: str) -> None:
        """Close those of `conns` that are a session's own (never a shared connection)."""
        shared = {id(conn) for conn in self.shared.values()}
        for conn in conns:
            if id(conn) not in shared:
                conn.close(why)

    def closing_why(self) -> str:
        return "shutting down" if self.closing else "the client's session ended"

    def close_shared(self) -> None:
        for conn in self.shared.values():
            conn.close()

    def open_connections(self, sessions: Iterable[DownstreamSession]) -> list[tuple[str, bool]]:
        """`(upstream, up)` for every open upstream connection, each once: the shared ones and the
        handshake-era sessions' own (the metrics' `upstream_up` and `upstream_connections`)."""
        return [(conn.name, conn.up) for conn in self.every_connection(sessions)]

    def every_connection(self, sessions: Iterable[DownstreamSession]) -> list[UpstreamConnection]:
        """Every open upstream connection, each once: the shared ones and the handshake-era sessions' own."""
        conns = {id(conn): conn for conn in self.shared.values()}
        for session in sessions:
            conns.update((id(conn), conn) for conn in session.upstreams.values())
        return [conn for conn in conns.values() if not conn.closed]


def same_server(a: TransportConfig, b: TransportConfig) -> bool:
    """Whether a connection made for `a` serves `b` as well: all but the prefix (which only renames) is the same."""
    return a.model_dump(exclude={"prefix"}) == b.model_dump(exclude={"prefix"})


async def retire(conn: UpstreamConnection, why: str) -> None:
    """Close `conn` once the calls in flight on it are done (a reload took it out of service)."""
    await conn.drained()
    conn.close(why)
