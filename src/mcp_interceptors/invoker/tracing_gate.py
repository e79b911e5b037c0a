"""Which spans a `Chain` run makes, decided without loading OpenTelemetry (`tracing.py` loads it): the spans
of a provider the chain was given, else of the one the application set globally, once it has set one."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from mcp_interceptors.invoker.tracing import ChainSpans

#: `Chain.tracing` by default: spans from the tracer provider the application set globally, once it sets one.
GLOBAL_TRACING: Final = "global"

_global_found: ChainSpans | None = None  # once found it stays: the API refuses a second global provider
_global_next_look = 0.0


def spans_of(provider: TracerProvider) -> ChainSpans:
    """The chain spans of `provider` (a `Chain`'s `tracer_provider`)."""
    from mcp_interceptors.invoker import tracing

    return tracing.spans_of(provider)


def global_spans() -> ChainSpans | None:
    """The spans of the tracer provider the application set globally, looked for at most once a second
    until it is set, so that a run costs a clock read (docs/telemetry.md)."""
    global _global_found, _global_next_look
    if _global_found is None and time.monotonic() >= _global_next_look:
        from mcp_interceptors.invoker import tracing

        _global_found, _global_next_look = tracing.global_spans(), time.monotonic() + 1.0
    return _global_found
