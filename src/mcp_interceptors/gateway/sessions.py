"""Key → `DownstreamSession`: the session a request belongs to, its owner check, the caps, the idle sweep.

A handshake-era client's session is keyed by its transport session (one on stdio); 2026-07-28 requests,
which carry none, share one per principal. `http.max_sessions` (and each principal's share) caps the
handshake-era HTTP sessions, counted by their slots (`session_slots.py`) from their first request, and
`http.max_requests_in_flight` each session's HTTP requests.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import anyio
from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from mcp_interceptors.gateway.auth import current_principal
from mcp_interceptors.gateway.config import GatewayConfig
from mcp_interceptors.gateway.connections import Connections
from mcp_interceptors.gateway.jsonrpc.framing import INTERNAL_ERROR, INVALID_REQUEST, too_many_in_flight
from mcp_interceptors.gateway.session import STDIO_SESSION_KEY, DownstreamSession, Era
from mcp_interceptors.gateway.session_slots import SessionRefusedError, SessionSlots, Slot, owner_of
from mcp_interceptors.protocol.invoke import Principal

logger = logging.getLogger(__name__)
#: The session of 2026-07-28 requests without a token (see `session_key`).
ANONYMOUS_SESSION_KEY = "modern:anonymous"
#: Sessions of the legacy SSE endpoint are keyed by its `session_id` query parameter, so prefixed.
SSE_SESSION_PREFIX = "sse:"


def session_key(era: Era, transport_session: str | None, principal: Principal | None) -> str:
    """The key of a request's `DownstreamSession`: a handshake-era client's transport session (one
    `default` session on stdio); 2026-07-28 requests, which carry none, share one per principal."""
    if era == "legacy":
        return transport_session or STDIO_SESSION_KEY
    return f"modern:{principal.type}:{principal.id}" if principal is not None else ANONYMOUS_SESSION_KEY


def era_and_transport_session(ctx: ServerRequestContext[Any, Any]) -> tuple[Era, str | None]:
    """A request's era and, for a handshake-era HTTP request, the transport session it names."""
    era: Era = "2026-07-28" if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS else "legacy"
    request = ctx.request
    header = None
    if request is not None and era == "legacy":
        header = request.headers.get("mcp-session-id")
        if header is None and (sse := request.query_params.get("session_id")):  # the legacy SSE endpoint
            header = SSE_SESSION_PREFIX + sse
    return era, header


def _owner(principal: Principal | None) -> tuple[str, str | None] | None:
    """Who a session belongs to: a principal's type and id (its claims may differ from token to token)."""
    return owner_of(principal)


def _is_slotted(session: DownstreamSession) -> bool:
    """A handshake-era HTTP session (or `/sse` stream's): counted by its slot, not here."""
    return session.era == "legacy" and session.key != STDIO_SESSION_KEY


class Sessions:
    """The open sessions by key (`by_key`), and what bounds them."""

    def __init__(self, config: GatewayConfig, connections: Connections) -> None:
        self.config = config
        self.connections = connections
        self.by_key: dict[str, DownstreamSession] = {}
        #: The `sessionId` guards see for the stdio client (see `STDIO_SESSION_KEY`).
        self.stdio_session_id = f"stdio:{uuid.uuid4().hex}"
        #: session key -> its HTTP requests in flight (`http.max_requests_in_flight`); gone at 0
        self._in_flight: dict[str, int] = {}
        #: sessions refused since they were last under the cap: one warning each time a session reaches it
        self._at_cap: set[str] = set()
        self._stdio_client: anyio.Event | None = None
        #: The handshake-era HTTP sessions and `/sse` streams open, by owner (`http.max_sessions`).
        self.slots = SessionSlots(config.http.max_sessions, config.http.session_share)
        self._refusing_sessions = False

    def __len__(self) -> int:
        """The sessions open: handshake-era HTTP ones by their slots (one that only sent `initialize` too), and
        the stdio client's and the 2026-07-28 principals' by their `DownstreamSession`."""
        unslotted = sum(1 for session in self.by_key.values() if not _is_slotted(session))
        return len(self.slots) + unslotted

    # ------------------------------------------------------------------ handshake-era HTTP sessions' slots

    def take_slot(self, principal: Principal | None) -> Slot:
        """A slot for a session `principal` opens, or `SessionRefusedError` (logged) past a limit."""
        try:
            slot = self.slots.take(owner_of(principal), time.monotonic())
        except SessionRefusedError as exc:
            if not self._refusing_sessions:  # once until one is let in: a client retrying floods no log
                self._refusing_sessions = True
                logger.warning("refusing new sessions: %s", exc)
            raise
        self._refusing_sessions = False
        return slot

    def slot_done(self, slot: Slot) -> None:
        self.slots.done(slot, time.monotonic())

    def release_slot(self, slot: Slot, why: str = "the client's session ended") -> None:
        """Give a slot back; the session it held ends with it (its upstream sessions close)."""
        self.slots.release(slot)
        if slot.key is not None:
            self.close(slot.key, why=why)

    # ------------------------------------------------------------------ finding a request's session

    def for_context(self, ctx: ServerRequestContext[Any, Any]) -> DownstreamSession:
        """The session of a request mcp's server delivers (HTTP, or the stdio front's own methods)."""
        era, header = era_and_transport_session(ctx)
        principal = current_principal()
        params = None
        if session_key(era, header, principal) not in self.by_key:  # the client's params count when it opens
            client_params = ctx.session.client_params
            params = client_params.model_dump(by_alias=True, mode="json", exclude_none=True) if client_params else None
        return self.for_request(era, header, principal, params)

    def for_request(
        self,
        era: Era,
        transport_session: str | None,
        principal: Principal | None,
        client_params: dict[str, Any] | None,
    ) -> DownstreamSession:
        """The session a request belongs to: a handshake-era client's by its transport session (one
        `default` session on stdio), 2026-07-28 requests by principal."""
        key = session_key(era, transport_session, principal)
        session = self.by_key.get(key)
        if session is not None and _owner(session.principal) != _owner(principal):
            # Transports bind a session to the credential that opened it; this holds whatever names the key.
            logger.warning("refused a request for session %s: it belongs to another principal", key[:64])
            raise MCPError(INVALID_REQUEST, "Session not found", {"reason": "session belongs to another principal"})
        if session is not None:
            session.principal = principal  # the same caller; its latest token's claims (roles, scopes) count
        else:
            if era == "legacy" and transport_session is not None:
                self._check_room_for_a_session()
            guard_id = self.stdio_session_id if key == STDIO_SESSION_KEY else key
            session = DownstreamSession(key, era, principal, client_params, guard_id)
            if era == "legacy" and key == STDIO_SESSION_KEY:
                # A stdio gateway has one client: it adopts the startup connections, so each upstream runs once.
                # A 2026-07-28 connection serves it through the bridge (its `input_required` rounds become server
                # requests), as it does for an upstream that speaks only 2026-07-28.
                session.upstreams = dict(self.connections.shared)
                for conn in self.connections.shared.values():
                    conn.speak_for(client_params)
            self.by_key[key] = session
        session.last_used = time.monotonic()
        return session

    def _check_room_for_a_session(self) -> None:
        """Each handshake-era HTTP session opens upstream sessions of its own (a process per stdio
        upstream): past `http.max_sessions` a new one is refused, not opened."""
        limit = self.config.http.max_sessions
        if sum(1 for session in self.by_key.values() if session.era == "legacy") >= limit:
            logger.warning("refused a new session: %d sessions are open (http.max_sessions)", limit)
            message = f"the gateway serves at most {limit} sessions; end one (or wait for an idle one to close)"
            data = {"reason": "too_many_sessions", "limit": limit, "setting": "http.max_sessions"}
            raise MCPError(INTERNAL_ERROR, message, data)

    # ------------------------------------------------------------------ the stdio client

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

    @property
    def serves_stdio(self) -> bool:
        return self._stdio_client is not None

    async def stdio_session(self, wait_s: float) -> DownstreamSession | None:
        """The stdio client's handshake-era session, once its handshake is done (waiting up to `wait_s`)."""
        waiting = self._stdio_client
        if waiting is not None and not waiting.is_set():
            with anyio.move_on_after(wait_s):
                await waiting.wait()
        session = self.by_key.get(STDIO_SESSION_KEY)
        return session if session is not None and session.era == "legacy" else None

    # ------------------------------------------------------------------ HTTP requests in flight

    def claim_request_slot(self, key: str) -> None:
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

    def release_request_slot(self, key: str) -> None:
        self._at_cap.discard(key)
        left = self._in_flight[key] - 1
        if left:
            self._in_flight[key] = left
        else:
            del self._in_flight[key]

    # ------------------------------------------------------------------ ending sessions

    async def sweep_idle(self, idle_s: float, *, every_s: float | None = None) -> None:
        """Close handshake-era sessions (and their upstream sessions) unused for `idle_s` seconds.

        Sweeps every `every_s` seconds, by default a quarter of `idle_s` (at most a minute): a session
        closes at most a quarter late.
        """
        if every_s is None:
            every_s = min(60.0, idle_s / 4)
        while True:
            await anyio.sleep(every_s)
            cutoff = time.monotonic() - idle_s
            for slot in self.slots.idle(cutoff):  # mcp expires these sessions too
                logger.info("closing idle session %s", slot.key)
                self.release_slot(slot, f"the client's session was idle for {idle_s:g} s")
            for key, session in list(self.by_key.items()):
                if session.last_used < cutoff and not session.inflight:
                    logger.info("closing idle session %s", key)
                    self.close(key, why=f"the client's session was idle for {idle_s:g} s")

    def end_calls(self, key: str, principal: Principal | None) -> bool:
        """A handshake-era client ends its session (HTTP `DELETE`): its requests in flight end first, each
        answered -32000 and cancelled upstream, while their streams are open. Whether any was; nothing ends
        when the session is not `principal`'s (mcp then answers the `DELETE` 404)."""
        session = self.by_key.get(key)
        if session is None or session.era != "legacy" or _owner(session.principal) != _owner(principal):
            return False
        return session.end_calls("the client ended its session (HTTP DELETE)")

    def close(self, key: str, *, why: str | None = None) -> None:
        """End a handshake-era session's upstream sessions, those still opening too: a call waiting for one
        gets -32000 naming it, and `why` (by default: shutting down, or the client ended the session), at once."""
        session = self.by_key.pop(key, None)
        if session is None or session.era != "legacy":
            return
        session.ended = True
        self.connections.close_own(
            [*session.opening, *session.upstreams.values()], why or self.connections.closing_why()
        )

    def close_all(self) -> None:
        for key in list(self.by_key):
            self.close(key)
