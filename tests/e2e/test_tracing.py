"""OpenTelemetry through the real CLI, into a real OTLP/HTTP receiver this test runs (decoded with
opentelemetry-proto): one trace from the client's `traceparent` through the gateway's SERVER span, its chain and
guard spans and the CLIENT span to the upstream, which gets the trace context in `_meta`; the audit record
carries the trace id and the span the record's call id. Both eras, stdio and HTTP fronts; tracing is turned on
by `OTEL_EXPORTER_OTLP_ENDPOINT` on stdio and by `telemetry:` in the config on HTTP."""

from __future__ import annotations

import os
import secrets
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from e2e_support import ERAS, INTERCEPTOR_SERVER, ConfigWriter, gateway_env, text_of
from helpers import TRACING_SPY, cli_argv, free_tcp_port, http_transport, running, stderr_log, stdio_transport, until
from mcp import Client, MCPError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from mcp_interceptors.audit import SqliteStore

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

TRACED_UPSTREAM = str(Path(__file__).resolve().parent / "traced_upstream.py")
KINDS = {1: "INTERNAL", 2: "SERVER", 3: "CLIENT"}


class Receiver:
    """An OTLP/HTTP trace receiver on loopback: every span posted to /v1/traces, decoded."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest.FromString(body)
                with receiver.changed:
                    for resource in request.resource_spans:
                        for scope in resource.scope_spans:
                            receiver.spans.extend(_span(span) for span in scope.spans)
                    receiver.changed.notify_all()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def named(self, name: str) -> list[dict[str, Any]]:
        return [span for span in self.spans if span["name"] == name]


def _span(span: Any) -> dict[str, Any]:
    attributes = {}
    for item in span.attributes:
        value = item.value
        kind = value.WhichOneof("value")
        attributes[item.key] = None if kind is None else getattr(value, kind)
    return {
        "name": span.name,
        "kind": KINDS.get(span.kind, str(span.kind)),
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent": span.parent_span_id.hex() or None,
        "attributes": attributes,
        "error": span.status.code == 2,
    }


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    thread = threading.Thread(target=receiver.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()


async def spans_until(receiver: Receiver, name: str, count: int) -> None:
    """Wait (in a thread: the receiver's handler notifies) until `count` spans named `name` arrived."""

    def arrived() -> bool:
        with receiver.changed:
            return receiver.changed.wait_for(lambda: len(receiver.named(name)) >= count, timeout=30)

    assert await anyio.to_thread.run_sync(arrived), [span["name"] for span in receiver.spans]


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_one_trace_from_client_through_gateway_guard_and_upstream(
    write_config: ConfigWriter, tmp_path: Path, transport: str, era: str
) -> None:
    store = tmp_path / "audit.db"
    client_trace, client_span = secrets.token_hex(16), secrets.token_hex(8)
    with otlp_receiver() as receiver:
        config: dict[str, Any] = {
            "upstreams": {"traced": {"command": sys.executable, "args": [TRACED_UPSTREAM]}},
            "interceptors": {
                "guards": [{"name": "secrets"}],
                "servers": [{"name": "remote", "command": sys.executable, "args": [INTERCEPTOR_SERVER]}],
            },
            "audit": {"enabled": True, "store": str(store), "key_file": str(tmp_path / "audit-key")},
        }
        # Exported every 200 ms: a stdio client may stop its gateway before the gateway's own flush at exit.
        env = gateway_env({"OTEL_BSP_SCHEDULE_DELAY": "200"})
        if transport == "stdio":
            env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.url
        else:
            config["telemetry"] = {"endpoint": receiver.url, "service_name": "traced-gateway"}
        path = write_config(config)
        meta = {"traceparent": f"00-{client_trace}-{client_span}-01"}
        with anyio.fail_after(90):
            if transport == "stdio":
                argv = cli_argv("gateway", "--config", str(path))
                with stderr_log("traced gateway") as log:
                    async with Client(stdio_transport(argv, log, env=env), mode=era) as client:
                        seen = text_of(await client.call_tool("traceparent", {"text": "hi"}, meta=meta))  # type: ignore[arg-type]
            else:
                port = free_tcp_port()
                argv = cli_argv("gateway", "--config", str(path), "--http", f"127.0.0.1:{port}")
                async with (
                    running(argv, port=port, env=env, label="traced gateway"),
                    Client(f"http://127.0.0.1:{port}/mcp", mode=era) as client,
                ):
                    seen = text_of(await client.call_tool("traceparent", {"text": "hi"}, meta=meta))  # type: ignore[arg-type]
            await spans_until(receiver, "interceptor secrets", 2)  # the request's and the response's

    assert [(s["name"], k) for s in receiver.spans for k, v in s["attributes"].items() if v is None] == []
    server = next(s for s in receiver.named("tools/call traceparent") if s["kind"] == "SERVER")
    assert (server["trace_id"], server["parent"]) == (client_trace, client_span)
    attributes = server["attributes"]
    assert attributes["mcp.method.name"] == "tools/call"
    assert attributes["gen_ai.tool.name"] == "traceparent"
    assert attributes["mcp_interceptors.upstream"] == "traced"
    assert attributes["mcp_interceptors.outcome"] == "ok"
    assert attributes["mcp.session.id"]

    chains = [s for s in receiver.spans if s["name"].startswith("chain tools/call")]
    assert sorted(s["name"] for s in chains) == ["chain tools/call request", "chain tools/call response"]
    assert all(s["parent"] == server["span_id"] and not s["error"] for s in chains)
    guards = receiver.named("interceptor secrets")
    assert {s["parent"] for s in guards} == {s["span_id"] for s in chains}
    assert all(s["attributes"]["mcp_interceptors.interceptor.status"] == "unmodified" for s in guards)
    assert all(s["attributes"]["mcp_interceptors.interceptor.mode"] == "active" for s in guards)

    (invoke,) = receiver.named("interceptor/invoke watchdog")  # the interceptor server's, in the request chain
    (request_chain,) = (s for s in chains if s["name"] == "chain tools/call request")
    assert (invoke["kind"], invoke["trace_id"], invoke["parent"]) == ("CLIENT", client_trace, request_chain["span_id"])
    assert invoke["attributes"]["mcp_interceptors.upstream.role"] == "interceptor server"
    assert receiver.named("interceptor watchdog")[0]["parent"] == request_chain["span_id"]

    upstream = next(s for s in receiver.named("tools/call traceparent") if s["kind"] == "CLIENT")
    assert (upstream["trace_id"], upstream["parent"]) == (client_trace, server["span_id"])
    assert seen == f"00-{client_trace}-{upstream['span_id']}-01"  # the upstream's parent is the gateway's span

    records = _bodies(store)
    call = [r for r in records if r.get("event") == "tools/call"]
    assert call and {r["trace_id"] for r in call} == {client_trace}
    assert attributes["mcp_interceptors.audit.call_id"] == call[0]["call_id"]
    if transport == "http":
        assert os.environ.get("OTEL_SERVICE_NAME") is None


@pytest.mark.parametrize("era", ERAS)
async def test_trace_context_from_http_headers_parents_the_call_and_reaches_the_upstream(
    write_config: ConfigWriter, era: str
) -> None:
    """`traceparent`/`tracestate` headers on the Streamable HTTP request (no `_meta`): the gateway's SERVER span
    is their span's child, and the upstream gets the gateway's CLIENT span and the header's `tracestate` in
    `_meta`. A `traceparent` in `params._meta` wins over the headers; a malformed header starts a new trace."""
    header_trace, header_span = secrets.token_hex(16), secrets.token_hex(8)
    meta_trace, meta_span = secrets.token_hex(16), secrets.token_hex(8)
    headers = {"traceparent": f"00-{header_trace}-{header_span}-01", "tracestate": "vendor=abc,other=1"}
    with otlp_receiver() as receiver:
        config = {
            "upstreams": {"traced": {"command": sys.executable, "args": [TRACED_UPSTREAM]}},
            "interceptors": {"guards": [{"name": "secrets"}]},
            "telemetry": {"endpoint": receiver.url},
        }
        env = gateway_env({"OTEL_BSP_SCHEDULE_DELAY": "200"})
        port = free_tcp_port()
        url = f"http://127.0.0.1:{port}/mcp"
        argv = cli_argv("gateway", "--config", str(write_config(config)), "--http", f"127.0.0.1:{port}")
        with anyio.fail_after(90):
            async with running(argv, port=port, env=env, label="traced gateway"):
                async with Client(http_transport(url, headers=headers), mode=era) as client:
                    parent_seen = text_of(await client.call_tool("traceparent", {"text": "hi"}))
                    state_seen = text_of(await client.call_tool("tracestate", {"text": "hi"}))
                    meta = {"traceparent": f"00-{meta_trace}-{meta_span}-01"}
                    meta_seen = text_of(await client.call_tool("traceparent", {"text": "hi"}, meta=meta))  # type: ignore[arg-type]
                bad = {"traceparent": "00-not-a-trace-01"}
                async with Client(http_transport(url, headers=bad), mode=era) as client:
                    bad_seen = text_of(await client.call_tool("traceparent", {"text": "hi"}))
            await spans_until(receiver, "tools/call traceparent", 6)  # 3 calls: a SERVER and a CLIENT span each

    servers = [s for s in receiver.spans if s["kind"] == "SERVER" and s["name"].startswith("tools/call ")]
    by_trace = {s["trace_id"]: s for s in servers if s["name"] == "tools/call traceparent"}
    header_call = by_trace[header_trace]
    assert header_call["parent"] == header_span
    (header_upstream,) = (
        s for s in receiver.named("tools/call traceparent") if s["kind"] == "CLIENT" and s["trace_id"] == header_trace
    )
    assert header_upstream["parent"] == header_call["span_id"]
    assert parent_seen == f"00-{header_trace}-{header_upstream['span_id']}-01"
    (state_call,) = (s for s in servers if s["name"] == "tools/call tracestate")
    assert (state_call["trace_id"], state_call["parent"]) == (header_trace, header_span)
    assert state_seen == headers["tracestate"]

    assert by_trace[meta_trace]["parent"] == meta_span  # `_meta` first, then the headers
    assert meta_seen.startswith(f"00-{meta_trace}-")

    (fresh,) = (t for t in by_trace if t not in (header_trace, meta_trace))
    assert by_trace[fresh]["parent"] is None  # the malformed header: a new trace, and the call still ran
    assert bad_seen.startswith(f"00-{fresh}-")


def _bodies(store: Path) -> list[dict[str, Any]]:
    opened = SqliteStore(store)
    try:
        return [orjson.loads(raw)["body"] for _, raw in opened.iter_records()]
    finally:
        opened.close()


async def test_tracing_off_builds_no_span_and_loads_no_sdk(write_config: ConfigWriter, tmp_path: Path) -> None:
    """No `telemetry:` and no `OTEL_*` variable: a governed call (one guard redacting, one blocking) starts
    no span on any tracer and the OpenTelemetry SDK is never imported; the upstream gets no `traceparent`."""
    spy_dir, report = tmp_path / "spy", tmp_path / "report.json"
    spy_dir.mkdir()
    (spy_dir / "sitecustomize.py").write_text(TRACING_SPY, encoding="utf-8")
    config = write_config(
        {
            "upstreams": {"traced": {"command": sys.executable, "args": [TRACED_UPSTREAM]}},
            "interceptors": {"guards": [{"name": "secrets"}, {"name": "tool-policy", "config": {"deny": ["nope"]}}]},
        }
    )
    env = {k: v for k, v in gateway_env({"TRACING_SPY_REPORT": str(report)}).items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join([str(spy_dir), env["PYTHONPATH"]])
    argv = cli_argv("gateway", "--config", str(config), "--log-level", "INFO")
    with anyio.fail_after(60), stderr_log("untraced gateway") as log:
        async with Client(stdio_transport(argv, log, env=env)) as client:
            seen = text_of(await client.call_tool("traceparent", {"text": "key AKIAZ7QH4XK2M9PL3TWB"}))
            with pytest.raises(MCPError):
                await client.call_tool("nope", {})
        await until(report.exists)
    assert seen == "none"
    assert orjson.loads(report.read_bytes()) == {"started": [], "sdk": []}
