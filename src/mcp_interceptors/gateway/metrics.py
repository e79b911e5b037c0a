"""Prometheus metrics of one gateway: its own `CollectorRegistry`, the hooks the forwarding code calls,
and a small loopback listener serving the text exposition format (for a stdio gateway).

The gateway (`server.py`, `session.py`, `legs.py`, `upstream.py`) calls in; this module imports
nothing of theirs. Labelled children are cached, so a hot-path update is a dict lookup and an add.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.abc
import h11
from mcp_types import methods as wire_methods
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

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
#: How long the metrics listener gives one connection to send its request head and take the answer.
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
    """Serve `GET /metrics` on HOST:PORT (loopback, checked by the config) until cancelled; reports the port."""
    listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
    open_connections = 0

    async def handle(stream: anyio.abc.SocketStream) -> None:
        nonlocal open_connections
        if open_connections >= _MAX_CONNECTIONS:
            await _refuse(stream)
            return
        open_connections += 1
        try:
            await _answer(metrics, stream)
        finally:
            open_connections -= 1

    async with listener:
        task_status.started(listener.extra(anyio.abc.SocketAttribute.local_port))
        await listener.serve(handle)


async def _refuse(stream: anyio.abc.SocketStream) -> None:
    """Too many connections: say 503 (without waiting for the request) and close."""
    async with stream:
        with anyio.move_on_after(1), contextlib.suppress(OSError, anyio.BrokenResourceError):
            await stream.send(_BUSY)


async def _answer(metrics: GatewayMetrics, stream: anyio.abc.SocketStream) -> None:
    """One scrape per connection, within `_READ_S`. A bad or broken one is dropped alone: it never ends the
    gateway."""
    async with stream:
        with anyio.move_on_after(_READ_S):
            await _exchange(metrics, stream)


async def _exchange(metrics: GatewayMetrics, stream: anyio.abc.SocketStream) -> None:
    try:
        connection = h11.Connection(h11.SERVER)
        request = await _read_request(connection, stream)
        if request is None:
            return
        status, body = _response_for(metrics, request)
        content_type = CONTENT_TYPE if status == 200 else "text/plain; charset=utf-8"
        headers = [("content-type", content_type), ("content-length", str(len(body))), ("connection", "close")]
        out = connection.send(h11.Response(status_code=status, headers=headers)) or b""
        if request.method != b"HEAD":
            out += connection.send(h11.Data(data=body)) or b""
        out += connection.send(h11.EndOfMessage()) or b""
        await stream.send(out)
    except (OSError, anyio.BrokenResourceError, anyio.EndOfStream, h11.ProtocolError) as exc:
        logger.debug("metrics listener: dropped a connection: %s", exc)
    except Exception:
        logger.exception("metrics listener: a scrape failed")


async def _read_request(connection: h11.Connection, stream: anyio.abc.SocketStream) -> h11.Request | None:
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            connection.receive_data(await stream.receive())
        elif isinstance(event, h11.Request):
            return event
        else:
            return None


def _response_for(metrics: GatewayMetrics, request: h11.Request) -> tuple[int, bytes]:
    host = dict(request.headers).get(b"host", b"")
    if host.rsplit(b":", 1)[0] not in _LOOPBACK_HOSTS and host not in _LOOPBACK_HOSTS:
        return 421, b"Misdirected request: the metrics listener answers loopback Host names only\n"
    if request.target.split(b"?", 1)[0] != b"/metrics":
        return 404, b"Not found: metrics are at /metrics\n"
    if request.method not in (b"GET", b"HEAD"):
        return 405, b"Method not allowed\n"
    return 200, metrics.exposition()
