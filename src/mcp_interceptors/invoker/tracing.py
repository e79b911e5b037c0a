"""Chain and interceptor spans (OpenTelemetry), shared by `Chain` and the gateway.

A chain run gets one INTERNAL span (`chain {event} {phase}`) and a child per interceptor invocation
(`interceptor {name}`), the children laid out from the run's measured timings once it is over; names and
fixed attributes are derived once per plan (`PlanSpans`). Given the processor of the provider (the gateway
builds its own), the spans are handed to it already finished (`finished_spans.py`), so no SDK span is built
live; any other tracer (a provider an application set) gets them through the public API with explicit start
and end times. Imported only when tracing is on: it loads opentelemetry.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, StatusCode

from mcp_interceptors.executor import ChainResult
from mcp_interceptors.planning import Plan
from mcp_interceptors.protocol.results import MutationResult, ValidationResult

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer
    from opentelemetry.trace import TracerProvider as ApiTracerProvider

    from mcp_interceptors.invoker.finished_spans import Child, FinishedSpans

#: Where our own attributes live (the MCP semantic conventions name the rest).
NS: Final = "mcp_interceptors."
#: The instrumentation scope of the spans `Chain` makes on its own (the gateway's have their own).
SCOPE: Final = "mcp_interceptors"


#: The interceptor statuses whose span has an error status.
_FAILED: Final = frozenset({"failed", "timeout", "blocked"})
_DURATION: Final = NS + "interceptor.duration_ms"
#: Plans whose span layout a `ChainSpans` keeps; past this it starts over (a layout is cheap to derive).
_MAX_LAYOUTS: Final = 512


def outcome_attributes(attributes: dict[str, Any], mode: str, outcome: Any) -> str:
    """Add to an interceptor invocation's span `attributes` what its result (or failure) tells; its status."""
    kind = type(outcome)  # the exact type first: isinstance on a pydantic model goes through a metaclass hook
    if kind is ValidationResult or (kind is not MutationResult and isinstance(outcome, ValidationResult)):
        blocks = not outcome.valid and mode == "active" and outcome.severity == "error"
        status = "valid" if outcome.valid else ("blocked" if blocks else "invalid")
        if outcome.severity is not None:
            attributes[NS + "interceptor.severity"] = outcome.severity
    elif kind is MutationResult or isinstance(outcome, MutationResult):
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
        attributes[_DURATION] = float(duration)
    return status


def step_attributes(name: str, kind: str, mode: str) -> dict[str, Any]:
    return {NS + "interceptor.name": name, NS + "interceptor.type": kind, NS + "interceptor.mode": mode}


def reason_of(outcome: Any) -> str:
    """An error span's status text: a validator's first message (and its path), or a failure's reason."""
    messages: Sequence[Any] = getattr(outcome, "messages", None) or ()
    if messages:
        first = messages[0]
        return first.message if first.path is None else f"{first.message} at {first.path}"
    return str(getattr(outcome, "reason", "") or "")


def plan_attributes(plan: Plan) -> dict[str, Any]:
    """What every run of `plan` puts on its chain span, whatever its outcome."""
    return {
        NS + "chain.event": plan.event,
        NS + "chain.phase": plan.phase,
        NS + "chain.direction": plan.direction,
        NS + "chain.interceptors": len(plan.steps),
    }


def finish_chain_attributes(base: Mapping[str, Any], result: ChainResult | None) -> dict[str, Any]:
    attributes = {**base, NS + "chain.outcome": "unfinished" if result is None else result.status}
    if result is not None and result.aborted_at is not None:
        attributes[NS + "chain.aborted_at"] = result.aborted_at.interceptor
    return attributes


#: One step's part of a layout: its name, its span's name, its mode and its span's fixed attributes.
StepSpan = tuple[str, str, str, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class PlanSpans:
    """What the spans of every run of one plan share, derived once per plan (names, fixed attributes)."""

    plan: Plan  # held, so the id it is cached under is not reused while cached
    name: str
    attributes: dict[str, Any]
    batches: tuple[tuple[StepSpan, ...], ...]


def plan_spans_for(plan: Plan) -> PlanSpans:
    batches = tuple(
        tuple(
            (
                step.name,
                f"interceptor {step.name}",
                step.policy.mode,
                step_attributes(step.name, step.type, step.policy.mode),
            )
            for step in batch.steps
        )
        for _, batch in plan.batches
    )
    return PlanSpans(plan, f"chain {plan.event} {plan.phase}", plan_attributes(plan), batches)


@dataclass(slots=True)
class ChainRun:
    """One chain run's span while it runs: `span` is a live span (the API path), else `context` names the
    span `ChainSpans.end` hands over finished."""

    layout: PlanSpans
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
        self._layouts: dict[int, PlanSpans] = {}

    async def traced(self, plan: Plan, running: Awaitable[ChainResult]) -> ChainResult:
        """`running` (the run of `plan`, not yet started) inside the chain's span."""
        run, result = self.begin(plan), None
        try:
            result = await running
            return result
        finally:
            self.end(run, result)

    def layout_of(self, plan: Plan) -> PlanSpans:
        layout = self._layouts.get(id(plan))
        if layout is None or layout.plan is not plan:
            if len(self._layouts) >= _MAX_LAYOUTS:
                self._layouts.clear()
            layout = self._layouts[id(plan)] = plan_spans_for(plan)
        return layout

    def begin(self, plan: Plan) -> ChainRun | None:
        """The chain's span, current until `end` (an interceptor server's request is its child); None when
        the current span is not sampled (nothing of the run would be kept)."""
        layout = self.layout_of(plan)
        parent = trace.get_current_span().get_span_context()
        if self.finished is not None and parent.is_valid:
            if not parent.trace_flags.sampled:
                return None
            context = self.finished.child_of(parent)
            token = otel_context.attach(trace.set_span_in_context(NonRecordingSpan(context)))
            return ChainRun(layout, None, context, parent, token, time.time_ns())
        span = self.tracer.start_span(layout.name)
        if not span.is_recording():
            return None
        token = otel_context.attach(trace.set_span_in_context(span))
        started = getattr(span, "start_time", None)  # the SDK's span: when it began, in ns
        return ChainRun(layout, span, span.get_span_context(), None, token, started or time.time_ns())

    def end(self, run: ChainRun | None, result: ChainResult | None) -> None:
        """Close the chain's span, with one child per interceptor that ran; without a result the run did not
        finish (cancelled, or the process stopping)."""
        if run is None:
            return
        otel_context.detach(run.token)  # type: ignore[arg-type]
        layout = run.layout
        attributes = finish_chain_attributes(layout.attributes, result)
        error = None if result is None or result.allowed else result.status
        if run.span is None:
            assert self.finished is not None
            end_ns = time.time_ns()
            self.finished.emit(
                layout.name, run.context, run.parent, SpanKind.INTERNAL, attributes, run.start_ns, end_ns, error
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
        children: list[Child] = []
        cursor = run.start_ns
        layout = run.layout if result.plan is run.layout.plan else plan_spans_for(result.plan)
        for batch in layout.batches:
            longest = 0
            for step_name, span_name, mode, fixed in batch:
                outcome = outcomes.get(step_name)
                if outcome is None:
                    continue  # not run: the chain stopped before it
                attributes = fixed.copy()
                status = outcome_attributes(attributes, mode, outcome)
                duration = attributes.get(_DURATION)
                duration_ns = int(duration * 1_000_000) if duration else 0
                longest = max(longest, duration_ns)
                reason = reason_of(outcome) if status in _FAILED else None
                children.append((span_name, attributes, cursor, cursor + duration_ns, reason))
            cursor += longest
        if run.span is None:
            assert self.finished is not None
            self.finished.emit_children(run.context, children)
            return
        parent = trace.set_span_in_context(run.span)
        for name, fields, start_ns, end_ns, reason in children:
            child = self.tracer.start_span(name, parent, attributes=fields, start_time=start_ns)
            if reason is not None:
                child.set_status(StatusCode.ERROR, reason)
            child.end(end_time=end_ns)


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
