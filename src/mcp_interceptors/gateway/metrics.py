"""Prometheus metrics of one gateway: its own `CollectorRegistry`, the hooks the forwarding code calls,
and a loopback listener serving the exposition (prometheus_client's ASGI app on uvicorn; a stdio gateway's
only way to expose them).

The gateway (`forward.py`, `governor.py`, `connections.py`, `upstream/connection.py`) calls in; this module imports
nothing of theirs. Labelled children are cached, so a hot-path update is a dict lookup and an add.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.abc
import uvicorn
from mcp_types import methods as wire_methods
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, make_asgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector
from uvicorn.protocols.http.h11_impl import H11Protocol

from mcp_interceptors.protocol.events import CLIENT_INITIATED_EVENTS, SERVER_INITIATED_EVENTS

if TYPE_CHECKING:
    from mcp_interceptors.audit.writer import WriterStats
    from mcp_interceptors.executor import ChainResult

logger = logging.getLogger(__name__)

Outcome = Literal["ok", "error", "blocked", "cancelled"]
#: Methods counted under their own name; any other (a client may send anything) is counted as `other`,
#: so a client cannot grow the label set.
KNOWN_METHODS = frozenset(CLIENT_INITIATED_EVENTS | SERVER_INITIATED_EVENTS | wire_methods.SPEC_CLIENT_METHODS)
#: Buckets in seconds: a chain of local guards takes well under a millisecond, an upstream call up to minutes.
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: How long a connection to the metrics listener may stay open (a scrape takes milliseconds).
_READ_S = 10.0
#: Connections the metrics listener serves at once; more are answered 503 and closed at once, so a scraper
#: loop or a slowloris cannot hold the gateway's file descriptors.
_MAX_CONNECTIONS = 16
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: 34\r\n"
    b"connection: close\r\n\r\nToo many scrapes at once: retry.\r\n"
)
_LOOPBACK_HOSTS = frozenset({b"127.0.0.1", b"localhost", b"[::1]"})


def method_label(method: str) -> str:
    return method if method in KNOWN_METHODS else "other"


#: `(upstream name, whether that connection is up now)` for every open connection to an upstream.
Connections = Callable[[], Iterable[tuple[str, bool]]]


class GatewayMetrics:
    """The metrics of one gateway; `open_sessions`, `connections` and `audit_stats` are read at scrape time."""

    def __init__(
        self,
        upstreams: Iterable[str],
        *,
        open_sessions: Callable[[], int] = lambda: 0,
        connections: Connections = lambda: (),
        audit_stats: Callable[[], WriterStats | None] = lambda: None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._requests = _Labelled(
            Counter(
                "mcp_gateway_requests",
                "Client requests forwarded, by upstream ('' when not one), method and outcome.",
                ["upstream", "method", "outcome"],
                registry=r,
            )
        )
        self._decisions = _Labelled(
            Counter(
                "mcp_gateway_chain_decisions",
                "Chain runs on gateway legs, by status.",
                ["event", "phase", "status"],
                registry=r,
            )
        )
        self._chain_seconds = _Labelled(
            Histogram(
                "mcp_gateway_chain_duration_seconds",
                "Chain run time.",
                ["event", "phase"],
                buckets=_BUCKETS,
                registry=r,
            )
        )
        self._failures = _Labelled(
            Counter(
                "mcp_gateway_interceptor_failures",
                "Interceptor invocations that crashed or timed out.",
                ["interceptor", "kind"],
                registry=r,
            )
        )
        self._audit_denials = _Labelled(
            Counter(
                "mcp_gateway_audit_mode_denials",
                "Denials by interceptors in audit mode: what they would have blocked (a staged rollout's evidence).",
                ["interceptor", "event", "phase"],
                registry=r,
            )
        )
        self._upstream_seconds = Histogram(
            "mcp_gateway_upstream_request_duration_seconds",
            "Time an upstream took to answer a request.",
            ["upstream"],
            buckets=_BUCKETS,
            registry=r,
        )
        self._upstream_restarts = Counter(
            "mcp_gateway_upstream_restarts",
            "Reconnections of an upstream connection (shared or a session's own) after it ended or failed to start.",
            ["upstream"],
            registry=r,
        )
        for name in upstreams:
            self._upstream_restarts.labels(name)  # 0 from the start: a rate over a missing series is no rate
        Gauge("mcp_gateway_sessions_open", "Open downstream sessions.", registry=r).set_function(
            lambda: float(open_sessions())
        )
        r.register(_UpstreamCollector(tuple(upstreams), connections))
        r.register(_AuditCollector(audit_stats))

    def request_done(self, upstream: str | None, method: str, outcome: Outcome) -> None:
        # By the label, not the method: a client sending made-up methods must not grow the cache.
        self._requests(upstream or "", method_label(method), outcome).inc()

    def chain_ran(self, result: ChainResult) -> None:
        """One chain run on a gateway leg: its decision, its duration, and its interceptors' failures."""
        self._decisions(result.event, result.phase, result.status).inc()
        self._chain_seconds(result.event, result.phase).observe(result.total_duration_ms / 1000)
        for failure in result.failures:
            self._failures(failure.interceptor, "timeout" if failure.timeout else "crash").inc()
        for item in result.results:
            if item.mode == "audit" and getattr(item, "valid", True) is False:
                self._audit_denials(item.interceptor or "", result.event, result.phase).inc()

    def upstream_timer(self, upstream: str) -> Callable[[float], None]:
        """What an upstream connection calls with each request's duration in seconds."""
        observe: Callable[[float], None] = self._upstream_seconds.labels(upstream).observe
        return observe

    def upstream_restarter(self, upstream: str) -> Callable[[], None]:
        """What an upstream connection calls each time it reconnects."""
        inc: Callable[[], None] = self._upstream_restarts.labels(upstream).inc
        return inc

    def exposition(self) -> bytes:
        """The text exposition format (what `GET /metrics` answers)."""
        return generate_latest(self.registry)


class _Labelled:
    """A labelled metric whose children are cached by label values: building one costs a lock and a dict,
    so a hot-path update is one lookup."""

    def __init__(self, metric: Any) -> None:
        self.metric = metric
        self.children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *labels: str) -> Any:
        child = self.children.get(labels)
        if child is None:
            child = self.children[labels] = self.metric.labels(*labels)
        return child


class _UpstreamCollector(Collector):
    """`upstream_up` and `upstream_connections`, from every open connection at scrape time: the shared ones
    and each handshake-era session's own (each such session has a process or HTTP session of its own)."""

    def __init__(self, upstreams: tuple[str, ...], connections: Connections) -> None:
        self.upstreams = upstreams
        self.connections = connections

    def collect(self) -> Iterator[Metric]:
        counts = {(name, state): 0 for name in self.upstreams for state in ("up", "down")}
        for name, is_up in self.connections():
            key = (name, "up" if is_up else "down")
            if key in counts:  # only configured upstreams: the label set stays the config's
                counts[key] += 1
        up = GaugeMetricFamily(
            "mcp_gateway_upstream_up",
            "Whether at least one connection to the upstream is up (1) or none is (0).",
            labels=["upstream"],
        )
        connections = GaugeMetricFamily(
            "mcp_gateway_upstream_connections",
            "Open connections to the upstream (shared and per handshake-era session), by state.",
            labels=["upstream", "state"],
        )
        for name in self.upstreams:
            up.add_metric([name], float(counts[name, "up"] > 0))
            for state in ("up", "down"):
                connections.add_metric([name, state], float(counts[name, state]))
        yield up
        yield connections

    def describe(self) -> Iterator[Metric]:
        return iter(())


class _AuditCollector(Collector):
    """The audit writer's counters, read from its stats at scrape time (absent while auditing is off)."""

    def __init__(self, stats: Callable[[], WriterStats | None]) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        stats = self.stats()
        if stats is None:
            return
        yield CounterMetricFamily("mcp_gateway_audit_records", "Audit records written.", value=stats.records)
        yield CounterMetricFamily(
            "mcp_gateway_audit_write_failures", "Audit records the store refused.", value=stats.failed_records
        )

    def describe(self) -> Iterator[Metric]:
        return iter(())  # names depend on whether auditing is on; describing them would pin them


CONTENT_TYPE = CONTENT_TYPE_LATEST


async def serve_metrics(
    metrics: GatewayMetrics, host: str, port: int, *, task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Serve `GET /metrics` on HOST:PORT (loopback, checked by the config) until cancelled; reports the port.

    prometheus_client's ASGI app writes the exposition (content negotiation, gzip, `name[]` filters) and
    uvicorn serves it, with `_ScrapeProtocol` bounding its connections."""
    sock = _listening_socket(host, port)
    config = uvicorn.Config(
        _loopback_only(make_asgi_app(metrics.registry)),
        http=_ScrapeProtocol,
        lifespan="off",
        log_config=None,  # the gateway's logging stays as it configured it
        log_level="warning",
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=1,
    )
    server = _ListenerServer(config)

    async def run() -> None:
        with anyio.CancelScope(shield=True):  # cancelled, it would leave its sockets open: it is asked to exit
            await server.serve(sockets=[sock])

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        # uvicorn offers no readiness event; this loop only runs at start-up
        while not server.started:
            if server.should_exit:
                raise OSError(f"the metrics listener on {host}:{port} did not start")
            await anyio.sleep(0.01)
        task_status.started(sock.getsockname()[1])
        try:
            await anyio.sleep_forever()
        finally:
            server.should_exit = True


def _listening_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, so asyncio sets TCP_NODELAY on each accepted connection (it checks the protocol):
    # without it, a kept-alive scrape waited ~40 ms for a delayed ACK before its last chunk was sent.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(_MAX_CONNECTIONS)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


class _ListenerServer(uvicorn.Server):
    """uvicorn without its signal handlers: the gateway handles SIGTERM and SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class _ScrapeProtocol(H11Protocol):
    """uvicorn's h11 protocol, bounded: past `_MAX_CONNECTIONS` a connection gets 503 at once (before it
    sends anything), and a connection still open `_READ_S` after it was made is closed (a slowloris or a
    stuck scraper cannot hold the gateway's file descriptors)."""

    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > _MAX_CONNECTIONS:
            transport.write(_BUSY)
            transport.close()
            return
        self._deadline = self.loop.call_later(_READ_S, transport.close)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        super().connection_lost(exc)


def _loopback_only(app: Any) -> Any:
    """`app` at `/metrics` (GET and HEAD) for loopback Host names only: a page on another site that resolves
    its name to 127.0.0.1 (DNS rebinding) is refused, as it is on the HTTP front."""

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        host = dict(scope["headers"]).get(b"host", b"")
        if host.rsplit(b":", 1)[0] not in _LOOPBACK_HOSTS and host not in _LOOPBACK_HOSTS:
            await _plain(send, 421, b"Misdirected request: the metrics listener answers loopback Host names only\n")
        elif scope["path"] != "/metrics":
            await _plain(send, 404, b"Not found: metrics are at /metrics\n")
        elif scope["method"] not in ("GET", "HEAD"):
            await _plain(send, 405, b"Method not allowed\n")
        else:
            await app(scope, receive, send)

    return guarded


async def _plain(send: Any, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
