"""The gateway's log lines about decisions, and `--log-format json`.

A blocked message logs one WARNING line and a changed one an INFO line, each naming the interceptor, event,
phase, reason, JSON path and audit call id, from what the interceptors answered (never the payload: a secret
a guard found stays out of the log). `JsonFormatter` writes every log record as one JSON object per line.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from opentelemetry import trace

from mcp_interceptors.executor import ChainResult
from mcp_interceptors.protocol.results import MutationResult, ValidationResult

#: The logger of the decision lines: `--log-level INFO` shows changes too, WARNING blocks only.
decisions = logging.getLogger("mcp_interceptors.gateway.decisions")
#: Fields a log record may carry (`extra=`) that the JSON lines include.
FIELDS: Final = ("method", "phase", "interceptor", "reason", "path", "call_id", "trace_id", "upstream", "outcome")
#: At most this many reasons in one line (a validator may answer with hundreds of findings).
_MAX_REASONS = 5


def _reasons(result: ChainResult) -> list[tuple[str, str, str | None]]:
    """`(interceptor, reason, path)` of what stopped the chain: the active validators that failed it, the
    invocations that failed closed, else where it was aborted."""
    found: list[tuple[str, str, str | None]] = []
    for item in result.results:
        if isinstance(item, ValidationResult) and not item.valid and item.mode != "audit":
            name = item.interceptor or "?"
            for message in item.messages or ():
                found.append((name, message.message, message.path))
            if not item.messages:
                found.append((name, f"invalid ({item.severity or 'error'})", None))
    for failure in result.failures:
        if failure.mode != "audit" and not failure.fail_open:
            found.append((failure.interceptor, failure.reason, None))
    if not found and result.aborted_at is not None:
        found.append((result.aborted_at.interceptor, result.aborted_at.reason, None))
    return found


def _joined(reasons: Sequence[tuple[str, str, str | None]]) -> str:
    parts = [f"{name}: {reason}" + (f" at {path}" if path else "") for name, reason, path in reasons[:_MAX_REASONS]]
    if len(reasons) > _MAX_REASONS:
        parts.append(f"and {len(reasons) - _MAX_REASONS} more")
    return "; ".join(parts)


def log_blocked(result: ChainResult, call_id: str) -> None:
    """One WARNING line for a message the chain blocked."""
    if not decisions.isEnabledFor(logging.WARNING):
        return
    reasons = _reasons(result)
    first = reasons[0] if reasons else ("?", result.status, None)
    extra = {
        "method": result.event,
        "phase": result.phase,
        "interceptor": first[0],
        "reason": first[1],
        "path": first[2],
        "call_id": call_id or None,
        "trace_id": current_trace_id(),
        "outcome": result.status,
    }
    where = f" (call {call_id})" if call_id else ""
    decisions.warning(
        "blocked %s %s: %s%s", result.event, result.phase, _joined(reasons) or result.status, where, extra=extra
    )


def log_refused_payload(result: ChainResult, problem: str, call_id: str) -> None:
    """One WARNING line for a message blocked because its mutators left no payload of its event."""
    changed = [r.interceptor for r in result.results if isinstance(r, MutationResult) and r.modified]
    name = changed[-1] if changed else "?"
    extra = {
        "method": result.event,
        "phase": result.phase,
        "interceptor": name,
        "reason": f"invalid payload: {problem}",
        "call_id": call_id or None,
        "trace_id": current_trace_id(),
        "outcome": "mutation_failed",
    }
    where = f" (call {call_id})" if call_id else ""
    decisions.warning(
        "blocked %s %s: %s: invalid payload: %s%s", result.event, result.phase, name, problem, where, extra=extra
    )


def log_changed(result: ChainResult, call_id: str) -> None:
    """One INFO line for a message active mutators changed: which, and where (the paths they name)."""
    changed = [
        item for item in result.results if isinstance(item, MutationResult) and item.modified and item.mode != "audit"
    ]
    if not changed:
        return
    parts = []
    paths: list[str] = []
    for item in changed:
        info = item.info or {}
        found = [p for p in info.get("paths") or () if isinstance(p, str)]
        kinds = info.get("redacted")
        what = ", ".join(str(k) for k in kinds) if isinstance(kinds, Mapping) and kinds else ""
        where = f" at {', '.join(found[:_MAX_REASONS])}" if found else ""
        parts.append(f"{item.interceptor}{' (' + what + ')' if what else ''}{where}")
        paths.extend(found)
    extra = {
        "method": result.event,
        "phase": result.phase,
        "interceptor": changed[0].interceptor,
        "path": paths[0] if paths else None,
        "call_id": call_id or None,
        "trace_id": current_trace_id(),
    }
    suffix = f" (call {call_id})" if call_id else ""
    decisions.info("changed %s %s: %s%s", result.event, result.phase, "; ".join(parts), suffix, extra=extra)


class JsonFormatter(logging.Formatter):
    """`--log-format json`: one object per line with `time`, `level`, `logger`, `event` (the message), the
    decision fields a line carries, and the trace id of the span it was logged in."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "event": record.getMessage(),
        }
        for key in FIELDS:
            value = record.__dict__.get(key)
            if value is not None:
                line[key] = value
        if "trace_id" not in line and (trace_id := current_trace_id()) is not None:
            line["trace_id"] = trace_id
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def current_trace_id() -> str | None:
    """The trace id (32 hex digits) of the span being served, None outside one (or with tracing off)."""
    span_context = trace.get_current_span().get_span_context()
    return format(span_context.trace_id, "032x") if span_context.is_valid else None


TEXT_FORMAT: Final = "%(levelname)s %(name)s: %(message)s"


#: Set by `configure_logging`: the format `announce` writes in.
_json_lines = False


def configure_logging(level: str, log_format: str) -> None:
    """Log to stderr at `level`, as text (the default) or JSON lines."""
    import sys

    global _json_lines
    _json_lines = log_format == "json"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if _json_lines else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler])


def announce(message: str, *, logger: str = "mcp_interceptors.gateway", level: int = logging.INFO) -> None:
    """A line the command always writes to stderr, whatever `--log-level` (where it listens, a warning of
    `--check`): the bare message in text format, one JSON object like every log line with `--log-format json`."""
    import sys

    if _json_lines:
        record = logging.LogRecord(logger, level, __file__, 0, message, None, None)
        message = JsonFormatter().format(record)
    print(message, file=sys.stderr, flush=True)
