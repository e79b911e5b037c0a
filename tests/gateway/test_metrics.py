"""`gateway/metrics.py`: the gateway's counters, histograms and gauges, and its loopback listener."""

from __future__ import annotations

import tracemalloc
from types import SimpleNamespace
from typing import Any

import anyio
import httpx2
import pytest

from mcp_interceptors import Chain
from mcp_interceptors.audit.writer import WriterStats
from mcp_interceptors.gateway import metrics as metrics_module
from mcp_interceptors.gateway.config import ConfigError, parse_config
from mcp_interceptors.gateway.gateway import Gateway
from mcp_interceptors.gateway.metrics import GatewayMetrics, serve_metrics
from mcp_interceptors.gateway.session import DownstreamSession

pytestmark = pytest.mark.anyio

UPSTREAM = {"command": "python"}


class FakeConnection:
    """What the metrics read of an upstream connection."""

    def __init__(self, name: str, *, up: bool, closed: bool = False) -> None:
        self.name, self.up, self.closed = name, up, closed

    def close(self, why: str = "shutting down") -> None:
        self.closed = True


def value(metrics: GatewayMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def chain_result(
    status: str, *failures: tuple[str, bool], duration_ms: float = 3.0, results: tuple[Any, ...] = ()
) -> Any:
    failed = [SimpleNamespace(interceptor=name, timeout=timeout) for name, timeout in failures]
    return SimpleNamespace(
        event="tools/call",
        phase="request",
        status=status,
        total_duration_ms=duration_ms,
        failures=failed,
        results=list(results),
    )


def test_audit_mode_denials_are_counted_though_the_chain_succeeds() -> None:
    metrics = GatewayMetrics(["a"])
    would_block = SimpleNamespace(interceptor="pii", mode="audit", valid=False)
    passed = SimpleNamespace(interceptor="secrets", mode="audit", valid=True)
    enforced = SimpleNamespace(interceptor="size-limit", mode="active", valid=True)
    mutator = SimpleNamespace(interceptor="redact", mode="audit", modified=True)
    for _ in range(2):
        metrics.chain_ran(chain_result("success", results=(would_block, passed, enforced, mutator)))
    denials = "mcp_gateway_audit_mode_denials_total"
    assert value(metrics, denials, interceptor="pii", event="tools/call", phase="request") == 2
    assert value(metrics, denials, interceptor="secrets", event="tools/call", phase="request") is None
    assert (
        value(metrics, "mcp_gateway_chain_decisions_total", event="tools/call", phase="request", status="success") == 2
    )


def test_requests_are_counted_by_upstream_method_and_outcome() -> None:
    metrics = GatewayMetrics(["a"])
    metrics.request_done("a", "tools/call", "ok")
    metrics.request_done("a", "tools/call", "ok")
    metrics.request_done("a", "tools/call", "blocked")
    metrics.request_done(None, "tools/list", "error")
    assert value(metrics, "mcp_gateway_requests_total", upstream="a", method="tools/call", outcome="ok") == 2
    assert value(metrics, "mcp_gateway_requests_total", upstream="a", method="tools/call", outcome="blocked") == 1
    assert value(metrics, "mcp_gateway_requests_total", upstream="", method="tools/list", outcome="error") == 1


def test_an_unknown_method_is_counted_as_other_so_clients_cannot_grow_the_labels() -> None:
    metrics = GatewayMetrics(["a"])
    for n in range(5):
        metrics.request_done("a", f"vendor/thing{n}", "error")
    assert value(metrics, "mcp_gateway_requests_total", upstream="a", method="other", outcome="error") == 5
    samples = [s for m in metrics.registry.collect() if m.name == "mcp_gateway_requests" for s in m.samples]
    assert {s.labels["method"] for s in samples} == {"other"}
    assert len(metrics._requests.children) == 1  # nor the cache of labelled children behind them


def test_unknown_methods_a_client_sends_are_not_kept_in_memory() -> None:
    """Each method name is counted as `other` and then forgotten: a client sending ever new (or huge) names
    must not grow the gateway's memory."""
    metrics = GatewayMetrics(["a"])
    metrics.request_done("a", "vendor/warm-up", "error")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(200):
            metrics.request_done("a", f"vendor/{n}/" + "x" * 50_000, "error")
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 1_000_000, f"{kept} bytes kept for 200 unknown method names"
    assert value(metrics, "mcp_gateway_requests_total", upstream="a", method="other", outcome="error") == 201


def test_chain_runs_count_decisions_durations_and_interceptor_failures() -> None:
    metrics = GatewayMetrics(["a"])
    metrics.chain_ran(chain_result("success", duration_ms=2.0))
    metrics.chain_ran(chain_result("validation_failed", ("pii", False), ("slow", True), duration_ms=4.0))
    decisions = "mcp_gateway_chain_decisions_total"
    assert value(metrics, decisions, event="tools/call", phase="request", status="success") == 1
    assert value(metrics, decisions, event="tools/call", phase="request", status="validation_failed") == 1
    labels = {"event": "tools/call", "phase": "request"}
    assert value(metrics, "mcp_gateway_chain_duration_seconds_count", **labels) == 2
    assert value(metrics, "mcp_gateway_chain_duration_seconds_sum", **labels) == pytest.approx(0.006)
    failures = "mcp_gateway_interceptor_failures_total"
    assert value(metrics, failures, interceptor="pii", kind="crash") == 1
    assert value(metrics, failures, interceptor="slow", kind="timeout") == 1


def test_upstream_durations_go_to_the_upstreams_histogram() -> None:
    metrics = GatewayMetrics(["a", "b"])
    observe = metrics.upstream_timer("b")
    observe(0.25)
    observe(0.75)
    assert value(metrics, "mcp_gateway_upstream_request_duration_seconds_count", upstream="b") == 2
    assert value(metrics, "mcp_gateway_upstream_request_duration_seconds_sum", upstream="b") == 1.0
    assert value(metrics, "mcp_gateway_upstream_request_duration_seconds_count", upstream="a") is None


def test_gauges_and_audit_counters_are_read_at_scrape_time() -> None:
    sessions: dict[str, object] = {}
    up = {"a": True, "b": False}
    stats: list[WriterStats] = []
    metrics = GatewayMetrics(
        ["a", "b"],
        open_sessions=lambda: len(sessions),
        connections=lambda: up.items(),
        audit_stats=lambda: stats[0] if stats else None,
    )
    assert value(metrics, "mcp_gateway_sessions_open") == 0
    assert value(metrics, "mcp_gateway_upstream_up", upstream="a") == 1
    assert value(metrics, "mcp_gateway_upstream_up", upstream="b") == 0
    assert value(metrics, "mcp_gateway_audit_records_total") is None  # auditing off: no audit metrics
    sessions["s"] = object()
    up["b"] = True
    stats.append(WriterStats(records=7, failed_records=2))
    assert value(metrics, "mcp_gateway_sessions_open") == 1
    assert value(metrics, "mcp_gateway_upstream_up", upstream="b") == 1
    assert value(metrics, "mcp_gateway_audit_records_total") == 7
    assert value(metrics, "mcp_gateway_audit_write_failures_total") == 2


def test_upstream_up_is_any_connection_up_and_connections_are_counted_by_state() -> None:
    """Each handshake-era session has connections of its own: `upstream_up` read only the shared one, so a
    session's dead upstream showed as up (and a live one as down)."""
    config = parse_config({"upstreams": {"a": UPSTREAM, "b": UPSTREAM}, "http": {"metrics": True}})
    gateway = Gateway(config, Chain(role="server"))
    assert gateway.metrics is not None
    gateway.connections.shared = {"a": FakeConnection("a", up=False), "b": FakeConnection("b", up=True)}  # type: ignore[dict-item]
    own = DownstreamSession(key="s1", era="legacy")
    own.upstreams = {"a": FakeConnection("a", up=True), "b": FakeConnection("b", up=False)}  # type: ignore[dict-item]
    sharing = DownstreamSession(key="s2", era="legacy", upstreams=dict(gateway.connections.shared))
    gone = DownstreamSession(key="s3", era="legacy")
    gone.upstreams = {"a": FakeConnection("a", up=False, closed=True)}  # type: ignore[dict-item]
    gateway.sessions.by_key.update({"s1": own, "s2": sharing, "s3": gone})
    metrics = gateway.metrics
    assert value(metrics, "mcp_gateway_upstream_up", upstream="a") == 1  # s1's own connection is up
    assert value(metrics, "mcp_gateway_upstream_connections", upstream="a", state="up") == 1
    assert value(metrics, "mcp_gateway_upstream_connections", upstream="a", state="down") == 1  # shared, once
    assert value(metrics, "mcp_gateway_upstream_connections", upstream="b", state="down") == 1  # s1's own
    assert value(metrics, "mcp_gateway_upstream_connections", upstream="b", state="up") == 1
    gateway.connections.shared["a"].up = True  # type: ignore[attr-defined]
    own.upstreams["a"].up = False  # type: ignore[attr-defined]
    gateway.sessions.close("s1")
    assert value(metrics, "mcp_gateway_upstream_connections", upstream="b", state="down") == 0
    assert value(metrics, "mcp_gateway_upstream_up", upstream="a") == 1


def test_upstream_up_is_zero_when_no_connection_is_up() -> None:
    metrics = GatewayMetrics(["a", "b"], connections=lambda: [("a", False), ("a", False), ("elsewhere", True)])
    assert value(metrics, "mcp_gateway_upstream_up", upstream="a") == 0
    assert value(metrics, "mcp_gateway_upstream_up", upstream="b") == 0  # not connected at all (stdio: no client yet)
    assert value(metrics, "mcp_gateway_upstream_connections", upstream="a", state="down") == 2
    assert value(metrics, "mcp_gateway_upstream_connections", upstream="elsewhere", state="up") is None


def test_each_gateway_has_a_registry_of_its_own() -> None:
    first, second = GatewayMetrics(["a"]), GatewayMetrics(["a"])  # the global registry would refuse the second
    first.request_done("a", "ping", "ok")
    assert value(second, "mcp_gateway_requests_total", upstream="a", method="ping", outcome="ok") is None


async def test_the_listener_serves_the_text_format_and_nothing_else() -> None:
    metrics = GatewayMetrics(["a"])
    metrics.request_done("a", "tools/call", "ok")
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            port = await tg.start(serve_metrics, metrics, "127.0.0.1", 0)
            async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                scraped = await http.get("/metrics")
                assert scraped.status_code == 200
                assert scraped.headers["content-type"].startswith("text/plain; version=")
                line = 'mcp_gateway_requests_total{method="tools/call",outcome="ok",upstream="a"} 1.0'
                assert line in scraped.text.splitlines()
                assert (await http.get("/other")).status_code == 404
                assert (await http.post("/metrics")).status_code == 405
                rebound = await http.get("/metrics", headers={"Host": "evil.example:80"})
                assert rebound.status_code == 421  # DNS rebinding: a browser page cannot read it
            tg.cancel_scope.cancel()


async def test_the_listener_bounds_its_connections_and_drops_a_slow_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scraper loop or a slowloris held a connection (an fd) each without bound: past the cap a connection
    gets 503 at once, and a connection that does not finish its request within `_READ_S` is closed."""
    monkeypatch.setattr(metrics_module, "_MAX_CONNECTIONS", 2)
    monkeypatch.setattr(metrics_module, "_READ_S", 0.5)
    metrics = GatewayMetrics(["a"])
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            port = await tg.start(serve_metrics, metrics, "127.0.0.1", 0)
            slow = [await anyio.connect_tcp("127.0.0.1", port) for _ in range(2)]
            for stream in slow:
                await stream.send(b"GET /metrics HTTP/1.1\r\n")  # never finishes its head
            await anyio.wait_all_tasks_blocked()
            async with await anyio.connect_tcp("127.0.0.1", port) as third:
                refused = b""
                with pytest.raises(anyio.EndOfStream):
                    while True:
                        refused += await third.receive()
            assert refused.startswith(b"HTTP/1.1 503 ")
            for stream in slow:  # dropped after _READ_S
                with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                    await stream.receive()
                await stream.aclose()
            async with httpx2.AsyncClient() as http:  # room again
                assert (await http.get(f"http://127.0.0.1:{port}/metrics")).status_code == 200
            tg.cancel_scope.cancel()


async def test_a_broken_scrape_does_not_end_the_listener() -> None:
    metrics = GatewayMetrics(["a"])
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            port = await tg.start(serve_metrics, metrics, "127.0.0.1", 0)
            async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                await stream.send(b"NOT HTTP\r\n\r\n")
                answer = b""
                with pytest.raises(anyio.EndOfStream):  # h11 refuses it: that connection is closed, alone
                    while True:
                        answer += await stream.receive()
                assert answer.startswith(b"HTTP/1.1 400 ")
            async with httpx2.AsyncClient() as http:
                assert (await http.get(f"http://127.0.0.1:{port}/metrics")).status_code == 200
            tg.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("metrics", "path", "problem"),
    [
        ({"listen": "0.0.0.0:9464"}, "metrics.listen", "not a loopback address"),
        ({"listen": "9464"}, "metrics.listen", "is not HOST:PORT"),
        ({"listen": "127.0.0.1:http"}, "metrics.listen", "is not HOST:PORT"),
        ({"port": 9464}, "metrics.port", "Extra inputs are not permitted"),
    ],
)
def test_metrics_config_errors_name_the_field(metrics: dict[str, Any], path: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"upstreams": {"a": UPSTREAM}, "metrics": metrics}, file="g.yaml")
    assert caught.value.path == path and problem in caught.value.problem


def test_http_metrics_cannot_share_the_mcp_path() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"upstreams": {"a": UPSTREAM}, "http": {"metrics": True, "path": "/metrics"}}, file="g.yaml")
    assert caught.value.path == "http.path"


def test_metrics_are_kept_only_when_something_serves_them() -> None:
    assert not parse_config({"upstreams": {"a": UPSTREAM}}).collects_metrics
    assert parse_config({"upstreams": {"a": UPSTREAM}, "http": {"metrics": True}}).collects_metrics
    listen = parse_config({"upstreams": {"a": UPSTREAM}, "metrics": {"listen": "[::1]:9464"}})
    assert listen.metrics.address == ("::1", 9464)


def test_check_says_where_metrics_are_served() -> None:
    from mcp_interceptors import Chain
    from mcp_interceptors.gateway.check import check_report, render_check

    both = parse_config(
        {"upstreams": {"a": UPSTREAM}, "http": {"metrics": True}, "metrics": {"listen": "127.0.0.1:9464"}}
    )
    assert check_report(both, Chain(role="server"), "g.yaml")["metrics"] == [
        "GET /metrics on the HTTP front",
        "http://127.0.0.1:9464/metrics",
    ]
    assert "metrics: off" in render_check(parse_config({"upstreams": {"a": UPSTREAM}}), Chain(role="server"), "g.yaml")


def test_config_schema_describes_the_metrics_settings() -> None:
    from mcp_interceptors.gateway.config import config_json_schema

    schema = config_json_schema()
    assert "metrics" in schema["properties"]
    assert "metrics" in schema["$defs"]["HttpConfig"]["properties"]
    assert "listen" in schema["$defs"]["MetricsConfig"]["properties"]
