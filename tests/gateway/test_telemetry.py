"""`gateway/telemetry.py`: span shape and parentage in an in-memory exporter, W3C trace context in and out,
and the `telemetry:` / `OTEL_*` switch (off unless asked for)."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from mcp import MCPError
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from mcp_interceptors import Chain, InterceptorHost, Invocation, ValidationResult
from mcp_interceptors.gateway.config import TelemetryConfig, parse_config
from mcp_interceptors.gateway.gateway import Gateway
from mcp_interceptors.gateway.governor import Governor
from mcp_interceptors.gateway.telemetry import Telemetry, context_of, telemetry_for, with_trace_context
from mcp_interceptors.gateway.telemetry_gate import ShutdownGate
from mcp_interceptors.protocol.invoke import InvocationContext

pytestmark = pytest.mark.anyio

CONTEXT = InvocationContext.model_validate({"traceId": "t"})
TRACE, PARENT = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE}-{PARENT}-01"


def traced_governor(telemetry: Telemetry) -> Governor:
    host = InterceptorHost("guards")

    @host.validator("deny-rm", events=["tools/call"], phase="request")
    async def deny_rm(inv: Invocation) -> Any:
        name = inv.payload["params"]["name"]
        return ValidationResult(valid=name != "rm", severity="error") if name == "rm" else True

    @host.mutator("tag", events=["tools/call"], phase="request")
    async def tag(inv: Invocation) -> Any:
        return {**inv.payload, "params": {**inv.payload["params"], "arguments": {"tagged": True}}}

    chain = Chain(role="server")
    chain.add_local(host)
    chain.tracing = telemetry.chain_spans  # as the gateway sets its chains'
    return Governor(chain)


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


async def test_a_call_span_parents_its_chain_span_and_one_span_per_interceptor(spans: InMemorySpanExporter) -> None:
    telemetry = Telemetry.with_exporter(spans)
    governor = traced_governor(telemetry)
    params = {"name": "ls", "_meta": {"traceparent": TRACEPARENT}}
    call = telemetry.start_call("tools/call", params, "session-1", 7)
    with anyio.fail_after(10):
        await governor.govern_request("tools/call", {"name": "ls"}, CONTEXT)
    call.end("ok", "files")
    by_name = {span.name: span for span in spans.get_finished_spans()}
    assert set(by_name) == {"tools/call ls", "chain tools/call request", "interceptor deny-rm", "interceptor tag"}
    server, chain = by_name["tools/call ls"], by_name["chain tools/call request"]
    assert server.kind is SpanKind.SERVER
    assert (format(server.context.trace_id, "032x"), format(server.parent.span_id, "016x")) == (TRACE, PARENT)
    assert server.attributes is not None and dict(server.attributes) == {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "ls",
        "mcp.session.id": "session-1",
        "jsonrpc.request.id": "7",
        "mcp_interceptors.outcome": "ok",
        "mcp_interceptors.upstream": "files",
    }
    assert chain.parent is not None and chain.parent.span_id == server.context.span_id
    for name, status in (("interceptor deny-rm", "valid"), ("interceptor tag", "modified")):
        child = by_name[name]
        assert child.parent is not None and child.parent.span_id == chain.context.span_id
        assert child.attributes is not None and child.attributes["mcp_interceptors.interceptor.status"] == status
    # sending: mutate, then validate (the spans are laid out in plan order)
    assert by_name["interceptor tag"].start_time <= by_name["interceptor deny-rm"].start_time


async def test_a_blocked_chain_marks_its_span_and_the_deciding_interceptor_as_errors(
    spans: InMemorySpanExporter,
) -> None:
    governor = traced_governor(Telemetry.with_exporter(spans))
    with anyio.fail_after(10), pytest.raises(MCPError):
        await governor.govern_request("tools/call", {"name": "rm"}, CONTEXT)
    by_name = {span.name: span for span in spans.get_finished_spans()}
    chain = by_name["chain tools/call request"]
    assert chain.status.status_code is StatusCode.ERROR
    assert chain.attributes is not None and chain.attributes["mcp_interceptors.chain.outcome"] == "validation_failed"
    denied = by_name["interceptor deny-rm"]
    assert denied.status.status_code is StatusCode.ERROR
    assert denied.attributes is not None and denied.attributes["mcp_interceptors.interceptor.status"] == "blocked"


def test_the_gateways_chains_trace_with_its_own_provider_only(spans: InMemorySpanExporter) -> None:
    """A gateway's chain never falls back to a globally set provider: off, it makes no span; on, it makes
    them with the gateway's (and so does the chain a reload brings)."""
    config = parse_config({"upstreams": {"a": {"command": "python", "args": ["server.py"]}}})
    assert Gateway(config, Chain(role="server")).chain.tracing is None
    telemetry = Telemetry.with_exporter(spans)
    gateway = Gateway(config, Chain(role="server"), telemetry=telemetry)
    assert gateway.chain.tracing is telemetry.chain_spans
    gateway.replace_policy(config, Chain(role="server"))
    assert gateway.chain.tracing is telemetry.chain_spans


def test_an_upstream_request_gets_a_client_span_and_its_trace_context_in_meta(spans: InMemorySpanExporter) -> None:
    telemetry = Telemetry.with_exporter(spans)
    call = telemetry.start_call("tools/call", {"name": "ls", "_meta": {"traceparent": TRACEPARENT}}, None, 1)
    span, token, sent = telemetry.start_upstream(
        "tools/call",
        {"name": "ls", "_meta": {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01", "k": 1}},
        "files",
        "upstream",
        None,
    )
    telemetry.end_upstream((span, token), None)
    call.end("ok", "files")
    client = next(s for s in spans.get_finished_spans() if s.kind is SpanKind.CLIENT)
    assert sent is not None and sent["_meta"]["k"] == 1  # the rest of `_meta` is kept
    assert sent["_meta"]["traceparent"] == f"00-{TRACE}-{format(client.context.span_id, '016x')}-01"
    assert format(client.context.trace_id, "032x") == TRACE
    assert client.attributes is not None and client.attributes["mcp_interceptors.upstream"] == "files"


async def test_a_client_trace_not_sampled_gets_no_span_and_goes_on_unsampled(spans: InMemorySpanExporter) -> None:
    """The client's `traceparent` says not sampled (flags 00): the parent-based sampler keeps nothing of the
    call, its chains or its upstream request, and the upstream still gets the trace, unsampled."""
    telemetry = Telemetry.with_exporter(spans)
    governor = traced_governor(telemetry)
    call = telemetry.start_call(
        "tools/call", {"name": "ls", "_meta": {"traceparent": TRACEPARENT[:-2] + "00"}}, None, 1
    )
    assert not call.span.is_recording()
    with anyio.fail_after(10):
        await governor.govern_request("tools/call", {"name": "ls"}, CONTEXT)
    span, token, sent = telemetry.start_upstream("tools/call", {"name": "ls"}, "files", "upstream", None)
    telemetry.end_upstream((span, token), None)
    call.end("ok", "files")
    assert spans.get_finished_spans() == ()
    assert sent is not None and sent["_meta"]["traceparent"].startswith(f"00-{TRACE}-")
    assert sent["_meta"]["traceparent"].endswith("-00")


async def test_a_failed_upstream_request_and_call_carry_the_error(spans: InMemorySpanExporter) -> None:
    telemetry = Telemetry.with_exporter(spans)
    call = telemetry.start_call("tools/call", {"name": "ls"}, None, 1)
    span, token, _ = telemetry.start_upstream("tools/call", {"name": "ls"}, "files", "upstream", None)
    refused = MCPError(-32601, "no such tool")
    telemetry.end_upstream((span, token), refused)
    call.end("error", "files", refused)
    by_kind = {span.kind: span for span in spans.get_finished_spans()}
    for kind in (SpanKind.CLIENT, SpanKind.SERVER):
        failed = by_kind[kind]
        assert failed.status.status_code is StatusCode.ERROR and failed.status.description == "no such tool"
        assert failed.attributes is not None and failed.attributes["error.type"] == "-32601"
    assert by_kind[SpanKind.CLIENT].parent is not None
    assert by_kind[SpanKind.CLIENT].parent.span_id == by_kind[SpanKind.SERVER].context.span_id


def test_propagate_false_sends_params_as_they_were(spans: InMemorySpanExporter) -> None:
    telemetry = Telemetry.with_exporter(spans, propagate=False)
    params = {"name": "ls"}
    span, token, sent = telemetry.start_upstream("tools/call", params, "files", "upstream", None)
    telemetry.end_upstream((span, token), None)
    assert sent is params


def test_http_headers_carry_the_trace_when_meta_does_not(spans: InMemorySpanExporter) -> None:
    telemetry = Telemetry.with_exporter(spans)
    with telemetry.headers_context({"traceparent": TRACEPARENT, "tracestate": "vendor=1"}):
        telemetry.start_call("tools/list", None, None, 1).end("ok", None)
    (server,) = spans.get_finished_spans()
    assert format(server.context.trace_id, "032x") == TRACE
    assert server.parent is not None and format(server.parent.span_id, "016x") == PARENT
    assert server.context.trace_state.get("vendor") == "1"


@pytest.mark.parametrize(
    "carrier",
    [
        None,
        {},
        {"traceparent": 7},
        {"traceparent": "garbage"},
        {"traceparent": "00-" + "0" * 32 + "-" + "0" * 16 + "-01"},
    ],
)
def test_a_missing_or_malformed_traceparent_starts_a_new_trace(carrier: Any) -> None:
    assert context_of(carrier) is None


def test_outside_a_span_no_trace_context_is_added() -> None:
    assert with_trace_context({"name": "ls"}) == {"name": "ls"}


@pytest.mark.parametrize(
    ("config", "environ", "on"),
    [
        (None, {}, False),
        (None, {"OTEL_TRACES_EXPORTER": "none"}, False),
        (None, {"OTEL_TRACES_EXPORTER": "console"}, True),
        (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"exporter": "none"}, {}, True),
        ({"exporter": "none", "enabled": False}, {}, False),
        ({"exporter": "none"}, {"OTEL_SDK_DISABLED": "true"}, False),
    ],
)
def test_tracing_is_off_unless_the_config_or_otel_variables_ask_for_it(
    config: dict[str, Any] | None, environ: dict[str, str], on: bool
) -> None:
    telemetry = telemetry_for(None if config is None else TelemetryConfig.model_validate(config), environ)
    try:
        assert (telemetry is not None) is on
    finally:
        if telemetry is not None:
            telemetry.close()


def test_a_telemetry_section_with_an_unknown_key_is_a_config_error_naming_it() -> None:
    with pytest.raises(Exception, match=r"telemetry\.endpiont"):
        parse_config({"upstreams": {"a": {"command": "x"}}, "telemetry": {"endpiont": "http://x"}})


class SlowExporter(InMemorySpanExporter):
    """Each export takes `delay_s`, as against a collector that never answers within its timeout."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s

    def export(self, spans: Any) -> Any:
        time.sleep(self.delay_s)
        return super().export(spans)


def test_close_keeps_one_deadline_for_all_queued_batches_and_drops_what_is_left() -> None:
    """Ten batches queued, each export 0.5 s: the SDK's own shutdown would take 5 s; `close` returns at its
    deadline (0.3 s), and the batches after it are dropped at once instead of exported."""
    slow = SlowExporter(0.5)
    gate = ShutdownGate(slow)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(gate, max_export_batch_size=1, schedule_delay_millis=60_000))
    telemetry = Telemetry(provider, shutdown_timeout_ms=300, gate=gate)
    for n in range(10):
        telemetry.tracer.start_span(f"span {n}").end()
    started = time.monotonic()
    assert telemetry.close() is False
    assert time.monotonic() - started < 1.0
    deadline = time.monotonic() + 5
    while gate.dropped + len(slow.get_finished_spans()) < 10 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(slow.get_finished_spans()) == 1  # the export in flight at the deadline
    assert gate.dropped == 9


def test_close_within_the_deadline_exports_everything(spans: InMemorySpanExporter) -> None:
    telemetry = Telemetry.with_exporter(spans, batch=True, shutdown_timeout_ms=5000)
    for n in range(5):
        telemetry.tracer.start_span(f"span {n}").end()
    assert telemetry.close() is True
    assert len(spans.get_finished_spans()) == 5
