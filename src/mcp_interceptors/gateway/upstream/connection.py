"""One upstream connection, supervised: connect once, reuse it, reconnect with backoff; and one call on it.

`run` keeps the connection up (a task in the gateway's task group); `request` sends one call in the
connection's era and turns mcp's local failures into errors naming the upstream. What the upstream sends
on its own goes to `on_request` / `on_notify`. The wire, the handshake and the errors have modules of
their own (`transports`, `handshake`, `errors`).

One piece (past ~400 lines): the supervisor and the request path share the live wire, the calls in
flight on it and what a restart must restore, and each changes the others' state.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import httpx2
from mcp import MCPError
from mcp.shared.dispatcher import CallOptions, DispatchContext
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_types import CONNECTION_CLOSED, INTERNAL_ERROR, INVALID_REQUEST

from mcp_interceptors.gateway.config import TransportConfig
from mcp_interceptors.gateway.scrub import Scrubber
from mcp_interceptors.gateway.tasks import TASK_STATUS, is_task_method, task_refusal
from mcp_interceptors.gateway.upstream.errors import (
    UpstreamTimeoutError,
    UpstreamUnavailableError,
    describe_exception,
    innermost,
    is_http_error,
    is_local_close,
    is_local_timeout,
    is_lost_stream,
    too_long,
)

if TYPE_CHECKING:
    from mcp_interceptors.gateway.telemetry import Telemetry
    from mcp_interceptors.gateway.upstream.early import EarlyUpstreams
from mcp_interceptors.gateway.upstream.handshake import (
    SESSION_STATE_METHODS,
    Era,
    EraPreference,
    EraRefusedError,
    Handshake,
    SessionState,
    UpstreamInfo,
    body_for_era,
    envelope,
    listen_flags,
)
from mcp_interceptors.gateway.upstream.transports import (
    Wire,
    http_client_for,
    open_transport,
    open_wire,
    routing_headers,
)

logger = logging.getLogger(__name__)

OnUpstreamRequest = Callable[[str, dict[str, Any] | None], Awaitable[dict[str, Any]]]
OnUpstreamNotify = Callable[[str, dict[str, Any] | None], Awaitable[None]]

_BACKOFF_FIRST_S = 0.2
_BACKOFF_MAX_S = 10.0
#: A connection up this long resets the backoff; one that dies sooner (a crash loop) keeps backing off.
_STABLE_S = 30.0
_CONNECT_WAIT_S = 10.0
#: How long a closed connection may take to end itself: calls cancelled a moment before tell the upstream, and
#: an HTTP session is ended with DELETE (cut short, a per-session upstream kept both its work and its session).
_CLOSE_GRACE_S = 3.0
#: Within that, how long calls still in flight on it get to settle (cancelled ones send `notifications/cancelled`).
_CLOSE_SETTLE_S = 0.5


class _Opened:
    """The task status `UpstreamConnection.open` hands `run`: set once its first handshake is done."""

    def __init__(self) -> None:
        self.event = anyio.Event()

    def started(self, value: None = None) -> None:
        self.event.set()


class UpstreamConnection:
    """A supervised connection: `run` keeps it up, `request`/`notify` use it.

    `client_params` are the `initialize` params to present (a downstream client's, for a
    per-session legacy connection); server-initiated requests and notifications from the upstream
    go to `on_request` / `on_notify`.
    """

    def __init__(
        self,
        name: str,
        config: TransportConfig,
        *,
        era: EraPreference = "auto",
        client_params: Mapping[str, Any] | None = None,
        on_request: OnUpstreamRequest | None = None,
        on_notify: OnUpstreamNotify | None = None,
        role: str = "upstream",
    ) -> None:
        self.name = name
        #: What errors and logs call it: "upstream", or "interceptor server" for the gateway's remote hosts.
        self.role = role
        self.config = config
        preference: EraPreference = config.era if era == "auto" else era
        self._handshake = Handshake(preference, config.timeout_ms / 1000, config.url is not None, f"{role} {name!r}")
        self.client_params = dict(client_params or {})
        #: The log level a handshake-era client asked of a 2026-07-28 connection, sent with each request.
        self.log_level: str | None = None
        self.on_request = on_request
        self.on_notify = on_notify
        self.info: UpstreamInfo | None = None
        self.restarts = 0
        self._session_state = SessionState()
        self._listens = 0
        self._receivers: dict[object, OnUpstreamNotify] = {}
        self._dispatcher: Wire | None = None
        #: Set to end the open connection (`run` then reconnects): its HTTP session is gone.
        self._ended: anyio.Event | None = None
        self._connected = anyio.Event()
        self._closed = False
        self._closing = anyio.Event()
        self._close_reason = "shutting down"
        #: Requests in flight on the shared dispatcher, which a graceful close lets settle first.
        self._inflight = 0
        self._settled = anyio.Event()  # set when the last of them settles after `close()`
        #: Calls the gateway runs on it (`hold`), which a drain (`drained`) waits for.
        self._calls = 0
        self._idle = anyio.Event()
        self._last_error: str | None = None
        #: When the next connection attempt starts while it backs off after a failure (loop time), else None.
        self._retry_at: float | None = None
        self._scope: anyio.CancelScope | None = None
        #: The last HTTP error status the upstream answered with ("401 Unauthorized"), to explain mcp's -32603.
        self._http_error: str | None = None
        #: The HTTP client of the requests that take an exchange of their own (see `_private_request`).
        self._exchanges: httpx2.AsyncClient | None = None
        #: A listing was served without this upstream (it was down): its return announces `list_changed`.
        self.left_out = False
        #: Called with each request's duration in seconds (the gateway's metrics), when set.
        self.on_duration: Callable[[float], None] | None = None
        #: The gateway's scrub of relayed log lines and progress messages (`scrub.notifications`), if any.
        self.scrubber: Scrubber | None = None
        #: Tracing (None: off): each request then gets a CLIENT span, and its trace context in `_meta`.
        self.telemetry: Telemetry | None = None
        #: Called each time it reconnects after its connection ended or failed (the gateway's metrics), when set.
        self.on_restart: Callable[[], None] | None = None
        #: Called each time a connection is up, past its handshake (an interceptor server's listing is read again).
        self.on_connected: Callable[[], None] | None = None
        #: Where its first connection takes the process started for it at start, if one was (`early`).
        self.early: EarlyUpstreams | None = None

    @property
    def is_http(self) -> bool:
        return self.config.url is not None

    @property
    def era(self) -> Era:
        return self.info.era if self.info is not None else "legacy"

    @property
    def up(self) -> bool:
        """Whether the connection is open and past its handshake now (not starting, backing off, or closed)."""
        return self._dispatcher is not None and self._connected.is_set()

    @property
    def closed(self) -> bool:
        """Whether `close()` stopped it for good."""
        return self._closed

    async def wait_up(self) -> bool:
        """Wait for a reconnection as a request would (a restart takes a moment); whether it is up now."""
        if not self.up:
            with anyio.move_on_after(min(_CONNECT_WAIT_S, self.config.timeout_ms / 1000)):
                await self._connected.wait()
        return self.up

    def hold(self) -> None:
        """A call runs on this connection until `release`: a drain waits for it."""
        self._calls += 1

    def release(self) -> None:
        self._calls -= 1
        if not self._calls:
            self._idle.set()

    async def drained(self) -> None:
        """Until no call `hold`s it (a reload took it out of service: only the calls in flight still use it)."""
        while self._calls:
            self._idle = anyio.Event()
            await self._idle.wait()

    def unavailable(self) -> UpstreamUnavailableError:
        """The error a call to this upstream gets while it is down: -32000 naming it and why."""
        reason = self._last_error or "not connected"
        if self._retry_at is not None:  # a crash loop backs off up to 10 s: say when it tries again
            reason += f"; reconnecting in {max(self._retry_at - anyio.current_time(), 0.0):.1f} s"
        return UpstreamUnavailableError(
            CONNECTION_CLOSED, f"{self.role} {self.name!r} is unavailable ({reason})", {"upstream": self.name}
        )

    # ------------------------------------------------------------------ lifecycle

    async def run(
        self, *, retry_start: bool = False, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Connect, hand over readiness, and reconnect with backoff until cancelled.

        The first connection failure is raised (so a gateway fails at start with a clear error),
        unless `retry_start`; later failures are logged and retried.
        """
        started = False
        delay = _BACKOFF_FIRST_S
        ready_at: float | None = None

        def on_ready() -> None:
            nonlocal started, ready_at
            ready_at = anyio.current_time()
            if not started:
                started = True
                task_status.started()

        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                while not self._closed:
                    ready_at = None
                    try:
                        reason = await self._connect_once(on_ready)
                        self._last_error = f"the gateway closed it: it sent {reason}" if reason else "connection closed"
                    except Exception as exc:  # transport/handshake failure: report, then back off
                        if isinstance(innermost(exc), EraRefusedError):
                            continue  # reconnect at once on a fresh transport, in the handshake era
                        self._last_error = self._explain(describe_exception(exc), innermost(exc))
                        if not started and not retry_start:
                            raise UpstreamUnavailableError(
                                CONNECTION_CLOSED,
                                f"{self.role} {self.name!r} failed to start: {self._last_error}",
                                {"upstream": self.name},
                            ) from exc
                    finally:
                        self._mark_down()
                    if self._closed:
                        break
                    if ready_at is not None and anyio.current_time() - ready_at >= _STABLE_S:
                        delay = _BACKOFF_FIRST_S  # it was up a while: a fresh failure, not a crash loop
                    logger.warning("%s %r: %s; reconnecting in %.1fs", self.role, self.name, self._last_error, delay)
                    self.restarts += 1
                    if self.on_restart is not None:  # the gateway's metrics
                        self.on_restart()
                    self._retry_at = anyio.current_time() + delay
                    try:
                        await anyio.sleep(delay)
                    finally:
                        self._retry_at = None
                    delay = min(delay * 2, _BACKOFF_MAX_S)
        finally:
            if self._exchanges is not None:  # the HTTP client of private exchanges lives as long as this
                with anyio.CancelScope(shield=True):
                    await self._exchanges.aclose()
                self._exchanges = None

    async def open(self, tg: anyio.abc.TaskGroup) -> None:
        """`run` in `tg`, returning once its first handshake is done, as `tg.start(self.run)` does, except that
        a `close()` meanwhile raises at once (-32000 naming this upstream) while the connection's teardown (a
        stdio server's polite stop takes seconds) goes on in `tg`: the caller's client is answered before
        a shutting-down front ends its stream. Cancelling the caller closes the connection."""
        opened = _Opened()
        failed: list[UpstreamUnavailableError] = []

        async def run() -> None:
            try:
                await self.run(task_status=opened)
            except UpstreamUnavailableError as exc:  # raised only before it is ready: `run` retries later ones
                failed.append(exc)
            finally:
                opened.event.set()

        tg.start_soon(run)
        try:
            async with anyio.create_task_group() as race:

                async def until_closed() -> None:
                    await self._closing.wait()
                    race.cancel_scope.cancel()

                race.start_soon(until_closed)
                await opened.event.wait()
                race.cancel_scope.cancel()
        except BaseException:
            self.close()  # its caller is gone: nobody would use it
            raise
        if failed:
            raise failed[0]
        if self._closed:
            raise self.closed_error()

    def closed_error(self) -> UpstreamUnavailableError:
        """What a call to this connection gets once the gateway closed it (shutting down, the session ended)."""
        message = f"the gateway closed its connection to {self.role} {self.name!r} ({self._close_reason})"
        return UpstreamUnavailableError(CONNECTION_CLOSED, message, {"upstream": self.name})

    async def _connect_once(self, on_ready: Callable[[], None]) -> str | None:
        """One connection's life: open, handshake, serve until EOF (the upstream exited or hung up).
        Returns why the gateway closed it itself (a message over the line limit), else None."""
        early, self.early = self.early, None
        spawned = early.take(self.name, self.config) if early is not None else None
        async with open_wire(self.config, self._heard_http_error, spawned) as dispatcher:
            ended = self._ended = anyio.Event()
            async with anyio.create_task_group() as tg:
                await tg.start(self._pump, dispatcher, ended)
                self._dispatcher = dispatcher
                self.info = await self._handshake.run(dispatcher, self.client_params, self.log_level)
                await self._restore_session_state(dispatcher)
                self._connected.set()
                self._last_error = None
                if self.info.era == "2026-07-28" and self.on_notify is not None:
                    tg.start_soon(self._listen)
                if self.left_out:
                    self.left_out = False
                    tg.start_soon(self._announce_return)
                tg.start_soon(self._end_when_closed, ended)
                on_ready()
                if self.on_connected is not None:
                    self.on_connected()
                await ended.wait()
                self._mark_down()  # before the transport's teardown: new requests wait for the reconnect
                tg.cancel_scope.cancel()
        reason = getattr(dispatcher, "close_reason", None)
        return reason if isinstance(reason, str) else None

    async def _end_when_closed(self, ended: anyio.Event) -> None:
        """On `close()`, let the calls in flight settle a moment, then end the connection the ordinary way."""
        await self._closing.wait()
        if self._inflight:
            with anyio.move_on_after(_CLOSE_SETTLE_S):
                await self._settled.wait()
        ended.set()

    async def _restore_session_state(self, dispatcher: Wire) -> None:
        """After a restart, resubscribe a handshake-era upstream to what it was subscribed to and set its log
        level again, before any request reaches it: its clients' subscriptions outlive its process. What it
        now refuses is dropped, with a warning."""
        if self.era != "legacy":
            return
        for method, params in self._session_state.to_restore():
            body, opts = self._prepare(method, params, None, None, None, None)
            try:
                await self._sent(dispatcher, method, body, opts, shared=dispatcher)
            except (UpstreamUnavailableError, UpstreamTimeoutError):
                raise  # down again: the next connection tries again
            except MCPError as exc:
                logger.warning("%s %r: %s %s after its restart failed: %s", self.role, self.name, method, params, exc)
                self._session_state.forget(method, params)

    async def _pump(self, dispatcher: Wire, ended: anyio.Event, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        try:
            await dispatcher.run(self._on_request, self._on_notify, task_status=task_status)
        finally:
            ended.set()

    async def _listen(self) -> None:
        """2026-07-28 upstreams send `list_changed` only on a `subscriptions/listen` stream: keep one open."""
        wanted = listen_flags(self.info.capabilities if self.info is not None else {})
        if not wanted:
            return
        self._listens += 1
        try:
            await self.request(
                "subscriptions/listen",
                {"notifications": wanted},
                request_id=f"gateway-listen-{self._listens}",
                timeout_s=365 * 24 * 3600.0,
            )
        except MCPError as exc:
            logger.info("%s %r: subscriptions/listen ended: %s", self.role, self.name, exc.message)

    async def _announce_return(self) -> None:
        """Back after listings went out without it: its items are listable again, so each list it serves
        changed (the gateway relays these as the upstream's own `list_changed`)."""
        logger.info("%s %r is back; announcing its listings", self.role, self.name)
        caps = self.info.capabilities if self.info is not None else {}
        if self.on_notify is None:
            return
        for feature in ("tools", "prompts", "resources"):
            if feature in caps:
                await self.on_notify(f"notifications/{feature}/list_changed", None)

    def _heard_http_error(self, status: int, reason: str) -> None:
        self._http_error = f"{status} {reason}".strip()

    def _explain(self, message: str, exc: BaseException) -> str:
        """mcp's stand-in for an HTTP error status, with the status it stands for; a stdio server that could not
        be run, with its command (the OS error names neither)."""
        if isinstance(exc, FileNotFoundError | PermissionError) and (command := self.config.command) is not None:
            if self.config.cwd is not None and not os.path.isdir(self.config.cwd):
                return f"cannot run command {command!r} in {self.config.cwd!r}: no such folder"
            return f"command {command!r} {'not found' if isinstance(exc, FileNotFoundError) else 'is not executable'}"
        if not (isinstance(exc, MCPError) and is_http_error(exc)) or self._http_error is None:
            return message
        hint = f"; check the {self.role}'s bearer_token or headers" if self._http_error[:3] in ("401", "403") else ""
        return f"{message}: HTTP {self._http_error}{hint}"

    def _mark_down(self) -> None:
        """Forget the dead dispatcher; requests from now on wait for the next connection."""
        self._dispatcher = None
        if self._connected.is_set():  # replace only a spent event: waiters on an unset one stay valid
            self._connected = anyio.Event()

    def close(self, why: str = "shutting down") -> None:
        """Stop for good. An open connection ends itself (see `_CLOSE_GRACE_S`); one still connecting or backing
        off has nothing to end and stops at once. `why` ends the message calls still waiting on it get."""
        if not self._closed:
            self._close_reason = why
        self._closed = True
        self._closing.set()
        if self._scope is None:
            return
        if self.up:
            self._scope.deadline = min(self._scope.deadline, anyio.current_time() + _CLOSE_GRACE_S)
        else:
            self._scope.cancel()

    def speak_for(self, client_params: Mapping[str, Any] | None) -> None:
        """Present a stdio gateway's one handshake-era client from now on: its identity and capabilities
        in every 2026-07-28 request and in the `initialize` of a reconnection, and its logs unfiltered
        (a handshake-era server may log before `logging/setLevel`) until it sets a level."""
        if client_params:
            self.client_params = dict(client_params)
        if self.log_level is None:
            self.log_level = "debug"

    def envelope(self, client_meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The 2026-07-28 `_meta` envelope: the downstream client's if it sent one, else the one presented."""
        return envelope(client_meta, self.client_params, self.log_level)

    # ------------------------------------------------------------------ traffic

    async def _ready(self) -> Wire:
        dispatcher = self._dispatcher
        if dispatcher is not None:
            return dispatcher
        with anyio.move_on_after(min(_CONNECT_WAIT_S, self.config.timeout_ms / 1000)):
            await self._connected.wait()
        if self._dispatcher is None:
            raise self.unavailable()
        return self._dispatcher

    async def request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        *,
        request_id: Any = None,
        on_progress: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
        on_notify: OnUpstreamNotify | None = None,
        _in_span: bool = False,
    ) -> dict[str, Any]:
        """Send one request in this connection's era and return the raw result dict.

        Upstream JSON-RPC errors propagate as `MCPError` unchanged; a dropped connection becomes
        an error naming the upstream. `on_notify` receives the upstream's request-scoped
        notifications (logging, say) while this is the only request with a receiver in flight.
        """
        if self.telemetry is not None and not _in_span:
            return await self._traced_request(method, params, request_id, on_progress, headers, timeout_s, on_notify)
        started = time.perf_counter()
        if self.scrubber is not None and on_progress is not None:  # only calls whose client asked for progress
            on_progress = self.scrubber.progress_relay(on_progress)
        try:
            if on_notify is None:
                return await self._request(method, params, request_id, on_progress, headers, timeout_s)
            if self._receivers and self._private_exchanges:
                # Another call waits for its notifications here, and one stream cannot say whose a log line is:
                # a 2026-07-28 HTTP request is self-contained, so this one takes an exchange of its own.
                return await self._private_request(method, params, on_progress, headers, timeout_s, on_notify)
            token = object()
            self._receivers[token] = on_notify
            try:
                return await self._request(method, params, request_id, on_progress, headers, timeout_s)
            finally:
                del self._receivers[token]
        finally:
            if self.on_duration is not None:  # the gateway's metrics
                self.on_duration(time.perf_counter() - started)

    async def _traced_request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        request_id: Any,
        on_progress: Any,
        headers: Mapping[str, str] | None,
        timeout_s: float | None,
        on_notify: OnUpstreamNotify | None,
    ) -> dict[str, Any]:
        """`request` inside its CLIENT span, the span's trace context sent on in `_meta` (tracing on)."""
        assert self.telemetry is not None
        span, token, params = self.telemetry.start_upstream(method, params, self.name, self.role, self.config.url)
        error: BaseException | None = None
        try:
            return await self.request(
                method,
                params,
                request_id=request_id,
                on_progress=on_progress,
                headers=headers,
                timeout_s=timeout_s,
                on_notify=on_notify,
                _in_span=True,
            )
        except BaseException as exc:
            error = exc
            raise
        finally:
            self.telemetry.end_upstream((span, token), error)

    @property
    def _private_exchanges(self) -> bool:
        """Whether a request can go on a transport of its own: a 2026-07-28 Streamable HTTP upstream."""
        return self.config.url is not None and self.config.transport == "streamable-http" and self.era == "2026-07-28"

    async def _private_request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        on_progress: Any,
        headers: Mapping[str, str] | None,
        timeout_s: float | None,
        on_notify: OnUpstreamNotify,
    ) -> dict[str, Any]:
        """One request on its own Streamable HTTP exchange, so its notifications are known to be its own."""
        await self._ready()
        body, opts = self._prepare(method, params, None, on_progress, headers, timeout_s)

        async def refuse(dctx: DispatchContext[Any], method: str, params: Mapping[str, Any] | None) -> Any:
            raise MCPError(-32601, "Method not found", method)  # 2026-07-28 servers send no requests

        async def relay(dctx: DispatchContext[Any], method: str, params: Mapping[str, Any] | None) -> None:
            if method not in ("notifications/progress", "notifications/cancelled") and not is_task_method(method):
                body = dict(params) if params is not None else None
                await on_notify(method, body if self.scrubber is None else self.scrubber.notification(method, body))

        if self._exchanges is None:
            self._exchanges = http_client_for(self.config, self._heard_http_error)
        async with (
            open_transport(self.config, self._exchanges) as (read, write),
            anyio.create_task_group() as tg,
        ):
            dispatcher = JSONRPCDispatcher(read, write)
            await tg.start(dispatcher.run, refuse, relay)
            try:
                result = await self._sent(dispatcher, method, body, opts, shared=None)
            finally:
                tg.cancel_scope.cancel()
        return result

    async def _request(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        request_id: Any,
        on_progress: Any,
        headers: Mapping[str, str] | None,
        timeout_s: float | None,
    ) -> dict[str, Any]:
        dispatcher = await self._ready()
        body, opts = self._prepare(method, params, request_id, on_progress, headers, timeout_s)
        self._inflight += 1
        try:
            result = await self._sent(dispatcher, method, body, opts, shared=dispatcher)
            if method in SESSION_STATE_METHODS and self.era == "legacy":
                self._session_state.remember(method, params)
            return result
        except ValueError:
            if request_id is None:
                raise
            return await self._request(method, params, None, on_progress, headers, timeout_s)
        finally:
            self._inflight -= 1
            if self._closed and not self._inflight:
                self._settled.set()

    def _prepare(
        self,
        method: str,
        params: Mapping[str, Any] | None,
        request_id: Any,
        on_progress: Any,
        headers: Mapping[str, str] | None,
        timeout_s: float | None,
    ) -> tuple[dict[str, Any], CallOptions]:
        """The body in this connection's era (its envelope, or none) and the call's options."""
        body = body_for_era(params, self.era, self.envelope)
        opts: CallOptions = {"timeout": timeout_s if timeout_s is not None else self.config.timeout_ms / 1000}
        if request_id is not None:
            opts["request_id"] = request_id
        if on_progress is not None:
            opts["on_progress"] = on_progress
        if self.is_http:
            opts["headers"] = {**self._routing_headers(method, body), **(headers or {})}
        return body, opts

    async def _sent(
        self, dispatcher: Wire, method: str, body: dict[str, Any], opts: CallOptions, *, shared: Wire | None
    ) -> dict[str, Any]:
        """Send on `dispatcher`; mcp's local errors become errors naming the upstream. `shared` is the
        connection's own dispatcher (marked down when it closed), None for a private exchange."""
        try:
            return await dispatcher.send_raw_request(method, body or None, opts)
        except MCPError as exc:
            if is_local_timeout(exc, method):  # our deadline, not an upstream's own -32001 error
                timeout_ms = opts["timeout"] * 1000
                raise UpstreamTimeoutError(
                    exc.code,
                    f"{self.role} {self.name!r} did not answer {method} within {timeout_ms:g} ms",
                    {"upstream": self.name, "timeoutMs": timeout_ms},
                ) from None
            if is_local_close(exc):  # not an upstream's own -32000 error, which passes through
                if shared is not None and self._dispatcher is shared:
                    self._mark_down()
                if self._closed:
                    raise self.closed_error() from None
                reason = getattr(dispatcher, "close_reason", None)
                data: dict[str, Any] = {"upstream": self.name}
                if reason is not None:
                    message = f"the gateway closed its connection to {self.role} {self.name!r}: it sent {reason}"
                    data["reason"] = reason
                else:
                    message = f"{self.role} {self.name!r} closed the connection"
                raise UpstreamUnavailableError(CONNECTION_CLOSED, message, data) from None
            if shared is not None and self._session_lost(exc):
                # Streamable HTTP: a 404 to a request naming a session means the server no longer knows it (it
                # restarted): the client must start a new session, or every later request gets the same 404.
                if self._dispatcher is shared:
                    self._mark_down()
                    if self._ended is not None:
                        self._ended.set()
                message = f"{self.role} {self.name!r} no longer knows the gateway's session (HTTP 404): reconnecting"
                logger.warning("%s", message)
                data = {"upstream": self.name, "reason": "session not found"}
                raise UpstreamUnavailableError(CONNECTION_CLOSED, message, data) from None
            if is_http_error(exc) and self._http_error is not None:
                message = self._explain(f"{self.role} {self.name!r} answered with an error", exc)
                raise MCPError(exc.code, message, {"upstream": self.name, "httpStatus": self._http_error}) from None
            reason = too_long(exc)
            if reason is not None:
                message = f"{self.role} {self.name!r} sent {reason}"
                raise MCPError(INTERNAL_ERROR, message, {"upstream": self.name, "reason": reason}) from None
            if is_lost_stream(exc):  # this call's HTTP response stream broke; the connection may live on
                message = f"{self.role} {self.name!r} closed the connection ({exc.message})"
                raise UpstreamUnavailableError(CONNECTION_CLOSED, message, {"upstream": self.name}) from None
            raise

    def _session_lost(self, exc: MCPError) -> bool:
        """A handshake-era HTTP session's 404: mcp's "Session terminated", or the server's own error in its body."""
        lost = self.is_http and self.era == "legacy" and exc.code == INVALID_REQUEST
        if not lost or self._http_error is None or not self._http_error.startswith("404"):
            return False
        self._http_error = None  # heard once: a later -32600 needs a 404 of its own
        return True

    async def notify(self, method: str, params: Mapping[str, Any] | None) -> None:
        dispatcher = self._dispatcher
        if dispatcher is None:
            return  # notifications to a down upstream are dropped: there is nobody to tell
        body = dict(params) if params is not None else None
        opts: CallOptions = {}
        if self.is_http:
            opts["headers"] = self._routing_headers(method, body or {})
        try:
            await dispatcher.notify(method, body, opts)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, MCPError):
            logger.debug("%s %r: notification %s dropped, connection closing", self.role, self.name, method)

    def _routing_headers(self, method: str, body: Mapping[str, Any]) -> dict[str, str]:
        info = self.info
        return {} if info is None else routing_headers(info.era, info.protocol_version, method, body)

    async def _on_request(self, dctx: DispatchContext[Any], method: str, params: Mapping[str, Any] | None) -> Any:
        if self.on_request is None:
            raise MCPError(-32601, "Method not found", method)
        if (refused := task_refusal(method, params)) is not None:
            raise refused  # a client's task result would reach this upstream ungoverned
        return await self.on_request(method, dict(params) if params is not None else None)

    async def _on_notify(self, dctx: DispatchContext[Any], method: str, params: Mapping[str, Any] | None) -> None:
        # Progress reaches the caller through `on_progress`; cancellation is applied by the dispatcher. A task's
        # status is relayed from a handshake-era session only (gateway/tasks.py), on the connection-wide path,
        # where the session's owner is checked (`notifications.Notifications`).
        task_status = method == TASK_STATUS and self.era == "legacy"
        if method in ("notifications/progress", "notifications/cancelled") or (
            is_task_method(method) and not task_status
        ):
            return
        body = dict(params) if params is not None else None
        # A request-scoped notification (a log line, say) goes to the one request waiting for them;
        # with several in flight it cannot be attributed, so it takes the connection-wide path.
        scoped = not method.endswith("list_changed") and not method.startswith("notifications/resources/")
        if self.scrubber is not None:
            body = self.scrubber.notification(method, body)
        if scoped and not task_status and len(self._receivers) == 1:
            await next(iter(self._receivers.values()))(method, body)
            return
        if self.on_notify is not None:
            await self.on_notify(method, body)


#: Our words for what `_MessageLimitTransport` cut off; mcp's HTTP client reports the error it raised as
