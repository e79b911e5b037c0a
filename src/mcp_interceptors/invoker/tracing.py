"""Chain and interceptor spans (OpenTelemetry), shared by `Chain` and the gateway.

A chain run gets one INTERNAL span (`chain {event} {phase}`) and a child per interceptor invocation
(`interceptor {name}`), the children laid out from the run's measured timings once it is over. Given the
processor of the provider (the gateway builds its own), the spans are handed to it already finished, with
ids drawn up front, so no SDK span is built live; any other tracer (a provider an application set) gets
them through the public API with explicit start and end times. Imported only when tracing is on: it loads
opentelemetry.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from mcp_interceptors.executor import ChainResult
from mcp_interceptors.planning import Plan
from mcp_interceptors.protocol.results import MutationResult, ValidationResult

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.trace import Span, Tracer
    from opentelemetry.trace import TracerProvider as ApiTracerProvider

#: Where our own attributes live (the MCP semantic conventions name the rest).
NS: Final = "mcp_interceptors."
#: The instrumentation scope of the spans `Chain` makes on its own (the gateway's have their own).
SCOPE: Final = "mcp_interceptors"


def interceptor_attributes(name: str, kind: str, mode: str, outcome: Any) -> dict[str, Any]:
    """The attributes of one interceptor invocation's span, from its result (or failure)."""
    attributes: dict[str, Any] = {
        NS + "interceptor.name": name,
        NS + "interceptor.type": kind,
        NS + "interceptor.mode": mode,
    }
    if isinstance(outcome, ValidationResult):
        blocks = not outcome.valid and mode == "active" and outcome.severity == "error"
        status = "valid" if outcome.valid else ("blocked" if blocks else "invalid")
        if outcome.severity is not None:
            attributes[NS + "interceptor.severity"] = outcome.severity
    elif isinstance(outcome, MutationResult):
        status = "modified" if outcome.modified else "unmodified"
    elif hasattr(outcome, "fail_open"):  # an invocation failure
        status = "timeout" if outcome.timeout else "failed"
        attributes[NS + "interceptor.fail_open"] = bool(outcome.fail_open)
        attributes["error.type"] = str(outcome.code)
    else:
        status = "ran"
    attributes[NS + "interceptor.status"] = status
    duration = getattr(outcome, "duration_ms", None)
    if isinstance(duration, int | float):
        attributes[NS + "interceptor.duration_ms"] = float(duration)
    return attributes


def reason_of(outcome: Any) -> str:
    """An error span's status text: a validator's first message (and its path), or a failure's reason."""
    messages: Sequence[Any] = getattr(outcome, "messages", None) or ()
    if messages:
        first = messages[0]
        return first.message if first.path is None else f"{first.message} at {first.path}"
    return str(getattr(outcome, "reason", "") or "")


def chain_attributes(plan: Plan, result: ChainResult | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        NS + "chain.event": plan.event,
        NS + "chain.phase": plan.phase,
        NS + "chain.direction": plan.direction,
        NS + "chain.interceptors": len(plan.steps),
        NS + "chain.outcome": "unfinished" if result is None else result.status,
    }
    if result is not None and result.aborted_at is not None:
        attributes[NS + "chain.aborted_at"] = result.aborted_at.interceptor
    return attributes


_UNSET: Final = Status(StatusCode.UNSET)


class FinishedSpans:
    """Spans that have already ended, handed to `processor` as `Span.end` would hand them (a tenth of the
    cost of a live SDK span): for a provider whose one processor the caller built, so none is skipped."""

    def __init__(self, provider: TracerProvider, processor: SpanProcessor, scope: str, version: str) -> None:
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.sdk.trace.sampling import Decision
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self.processor = processor
        self._readable = ReadableSpan
        self._resource = provider.resource
        self._ids = provider.id_generator
        self._sampler = provider.sampler
        self._keep = Decision.RECORD_AND_SAMPLE  # RECORD_ONLY spans would not be exported either
        self._scope = InstrumentationScope(scope, version)

    def child_of(self, parent: SpanContext) -> SpanContext:
        """A new span's context in `parent`'s trace, sampled as `parent` is."""
        return SpanContext(
            parent.trace_id,
            self._ids.generate_span_id(),
            is_remote=False,
            trace_flags=parent.trace_flags,
            trace_state=parent.trace_state,
        )

    def emit(
        self,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        attributes: Mapping[str, Any],
        start_ns: int,
        end_ns: int,
        error: str | None = None,
        events: Sequence[Any] = (),
    ) -> None:
        status = _UNSET if error is None else Status(StatusCode.ERROR, error)
        span = self._readable(
            name,
            context,
            parent,
            self._resource,
            attributes,
            events,
            kind=kind,
            status=status,
            start_time=start_ns,
            end_time=end_ns,
            instrumentation_scope=self._scope,
        )
        self.processor.on_end(span)

    def open(
        self, name: str, parent: otel_context.Context | None, kind: SpanKind, attributes: dict[str, Any]
    ) -> trace.Span:
        """A span started now as `provider`'s tracer would start it (its sampler decides, for a child of
        `parent`'s span or a new trace), current to no one: an `OpenSpan` if sampled, else non-recording."""
        parent_context = trace.get_current_span(parent).get_span_context()
        valid = parent_context.is_valid
        trace_id = parent_context.trace_id if valid else self._ids.generate_trace_id()
        sampled = self._sampler.should_sample(parent, trace_id, name, kind, attributes)
        flags = TraceFlags(TraceFlags.SAMPLED if sampled.decision is self._keep else TraceFlags.DEFAULT)
        context = SpanContext(trace_id, self._ids.generate_span_id(), False, flags, sampled.trace_state)
        if not flags.sampled:
            return NonRecordingSpan(context)
        span = OpenSpan(self, name, context, parent_context if valid else None, kind)
        span.attributes.update(attributes)
        if sampled.attributes:
            span.attributes.update(sampled.attributes)
        return span


class OpenSpan(trace.Span):
    """A sampled span that gathers its attributes and status while it runs and is handed to the processor
    finished at `end` (`FinishedSpans.open`): no SDK span, lock or attribute cleaning on the hot path."""

    def __init__(
        self, finished: FinishedSpans, name: str, context: SpanContext, parent: SpanContext | None, kind: SpanKind
    ) -> None:
        self._finished, self._name, self._context, self._parent, self._kind = finished, name, context, parent, kind
        self.attributes: dict[str, Any] = {}
        self._error: str | None = None
        self._ended = False
        self._events: list[Any] = []
        self.start_time = time.time_ns()

    def get_span_context(self) -> SpanContext:
        return self._context

    def is_recording(self) -> bool:
        return not self._ended

    def set_attribute(self, key: str, value: Any) -> None:
        if not self._ended:
            self.attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        if not self._ended:
            self.attributes.update(attributes)

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        code = status.status_code if isinstance(status, Status) else status
        text = status.description if isinstance(status, Status) else description
        if not self._ended and code is StatusCode.ERROR:
            self._error = text or ""
        elif not self._ended and code is StatusCode.OK:
            self._error = None

    def update_name(self, name: str) -> None:
        self._name = name

    def add_event(self, name: str, attributes: Mapping[str, Any] | None = None, timestamp: int | None = None) -> None:
        from opentelemetry.sdk.trace import Event

        if not self._ended:
            self._events.append(Event(name, dict(attributes or {}), timestamp or time.time_ns()))

    def record_exception(
        self,
        exception: BaseException,
        attributes: Mapping[str, Any] | None = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        details = {"exception.type": type(exception).__qualname__, "exception.message": str(exception)}
        self.add_event("exception", {**details, **(attributes or {})}, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        self._finished.emit(
            self._name,
            self._context,
            self._parent,
            self._kind,
            self.attributes,
            self.start_time,
            end_time or time.time_ns(),
            self._error,
            self._events,
        )


@dataclass(slots=True)
class ChainRun:
    """One chain run's span while it runs: `span` is a live span (the API path), else `context` names the
    span `ChainSpans.end` hands over finished."""

    plan: Plan
    span: Span | None
    context: SpanContext
    parent: SpanContext | None
    token: object
    start_ns: int


class ChainSpans:
    """Makes a chain run's span and its interceptors' spans; `finished` given, they are handed over
    finished (the gateway's fast path), else they go through `tracer`."""

    def __init__(self, tracer: Tracer, finished: FinishedSpans | None = None) -> None:
        self.tracer = tracer
        self.finished = finished

    async def traced(self, plan: Plan, running: Awaitable[ChainResult]) -> ChainResult:
        """`running` (the run of `plan`, not yet started) inside the chain's span."""
        run, result = self.begin(plan), None
        try:
            result = await running
            return result
        finally:
            self.end(run, result)

    def begin(self, plan: Plan) -> ChainRun | None:
        """The chain's span, current until `end` (an interceptor server's request is its child); None when
        the current span is not sampled (nothing of the run would be kept)."""
        parent = trace.get_current_span().get_span_context()
        if self.finished is not None and parent.is_valid:
            if not parent.trace_flags.sampled:
                return None
            context = self.finished.child_of(parent)
            token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(context)))
            return ChainRun(plan, None, context, parent, token, time.time_ns())
        span = self.tracer.start_span(f"chain {plan.event} {plan.phase}")
        if not span.is_recording():
            return None
        token = otel_context.attach(trace.set_span_in_context(span))
        started = getattr(span, "start_time", None)  # the SDK's span: when it began, in ns
        return ChainRun(plan, span, span.get_span_context(), None, token, started or time.time_ns())

    def end(self, run: ChainRun | None, result: ChainResult | None) -> None:
        """Close the chain's span, with one child per interceptor that ran; without a result the run did not
        finish (cancelled, or the process stopping)."""
        if run is None:
            return
        otel_context.detach(run.token)  # type: ignore[arg-type]
        plan = run.plan
        attributes = chain_attributes(plan, result)
        error = None if result is None or result.allowed else result.status
        if run.span is None:
            assert self.finished is not None
            name = f"chain {plan.event} {plan.phase}"
            end_ns = time.time_ns()
            self.finished.emit(
                name, run.context, run.parent, SpanKind.INTERNAL, attributes, run.start_ns, end_ns, error
            )
        else:
            run.span.set_attributes(attributes)
            if error is not None:
                run.span.set_status(StatusCode.ERROR, error)
        if result is not None:
            self._interceptor_spans(run, result)
        if run.span is not None:
            run.span.end()

    def _interceptor_spans(self, run: ChainRun, result: ChainResult) -> None:
        """One span per invocation, laid out as the plan ran them: a batch's validators side by side, each
        batch after the last; each lasts the invocation's measured time (`duration_ms`)."""
        outcomes: dict[str, Any] = {item.interceptor: item for item in result.results if item.interceptor}
        for failure in result.failures:
            outcomes.setdefault(failure.interceptor, failure)
        finished = self.finished if run.span is None else None
        parent = None if run.span is None else trace.set_span_in_context(run.span)
        cursor = run.start_ns
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
                if finished is not None:
                    context = finished.child_of(run.context)
                    kind = SpanKind.INTERNAL
                    finished.emit(name, context, run.context, kind, attributes, cursor, cursor + duration_ns, reason)
                    continue
                child = self.tracer.start_span(name, parent, attributes=attributes, start_time=cursor)
                if reason is not None:
                    child.set_status(StatusCode.ERROR, reason)
                child.end(end_time=cursor + duration_ns)
            cursor += longest


def spans_of(provider: ApiTracerProvider) -> ChainSpans:
    from importlib.metadata import PackageNotFoundError, version

    try:
        ours: str | None = version("mcp-interceptors")  # the package root is above this layer
    except PackageNotFoundError:
        ours = None
    return ChainSpans(provider.get_tracer(SCOPE, ours))


def global_spans() -> ChainSpans | None:
    """The chain spans of the tracer provider the application set globally; None while it has set none
    (the API's proxy or no-op provider): then a chain run makes no span at all."""
    provider = trace.get_tracer_provider()
    unset = isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
    return None if unset else spans_of(provider)
