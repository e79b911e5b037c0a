"""Serve a `Gateway` on stdio or Streamable HTTP (plus the legacy SSE endpoint), with auth and signals.

HTTP binds loopback by default with DNS-rebinding protection (`hosts.py`) and read deadlines
(`read_deadlines.py`); a non-loopback bind needs auth unless `insecure_no_auth` is set. Shutdown is
clean: uvicorn drains (calls still waiting on an upstream when the drain ends get a JSON-RPC error),
then upstreams close.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import anyio.abc
import uvicorn
from mcp.server.auth.settings import AuthSettings
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from sse_starlette.sse import AppStatus

from mcp_interceptors.gateway.approvals.callbacks import callback_route
from mcp_interceptors.gateway.auth import build_auth
from mcp_interceptors.gateway.config import GatewayConfig, authority
from mcp_interceptors.gateway.fronts.hosts import StrictHosts
from mcp_interceptors.gateway.fronts.http import streamable_http_app
from mcp_interceptors.gateway.fronts.read_deadlines import ReadDeadlinesApp, deadline_protocol
from mcp_interceptors.gateway.fronts.sse import sse_routes
from mcp_interceptors.gateway.fronts.stdio import serve_stdio_fast
from mcp_interceptors.gateway.gateway import Gateway
from mcp_interceptors.gateway.health import health_route
from mcp_interceptors.gateway.metrics import CONTENT_TYPE, GatewayMetrics
from mcp_interceptors.gateway.preflight import ListenError, check_bind
from mcp_interceptors.gateway.web_view import ui_mount

logger = logging.getLogger(__name__)
#: The names the Host header of a loopback bind may carry (besides `http.allowed_hosts`).
LOOPBACK = ("127.0.0.1", "localhost", "::1")
WILDCARD = ("0.0.0.0", "::", "")
#: On shutdown, how long in-flight responses may finish; open SSE streams never would on their own.
_DRAIN_S = 3.0
#: Before the drain ends, calls still waiting on an upstream are failed, so their clients get an error.
_ABORT_MARGIN_S = 0.5
#: When the drain ends, open SSE streams (GET, `/sse`) are ended; sse-starlette notices within 0.5 s, and
#: uvicorn cancels what is still running this much later (a cancelled stream logs a traceback).
_STREAMS_END_S = 1.0


async def serve_stdio(gateway: Gateway) -> None:
    """Serve until the client closes stdin, or SIGTERM/SIGINT asks us to stop (the caller then closes
    the upstreams, so no server outlives the gateway)."""
    if sys.platform != "win32":
        async with anyio.create_task_group() as tg:
            tg.start_soon(_cancel_on_signal, tg.cancel_scope)
            await serve_stdio_fast(gateway)
            tg.cancel_scope.cancel()
        return
    if not gateway.connected:
        await gateway.connect_upstreams()  # no first message to read ahead of mcp's transport
    server = gateway.server  # Windows pipes cannot be awaited: mcp's threaded transport
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def http_app(gateway: Gateway, host: str, port: int, *, insecure_no_auth: bool = False) -> Any:
    """The Starlette app serving `http.path` (Streamable HTTP) and, optionally, `/sse` + `/messages/`."""
    config: GatewayConfig = gateway.config
    check_bind(config, host, port, insecure_no_auth=insecure_no_auth)  # also checked before anything starts
    allowed_hosts = [f"{h}:*" for h in ("127.0.0.1", "localhost", "[::1]")] + list(config.http.allowed_hosts)
    if host not in LOOPBACK:
        allowed_hosts.append(authority(host, port))
    if host in WILDCARD and not config.http.allowed_hosts:
        logger.warning(
            "serving every interface (%s), but only requests whose Host header names localhost are accepted "
            "(DNS-rebinding protection; others get 421): list the names clients use in http.allowed_hosts, "
            'e.g. ["gateway.example.com:%d"]',
            authority(host, port),
            port,
        )
    allowed_origins = [f"http://{h}:*" for h in ("127.0.0.1", "localhost", "[::1]")] + list(config.http.allowed_origins)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=_with_default_ports(allowed_hosts),
        allowed_origins=_with_default_ports(allowed_origins),
    )
    auth_settings, verifier = build_auth(config, host, port)
    routes = sse_routes(gateway, security, config.http.max_body_bytes, auth_settings) if config.http.sse else []
    routes.append(health_route(gateway))
    # The approval webhook's callback: signed answers, so no bearer auth (the only route without it but `/healthz`).
    gateway.callbacks.base_url = f"http://{authority('127.0.0.1' if host in WILDCARD else host, port)}"
    routes.append(callback_route(gateway.callbacks, config.http.max_body_bytes))
    if config.http.metrics and gateway.metrics is not None:
        routes.append(metrics_route(gateway.metrics, security, auth_settings))
    if (web_view := ui_mount(config, verifier, allowed_hosts)) is not None:
        routes.append(web_view)
    # `json_response` stays off. For 2026-07-28 requests mcp already answers with a JSON body unless the
    # call emits a notification first. For the handshake era the flag covers every session of the manager,
    # and it drops the progress, log and sampling/elicitation traffic relayed during a call
    # (docs/benchmarks.md, "JSON responses").
    app = streamable_http_app(gateway, security, auth_settings, verifier, routes)
    return StrictHosts(app, security.allowed_hosts, security.allowed_origins)


def _with_default_ports(entries: list[str]) -> list[str]:
    """`entries` plus, for each that allows any port (`name:*`) or names a default one (`name:80`, `name:443`;
    for an origin, its scheme's), the bare name: a client leaves a default port out (`Host: localhost` is
    `localhost:80`), and mcp matches `name:*` only against `name:port` (a gateway bound to port 80 refused every
    client with 421, even at the URL it printed)."""
    bare: list[str] = []
    for entry in entries:
        name, _, port = entry.rpartition(":")
        scheme, found, _ = entry.partition("://")
        defaults = {"http": ("80",), "https": ("443",)}.get(scheme, ()) if found else ("80", "443")
        if name and (port == "*" or port in defaults) and name not in entries:
            bare.append(name)
    return entries + bare


def metrics_route(metrics: GatewayMetrics, security: TransportSecuritySettings, auth: AuthSettings | None) -> Any:
    """`GET /metrics`: the Prometheus text format, behind the same Host/Origin checks and bearer auth as the
    MCP endpoint (metrics name the upstreams and interceptors, and show the traffic)."""
    from mcp.server.auth.middleware.bearer_auth import RequireAuthMiddleware
    from mcp.server.transport_security import TransportSecurityMiddleware
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    checks = TransportSecurityMiddleware(security)

    class Scrape:
        """An ASGI endpoint (a plain function would be taken for a request handler, and auth wraps ASGI apps)."""

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            refused = await checks.validate_request(Request(scope, receive))
            response = refused or Response(metrics.exposition(), media_type=CONTENT_TYPE)
            await response(scope, receive, send)

    endpoint: Any = Scrape()
    if auth is not None:
        endpoint = RequireAuthMiddleware(endpoint, auth.required_scopes or [], None)
    return Route("/metrics", endpoint=endpoint, methods=["GET"])


async def serve_http(
    gateway: Gateway,
    host: str,
    port: int,
    *,
    insecure_no_auth: bool = False,
    on_ready: Callable[[], None] | None = None,
) -> None:
    http = gateway.config.http
    # httptools (a dependency) parses requests where it is installed, else h11, as uvicorn chooses by default;
    # wrapped, so that a request's headers and body are read within their deadlines.
    protocol = deadline_protocol(http.header_timeout_s, http.body_timeout_s)
    app = ReadDeadlinesApp(http_app(gateway, host, port, insecure_no_auth=insecure_no_auth), protocol)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        http=protocol,
        # Its access lines are INFO, below that level: off, uvicorn does not build each request's line either.
        access_log=False,
        lifespan="on",
        timeout_keep_alive=http.keep_alive_s,
        # A request's address is its connection's: uvicorn would take it from the `X-Forwarded-For` of any
        # loopback client, and anonymous 2026-07-28 clients each get an in-flight budget per address.
        proxy_headers=False,
        timeout_graceful_shutdown=int(_DRAIN_S + _STREAMS_END_S),
    )
    server = _Server(config)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_stop_on_signal, server, gateway.close_upstreams)
            tg.start_soon(server.serve)
            if on_ready is not None:
                # uvicorn offers no readiness event; this loop only runs at start-up
                while not server.started and not server.should_exit:  # noqa: ASYNC110
                    await anyio.sleep(0.02)
                on_ready()
            await server.finished.wait()
            tg.cancel_scope.cancel()
    finally:
        AppStatus.should_exit = False  # process-wide: a later server in this process must not start stopped


class _Server(uvicorn.Server):
    """uvicorn minus its signal handling, which re-raises SIGTERM after draining and so kills the
    process before the gateway closes its upstreams; `_stop_on_signal` asks it to exit instead."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.finished = anyio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def serve(self, sockets: Any = None) -> None:
        try:
            await super().serve(sockets)
        except SystemExit as exc:  # uvicorn's start-up failure (a bind lost to a race, say); it logged why
            raise ListenError(f"the HTTP server did not start (uvicorn exit status {exc.code})") from None
        finally:
            self.finished.set()


async def _cancel_on_signal(scope: anyio.CancelScope) -> None:
    """SIGTERM/SIGINT end a stdio gateway like end of input: cleanly, exit status 0."""
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            scope.cancel()
            return


async def _stop_on_signal(server: uvicorn.Server, abort: Callable[[], None]) -> None:
    """SIGTERM/SIGINT: drain (uvicorn's graceful shutdown); a second one skips the drain.

    Shortly before the drain ends (uvicorn then cuts every connection), `abort` closes the upstream
    connections, so a call still in flight is answered with a JSON-RPC error instead of a torn stream.
    """
    async with anyio.create_task_group() as tg:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for _ in signals:
                if server.should_exit:
                    server.force_exit = True
                    abort()
                else:
                    tg.start_soon(_abort_later, abort)
                server.should_exit = True


async def _abort_later(abort: Callable[[], None]) -> None:
    """Fail the calls still in flight shortly before the drain ends; when it ends, end the open SSE streams
    (a handshake-era session's GET stream, an `/sse` stream), which never end on their own.

    sse-starlette ends its streams when uvicorn's own signal handler runs, which `_Server` replaces: without
    `AppStatus.should_exit`, uvicorn cancelled them at its timeout and logged a traceback for each.
    """
    await anyio.sleep(_DRAIN_S - _ABORT_MARGIN_S)  # a deadline, not a poll: uvicorn's drain timer
    abort()
    await anyio.sleep(_ABORT_MARGIN_S)  # the failed calls' answers go out on their streams first
    AppStatus.should_exit = True
