"""The exporter wrapper that keeps the gateway's tracing shutdown to one deadline (`Telemetry.close`).

The SDK's batch processor exports every queued batch on shutdown, each waiting its own export timeout, so a
collector that refuses or never answers would hold the exit for a timeout per batch. The gate passes batches
through until `deadline`, then drops them at once. Imported only when tracing is on (it loads the SDK).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult


class ShutdownGate(SpanExporter):
    """Sends each batch through `inner` until `deadline` (a `time.monotonic()` value `close` sets), then drops it."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.deadline: float | None = None
        #: Spans dropped because the deadline had passed.
        self.dropped = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            self.dropped += len(spans)
            return SpanExportResult.FAILURE
        return self.inner.export(spans)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)
