"""OpenTelemetry tracing: a span per governed call, per chain run and interceptor, and per upstream request.

Off unless the config has `telemetry:` or the standard `OTEL_*` variables ask for it (`telemetry_for`); off,
the gateway holds None and each hook costs one `is None` test, and the SDK is never imported. The spans come
from the gateway's own `TracerProvider`, never the process-wide one. Trace context is read from a request's
`params._meta` (`traceparent`, `tracestate`) or its HTTP headers, and sent on in the `_meta` of every request
to an upstream or interceptor server (`UpstreamConnection.request`), so one trace spans client, gateway,
guards and servers. Spans are batched on a bounded queue and exported off the event loop.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from mcp import MCPError
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from mcp_interceptors.executor import ChainResult
from mcp_interceptors.gateway.span_attributes import (
    NS,
    interceptor_attributes,
    reason_of,
    request_attributes,
    span_name,
)
from mcp_interceptors.planning import Plan

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

    from mcp_interceptors.gateway.config import TelemetryConfig
    from mcp_interceptors.gateway.telemetry_gate import ShutdownGate

#: The instrumentation scope of every span the gateway makes.
SCOPE: Final = "mcp_interceptors.gateway"
#: The `_meta` keys that carry W3C trace context (as in the MCP semantic conventions).
TRACE_KEYS: Final = ("traceparent", "tracestate")
_PROPAGATOR: Final = TraceContextTextMapPropagator()
_log = logging.getLogger(__name__)
_OTLP_MISSING: Final = (
    "telemetry: the OTLP exporter is not installed; pip install 'mcp-interceptors[telemetry]' "
    "(or set `telemetry.exporter: console` or `none`)"
)


class TelemetryError(Exception):
    """Tracing was asked for and cannot start (the OTLP exporter is missing): a config error."""


def context_of(carrier: Mapping[str, Any] | None) -> otel_context.Context | None:
    """The trace context a `_meta` or header mapping carries; None when it has no valid `traceparent`
    (absent, malformed, all zeros, not a string): the caller then starts a new trace, never fails."""
    if not carrier:
        return None
    values = {key: carrier[key] for key in TRACE_KEYS if isinstance(carrier.get(key), str)}
    if "traceparent" not in values:
        return None
    extracted = _PROPAGATOR.extract(values)
    return extracted if trace.get_current_span(extracted).get_span_context().is_valid else None


def with_trace_context(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """`params` with the current span's trace context in its `_meta` (replacing any the client sent)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    body = dict(params or {})
    if carrier:
        meta = body.get("_meta")
        body["_meta"] = {**(meta if isinstance(meta, Mapping) else {}), **carrier}
    return body


def current_trace_id() -> str | None:
    """The trace id (32 hex digits) of the current span, None outside one."""
    span_context = trace.get_current_span().get_span_context()
    return format(span_context.trace_id, "032x") if span_context.is_valid else None


def _failed(span: Span, exc: BaseException) -> None:
    if isinstance(exc, MCPError):
        code = str(exc.error.code)
        span.set_attributes({"error.type": code, "rpc.response.status_code": code})
        span.set_status(StatusCode.ERROR, exc.error.message)
    else:
        span.set_attribute("error.type", type(exc).__qualname__)
        span.set_status(StatusCode.ERROR, str(exc))


@dataclass
class CallSpan:
    """The SERVER span of one governed call while it runs; `end` closes it."""

    span: Span
    token: object

    def end(self, outcome: str, upstream: str | None, exc: BaseException | None = None) -> None:
        span = self.span
        span.set_attribute(NS + "outcome", outcome)
        if upstream is not None:
            span.set_attribute(NS + "upstream", upstream)
        if exc is not None and outcome != "cancelled":
            _failed(span, exc)
        span.end()
        otel_context.detach(self.token)  # type: ignore[arg-type]


class Telemetry:
    """The gateway's tracer and what its hooks call. Built by `telemetry_for`, or for tests with an exporter."""

    def __init__(
        self,
        provider: TracerProvider,
        *,
        propagate: bool = True,
        shutdown_timeout_ms: int = 2000,
        gate: ShutdownGate | None = None,
        processor: SpanProcessor | None = None,
    ) -> None:
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        from mcp_interceptors import __version__

        self.provider = provider
        self.tracer = provider.get_tracer(SCOPE, __version__)
        #: The provider's one processor, when known: interceptor spans, finished when made, go straight to it
        #: as `ReadableSpan`s (a tenth of the cost of a live span through the tracer).
        self._processor = processor
        self._readable = ReadableSpan
        self._scope = InstrumentationScope(SCOPE, __version__)
        #: Whether requests to upstreams and interceptor servers carry the trace context in `_meta`.
        self.propagate = propagate
        #: The one deadline of `close`, all queued batches together.
        self.shutdown_timeout_ms = shutdown_timeout_ms
        self._gate = gate

    @classmethod
    def with_exporter(
        cls, exporter: SpanExporter, *, batch: bool = False, propagate: bool = True, shutdown_timeout_ms: int = 2000
    ) -> Telemetry:
        """Tracing into `exporter` (an `InMemorySpanExporter` in tests): each span as it ends, or batched."""
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        from mcp_interceptors.gateway.telemetry_gate import ShutdownGate

        provider = TracerProvider(resource=Resource.create({"service.name": "mcp-interceptors-gateway"}))
        gate = ShutdownGate(exporter)
        processor = BatchSpanProcessor(gate) if batch else SimpleSpanProcessor(gate)
        provider.add_span_processor(processor)
        return cls(
            provider, propagate=propagate, shutdown_timeout_ms=shutdown_timeout_ms, gate=gate, processor=processor
        )

    def close(self) -> bool:
        """Export what is queued and stop the export thread, within `shutdown_timeout_ms` in all; False when
        the deadline passed first. The SDK's shutdown exports batch after batch, each with its own timeout,
        so it runs in a daemon thread that is left behind at the deadline, and the gate drops later batches."""
        budget_s = self.shutdown_timeout_ms / 1000
        if self._gate is not None:
            self._gate.deadline = time.monotonic() + budget_s
        stopping = threading.Thread(target=self.provider.shutdown, name="telemetry-shutdown", daemon=True)
        stopping.start()
        stopping.join(budget_s)
        if stopping.is_alive():
            _log.warning("telemetry: spans not exported within %d ms of shutdown are dropped", self.shutdown_timeout_ms)
        elif self._gate is not None and self._gate.dropped:
            _log.warning("telemetry: %d spans not exported by the shutdown deadline dropped", self._gate.dropped)
        return not stopping.is_alive()

    # ---- the hooks

    def start_call(
        self, method: str, params: Mapping[str, Any] | None, session_id: str | None, request_id: Any
    ) -> CallSpan:
        """The SERVER span of a governed call, current until `CallSpan.end`: a child of the client's trace
        context in `params._meta`, else of the current one (an HTTP front's headers, `headers_context`)."""
        meta = params.get("_meta") if params is not None else None
        parent = context_of(meta) if isinstance(meta, Mapping) else None
        attributes = request_attributes(method, params)
        if session_id is not None:
            attributes["mcp.session.id"] = session_id
        if request_id is not None:
            attributes["jsonrpc.request.id"] = str(request_id)
        span = self.tracer.start_span(span_name(method, params), parent, SpanKind.SERVER, attributes)
        return CallSpan(span, otel_context.attach(trace.set_span_in_context(span)))

    @contextmanager
    def headers_context(self, headers: Mapping[str, str]) -> Iterator[None]:
        """The trace context of an HTTP request's `traceparent`/`tracestate` headers, current meanwhile."""
        parent = context_of(headers)
        if parent is None:
            yield
            return
        token = otel_context.attach(parent)
        try:
            yield
        finally:
            otel_context.detach(token)

    def link_record(self, call_id: str) -> str | None:
        """The current span names the audit call it belongs to; returns its trace id for the record."""
        span = trace.get_current_span()
        span_context = span.get_span_context()
        if not span_context.is_valid:
            return None
        if call_id and span.is_recording():
            span.set_attribute(NS + "audit.call_id", call_id)
        return format(span_context.trace_id, "032x")

    def start_chain(self, plan: Plan) -> tuple[Span, object]:
        attributes: dict[str, Any] = {
            NS + "chain.event": plan.event,
            NS + "chain.phase": plan.phase,
            NS + "chain.direction": plan.direction,
            NS + "chain.interceptors": len(plan.steps),
        }
        span = self.tracer.start_span(f"chain {plan.event} {plan.phase}", attributes=attributes)
        return span, otel_context.attach(trace.set_span_in_context(span))

    def end_chain(self, started: tuple[Span, object], result: ChainResult | None) -> None:
        """Close a chain's span, with one child span per interceptor that ran (from its result's timings);
        without a result the run did not finish (cancelled, or the gateway stopping)."""
        span, token = started
        otel_context.detach(token)  # type: ignore[arg-type]
        if result is None:
            span.set_attribute(NS + "chain.outcome", "unfinished")
        else:
            span.set_attribute(NS + "chain.outcome", result.status)
            if result.aborted_at is not None:
                span.set_attribute(NS + "chain.aborted_at", result.aborted_at.interceptor)
            if not result.allowed:
                span.set_status(StatusCode.ERROR, result.status)
            if span.is_recording():
                self._interceptor_spans(span, result)
        span.end()

    def _interceptor_spans(self, parent: Span, result: ChainResult) -> None:
        """One span per invocation, laid out as the plan ran them: a batch's validators side by side, each
        batch after the last; each lasts the invocation's measured time (`duration_ms`)."""
        outcomes: dict[str, Any] = {item.interceptor: item for item in result.results if item.interceptor}
        for failure in result.failures:
            outcomes.setdefault(failure.interceptor, failure)
        context = trace.set_span_in_context(parent)
        started = getattr(parent, "start_time", None)  # the SDK's span: when the chain began, in ns
        cursor = started if isinstance(started, int) else time.time_ns()
        for _, batch in result.plan.batches:
            longest = 0
            for step in batch.steps:
                outcome = outcomes.get(step.name)
                if outcome is None:
                    continue  # not run: the chain stopped before it
                duration_ns = int((getattr(outcome, "duration_ms", None) or 0) * 1_000_000)
                longest = max(longest, duration_ns)
                attributes = interceptor_attributes(step.name, step.type, step.policy.mode, outcome)
                failed = attributes[NS + "interceptor.status"] in ("failed", "timeout", "blocked")
                name, reason = f"interceptor {step.name}", reason_of(outcome) if failed else None
                if self._processor is not None:
                    self._finished(name, parent, attributes, cursor, cursor + duration_ns, reason)
                    continue
                child = self.tracer.start_span(name, context, attributes=attributes, start_time=cursor)
                if reason is not None:
                    child.set_status(StatusCode.ERROR, reason)
                child.end(end_time=cursor + duration_ns)
            cursor += longest

    def _finished(
        self, name: str, parent: Span, attributes: dict[str, Any], start: int, end: int, error: str | None
    ) -> None:
        """A span that has already ended, handed to the processor as it would get it from `Span.end`."""
        assert self._processor is not None
        parent_context = parent.get_span_context()
        span_context = SpanContext(
            parent_context.trace_id,
            self.provider.id_generator.generate_span_id(),
            is_remote=False,
            trace_flags=parent_context.trace_flags,
            trace_state=parent_context.trace_state,
        )
        span = self._readable(
            name,
            span_context,
            parent_context,
            self.provider.resource,
            attributes,
            kind=SpanKind.INTERNAL,
            status=Status(StatusCode.ERROR, error) if error is not None else Status(StatusCode.UNSET),
            start_time=start,
            end_time=end,
            instrumentation_scope=self._scope,
        )
        self._processor.on_end(span)

    def start_upstream(
        self, method: str, params: Mapping[str, Any] | None, upstream: str, role: str, url: str | None
    ) -> tuple[Span, object, Mapping[str, Any] | None]:
        """The CLIENT span of one request to an upstream or interceptor server, and its params with the
        span's trace context in `_meta`."""
        attributes = request_attributes(method, params)
        attributes[NS + "upstream"] = upstream
        attributes[NS + "upstream.role"] = role
        attributes["network.transport"] = "tcp" if url is not None else "pipe"
        if url is not None:
            attributes["url.full"] = url
        span = self.tracer.start_span(span_name(method, params), kind=SpanKind.CLIENT, attributes=attributes)
        token = otel_context.attach(trace.set_span_in_context(span))
        return span, token, with_trace_context(params) if self.propagate else params

    def end_upstream(self, started: tuple[Span, object], exc: BaseException | None) -> None:
        span, token = started
        otel_context.detach(token)  # type: ignore[arg-type]
        if exc is not None and not isinstance(exc, _cancelled()):
            _failed(span, exc)
        span.end()


def _cancelled() -> type[BaseException]:
    import anyio

    return anyio.get_cancelled_exc_class()


# ---------------------------------------------------------------------------------------- from the config


def telemetry_for(config: TelemetryConfig | None, environ: Mapping[str, str] = os.environ) -> Telemetry | None:
    """The gateway's tracing: from `telemetry:` when given, else from the standard `OTEL_*` variables
    (an OTLP endpoint, or `OTEL_TRACES_EXPORTER`); None when neither asks for it or `OTEL_SDK_DISABLED` is true.
    """
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if config is None:
        exporter_env = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
        endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        if not endpoint and exporter_env in ("", "none"):
            return None
        from mcp_interceptors.gateway.config import TelemetryConfig

        config = TelemetryConfig(exporter=exporter_env if exporter_env in ("otlp", "console") else "otlp")
    if not config.enabled:
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    resource_attributes: dict[str, Any] = {}
    if config.service_name is not None or not environ.get("OTEL_SERVICE_NAME"):
        resource_attributes["service.name"] = config.service_name or "mcp-interceptors-gateway"
    sampler = ParentBased(TraceIdRatioBased(config.sample_ratio)) if config.sample_ratio is not None else None
    provider = TracerProvider(sampler=sampler, resource=Resource.create(resource_attributes), shutdown_on_exit=False)
    from mcp_interceptors.gateway.telemetry_gate import ShutdownGate

    gate = ShutdownGate(_exporter(config, environ))
    processor = BatchSpanProcessor(
        gate, max_queue_size=config.max_queue_size, export_timeout_millis=config.export_timeout_ms
    )
    provider.add_span_processor(processor)
    return Telemetry(
        provider,
        propagate=config.propagate,
        shutdown_timeout_ms=config.export_timeout_ms,
        gate=gate,
        processor=processor,
    )


def _exporter(config: TelemetryConfig, environ: Mapping[str, str]) -> SpanExporter:
    if config.exporter == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=sys.stderr)  # stdout is a stdio gateway's protocol stream
    if config.exporter == "none":
        from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

        class Discard(SpanExporter):
            """`exporter: none`: spans are made (trace ids reach records, logs and upstreams), then dropped."""

            def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
                return SpanExportResult.SUCCESS

        return Discard()
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise TelemetryError(_OTLP_MISSING) from None
    endpoint = config.endpoint
    if endpoint is not None:
        endpoint = endpoint.rstrip("/") + "/v1/traces"  # a base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is
    timeout_s = config.export_timeout_ms / 1000
    return OTLPSpanExporter(endpoint=endpoint, headers=dict(config.headers) or None, timeout=timeout_s)
