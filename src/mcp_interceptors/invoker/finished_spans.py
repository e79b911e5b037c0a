"""Spans handed to a provider's one processor already finished, the tracing fast path of `tracing.py` and the gateway.

`FinishedSpans` builds the SDK's `ReadableSpan` of a span that has ended (ids drawn cheaply, the provider's
resource and one instrumentation scope shared) and gives it to the processor as `Span.end` would; `OpenSpan`
is a span that runs for a while (a governed call's) and is handed over the same way when it ends. Imported
only when tracing is on: it loads the OpenTelemetry SDK.
"""

from __future__ import annotations

import inspect
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import DEFAULT_ON, Decision
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    DEFAULT_TRACE_STATE,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

_UNSET: Final = Status(StatusCode.UNSET)
_SAMPLED: Final = TraceFlags(TraceFlags.SAMPLED)
_NOT_SAMPLED: Final = TraceFlags(TraceFlags.DEFAULT)
#: `ReadableSpan`'s parameters in the order `FinishedSpans` passes them (positional: a third cheaper).
_READABLE_ORDER: Final = (
    "name",
    "context",
    "parent",
    "resource",
    "attributes",
    "events",
    "links",
    "kind",
    "instrumentation_info",
    "status",
    "start_time",
    "end_time",
    "instrumentation_scope",
)

#: One child span of a run, as `FinishedSpans.emit_children` takes it: name, attributes, start and end
#: (ns), and the error status text (None: no error).
Child = tuple[str, Mapping[str, Any], int, int, str | None]


def _readable_span_maker() -> Callable[..., ReadableSpan]:
    """`ReadableSpan` called with `_READABLE_ORDER`'s arguments: positionally when its signature has that
    order (the SDK's today), else by keyword, so another SDK version still gets every field right."""
    names = tuple(inspect.signature(ReadableSpan).parameters)
    if names[: len(_READABLE_ORDER)] == _READABLE_ORDER:
        return ReadableSpan

    def by_keyword(*values: Any) -> ReadableSpan:
        return ReadableSpan(**dict(zip(_READABLE_ORDER, values, strict=True)))

    return by_keyword


def _contexts_built_directly() -> bool:
    """Whether a `SpanContext` of valid ids can be built as the tuple it is (the API's layout today): the same
    value as its constructor's, without the constructor's range checks (a third of a span's own cost)."""
    probe = SpanContext(1, 2, False, _SAMPLED, DEFAULT_TRACE_STATE)
    direct = tuple.__new__(SpanContext, (1, 2, False, _SAMPLED, DEFAULT_TRACE_STATE, True))
    fields = (
        direct.trace_id,
        direct.span_id,
        direct.is_remote,
        direct.trace_flags,
        direct.trace_state,
        direct.is_valid,
    )
    return direct == probe and fields == (1, 2, False, _SAMPLED, DEFAULT_TRACE_STATE, True)


class FinishedSpans:
    """Spans that have already ended, handed to `processor` as `Span.end` would hand them: for a provider
    whose one processor the caller built, so none is skipped."""

    def __init__(self, provider: TracerProvider, processor: SpanProcessor, scope: str, version: str) -> None:
        self.processor = processor
        self._on_end = processor.on_end
        self._make = _readable_span_maker()
        self._resource = provider.resource
        self._ids = provider.id_generator
        #: The default generator draws from `random`'s generator; drawing from it here skips a call a span.
        self._draw = random.getrandbits if type(self._ids) is RandomIdGenerator else None
        self._sampler = provider.sampler
        self._keep = Decision.RECORD_AND_SAMPLE  # RECORD_ONLY spans would not be exported either
        self._scope = InstrumentationScope(scope, version)
        self._direct = _contexts_built_directly()

    def span_id(self) -> int:
        draw = self._draw
        return (draw(64) if draw is not None else 0) or self._ids.generate_span_id()

    def child_of(self, parent: SpanContext) -> SpanContext:
        """A new span's context in `parent`'s trace (a valid one), sampled as `parent` is."""
        if self._direct:
            return tuple.__new__(SpanContext, (parent.trace_id, self.span_id(), False, parent[3], parent[4], True))
        return SpanContext(parent.trace_id, self.span_id(), False, parent.trace_flags, parent.trace_state)

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
        span = self._make(
            name,
            context,
            parent,
            self._resource,
            attributes,
            events,
            (),
            kind,
            None,
            status,
            start_ns,
            end_ns,
            self._scope,
        )
        self._on_end(span)

    def emit_children(self, parent: SpanContext, children: Sequence[Child]) -> None:
        """INTERNAL spans, children of `parent` (a valid context: a run's interceptor invocations): one loop."""
        trace_id, flags, state = parent.trace_id, parent.trace_flags, parent.trace_state
        draw, make, on_end, direct = self._draw, self._make, self._on_end, self._direct
        resource, scope, kind = self._resource, self._scope, SpanKind.INTERNAL
        for name, attributes, start_ns, end_ns, error in children:
            span_id = (draw(64) if draw is not None else 0) or self._ids.generate_span_id()
            if direct:
                context = tuple.__new__(SpanContext, (trace_id, span_id, False, flags, state, True))
            else:
                context = SpanContext(trace_id, span_id, False, flags, state)
            status = _UNSET if error is None else Status(StatusCode.ERROR, error)
            on_end(
                make(name, context, parent, resource, attributes, (), (), kind, None, status, start_ns, end_ns, scope)
            )

    def open(
        self, name: str, parent: otel_context.Context | None, kind: SpanKind, attributes: dict[str, Any]
    ) -> trace.Span:
        """A span started now as `provider`'s tracer would start it (its sampler decides, for a child of
        `parent`'s span or a new trace), current to no one: an `OpenSpan` if sampled, else non-recording."""
        parent_context = trace.get_current_span(parent).get_span_context()
        valid = parent_context.is_valid
        trace_id = parent_context.trace_id if valid else self._ids.generate_trace_id()
        if self._sampler is DEFAULT_ON:  # the SDK's default: a root is sampled, a child as its parent is
            sampled = parent_context.trace_flags.sampled if valid else True
            state, extra = (parent_context.trace_state if valid else None), None
        else:
            decided = self._sampler.should_sample(parent, trace_id, name, kind, attributes)
            sampled, state, extra = decided.decision is self._keep, decided.trace_state, decided.attributes
        context = SpanContext(trace_id, self.span_id(), False, _SAMPLED if sampled else _NOT_SAMPLED, state)
        if not sampled:
            return NonRecordingSpan(context)
        span = OpenSpan(self, name, context, parent_context if valid else None, kind, attributes)
        if extra:
            span.attributes.update(extra)
        return span


class OpenSpan(trace.Span):
    """A sampled span that gathers its attributes and status while it runs and is handed to the processor
    finished at `end` (`FinishedSpans.open`): no SDK span, lock or attribute cleaning on the hot path."""

    def __init__(
        self,
        finished: FinishedSpans,
        name: str,
        context: SpanContext,
        parent: SpanContext | None,
        kind: SpanKind,
        attributes: dict[str, Any],
    ) -> None:
        self._finished, self._name, self._context, self._parent, self._kind = finished, name, context, parent, kind
        #: The caller's dict, kept (not copied): `FinishedSpans.open` takes one built for this span.
        self.attributes = attributes
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
