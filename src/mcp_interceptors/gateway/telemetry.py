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
from opentelemetry.trace import Span, SpanContext, SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from mcp_interceptors.gateway.span_attributes import request_span
from mcp_interceptors.invoker.tracing import NS, ChainSpans

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


def _failure(exc: BaseException) -> tuple[dict[str, Any], str]:
    """A failed request's error attributes and status text."""
    if isinstance(exc, MCPError):
        code = str(exc.error.code)
        return {"error.type": code, "rpc.response.status_code": code}, exc.error.message
    return {"error.type": type(exc).__qualname__}, str(exc)


def _failed(span: Span, exc: BaseException) -> None:
    attributes, message = _failure(exc)
    span.set_attributes(attributes)
    span.set_status(StatusCode.ERROR, message)


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
        from mcp_interceptors import __version__
        from mcp_interceptors.invoker.finished_spans import FinishedSpans  # loads the SDK: only when tracing is on

        self.provider = provider
        self.tracer = provider.get_tracer(SCOPE, __version__)
        #: The provider's one processor, when known: chain, interceptor and request spans then go to it already
        #: finished (`FinishedSpans`, a small part of the cost of a live span through the tracer).
        self._finished = FinishedSpans(provider, processor, SCOPE, __version__) if processor is not None else None
        #: What `Chain.run_plan` makes a run's spans with (the gateway sets it as its chains' `tracing`).
        self.chain_spans = ChainSpans(self.tracer, self._finished)
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
        name, attributes = request_span(method, params)
        if session_id is not None:
            attributes["mcp.session.id"] = session_id
        if request_id is not None:
            attributes["jsonrpc.request.id"] = str(request_id)
        if self._finished is not None:
            span = self._finished.open(name, parent, SpanKind.SERVER, attributes)
        else:
            span = self.tracer.start_span(name, parent, SpanKind.SERVER, attributes)
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

    def start_upstream(
        self, method: str, params: Mapping[str, Any] | None, upstream: str, role: str, url: str | None
    ) -> tuple[Span | Sent | None, object, Mapping[str, Any] | None]:
        """The CLIENT span of one request to an upstream or interceptor server, and its params with the
        span's trace context in `_meta`. Inside a sampled span it is a `Sent`, handed over finished by
        `end_upstream`; inside one not sampled, None (the current context goes on); else a live span."""
        name, attributes = request_span(method, params)
        attributes[NS + "upstream"] = upstream
        attributes[NS + "upstream.role"] = role
        attributes["network.transport"] = "tcp" if url is not None else "pipe"
        if url is not None:
            attributes["url.full"] = url
        parent = trace.get_current_span().get_span_context()
        if self._finished is not None and parent.is_valid:
            if not parent.trace_flags.sampled:
                return None, None, with_trace_context(params) if self.propagate else params
            context = self._finished.child_of(parent)
            sent = Sent(name, context, parent, attributes, time.time_ns())
            return sent, None, _with_context(params, context) if self.propagate else params
        span = self.tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)
        token = otel_context.attach(trace.set_span_in_context(span))
        return span, token, with_trace_context(params) if self.propagate else params

    def end_upstream(self, started: tuple[Span | Sent | None, object], exc: BaseException | None) -> None:
        span, token = started
        failed = exc is not None and not isinstance(exc, _cancelled())
        if isinstance(span, Sent):
            assert self._finished is not None
            error = None
            if failed:
                assert exc is not None
                failure, error = _failure(exc)
                span.attributes.update(failure)
            self._finished.emit(
                span.name,
                span.context,
                span.parent,
                SpanKind.CLIENT,
                span.attributes,
                span.start_ns,
                time.time_ns(),
                error,
            )
            return
        if span is None:
            return
        otel_context.detach(token)  # type: ignore[arg-type]
        if failed:
            assert exc is not None
            _failed(span, exc)
        span.end()


@dataclass(slots=True)
class Sent:
    """A request's CLIENT span while the request is in flight (ended by `Telemetry.end_upstream`)."""

    name: str
    context: SpanContext
    parent: SpanContext
    attributes: dict[str, Any]
    start_ns: int


def _with_context(params: Mapping[str, Any] | None, context: SpanContext) -> dict[str, Any]:
    """`params` with `context` as W3C trace context in its `_meta` (replacing any the client sent)."""
    carrier = {"traceparent": f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"}
    if context.trace_state:
        carrier["tracestate"] = context.trace_state.to_header()
    body = dict(params or {})
    meta = body.get("_meta")
    body["_meta"] = {**(meta if isinstance(meta, Mapping) else {}), **carrier}
    return body


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
