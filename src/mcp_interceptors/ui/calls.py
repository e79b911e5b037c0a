"""Pure: audit records grouped into calls, as the web view shows them (verdict, who decided, latency, diffs).

No IO: `pages.py` reads the rows and hands them here; templates only print what these values hold.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import orjson

#: The longest filter value kept (a query string is the user's, but no filter needs more).
_MAX_FILTER: Final = 200
VERDICTS: Final = ("allowed", "denied", "refused", "error", "cancelled", "open")


@dataclass(frozen=True)
class DiffLine:
    """One RFC 6902 operation of a mutation: only new values are kept in the trail (`remove` has none)."""

    op: str
    path: str
    value: str | None  # the new value as JSON text


@dataclass(frozen=True)
class Entry:
    """One interceptor's part in a chain, as recorded."""

    name: str
    type: str
    mode: str
    outcome: str  # passed, blocked, flagged, changed, unchanged, failed, ...
    severity: str | None
    duration_ms: float | None
    messages: tuple[str, ...]
    diff: tuple[DiffLine, ...]
    error: str | None

    @property
    def shadow(self) -> bool:
        """A mutation computed in audit mode: recorded, not applied."""
        return self.type == "mutation" and self.mode == "audit" and bool(self.diff)

    @property
    def acted(self) -> bool:
        return self.outcome in ("blocked", "flagged", "changed", "failed", "would change")


@dataclass
class RecordView:
    pos: int
    id: str
    raw: bytes
    record: dict[str, Any] | None  # None: not a well-formed record (verification names it)
    body: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return str((self.record or {}).get("kind") or "?")

    def get(self, name: str) -> Any:
        return self.body.get(name)

    @property
    def entries(self) -> list[Entry]:
        items = self.body.get("interceptors")
        return [entry_of(item) for item in items if isinstance(item, Mapping)] if isinstance(items, list) else []

    @property
    def trace_id(self) -> str | None:
        value = self.body.get("trace_id", (self.record or {}).get("trace_id"))
        return value if isinstance(value, str) and value else None

    @property
    def closes(self) -> bool:
        return self.body.get("phase") == "response" or self.body.get("decision") != "allow"

    @property
    def pretty(self) -> str:
        if self.record is None:
            return self.raw.decode(errors="replace")
        return orjson.dumps(self.record, option=orjson.OPT_INDENT_2).decode()

    @property
    def error_text(self) -> str | None:
        error = self.body.get("error")
        if not isinstance(error, Mapping):
            return None
        parts = [str(error[key]) for key in ("code", "message", "reason") if error.get(key) is not None]
        return " · ".join(parts) or orjson.dumps(error).decode()


def record_view(pos: int, record_id: str, raw: bytes) -> RecordView:
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        parsed = None
    record = parsed if isinstance(parsed, dict) else None
    body = record.get("body") if record is not None else None
    return RecordView(
        pos, str((record or {}).get("id") or record_id), raw, record, body if isinstance(body, dict) else {}
    )


def entry_of(item: Mapping[str, Any]) -> Entry:
    kind, mode = str(item.get("type") or "?"), str(item.get("mode") or "active")
    diff = tuple(_diff_line(op) for op in item.get("diff") or () if isinstance(op, Mapping))
    error = item.get("error")
    messages = tuple(_message(m) for m in item.get("messages") or ())
    if error is not None:
        outcome = "failed (fail-open)" if item.get("fail_open") else "failed"
    elif kind == "validation":
        outcome = "passed" if item.get("valid") is not False else ("flagged" if mode == "audit" else "blocked")
    elif kind == "mutation":
        changed = bool(item.get("modified")) or bool(diff)
        outcome = ("would change" if mode == "audit" else "changed") if changed else "unchanged"
    else:
        outcome = "ran"
    duration = item.get("duration_ms")
    return Entry(
        name=str(item.get("name") or "?"),
        type=kind,
        mode=mode,
        outcome=outcome,
        severity=str(item["severity"]) if item.get("severity") else None,
        duration_ms=float(duration) if isinstance(duration, int | float) else None,
        messages=messages,
        diff=diff,
        error=None if error is None else orjson.dumps(error).decode(),
    )


def _diff_line(op: Mapping[str, Any]) -> DiffLine:
    value = orjson.dumps(op["value"]).decode() if "value" in op else None
    return DiffLine(str(op.get("op") or "?"), str(op.get("path") or ""), value)


def _message(message: object) -> str:
    if isinstance(message, Mapping):
        text = str(message.get("message") or "")
        where = message.get("path")
        return f"{text} (at {where})" if where else text
    return str(message)


@dataclass
class CallView:
    """The records of one call (or one record without a call id), in storage order."""

    key: str
    records: list[RecordView]

    @property
    def call_id(self) -> str | None:
        value = self.records[0].get("call_id")
        return str(value) if value is not None else None

    @property
    def newest_pos(self) -> int:
        return max(record.pos for record in self.records)

    @property
    def first(self) -> RecordView:
        return self.records[0]

    @property
    def closing(self) -> RecordView | None:
        closing = [record for record in self.records if record.kind == "decision" and record.closes]
        return closing[-1] if closing else None

    @property
    def time(self) -> str:
        return str(self.first.get("time") or "")

    @property
    def event(self) -> str:
        return str(self.first.get("event") or self.first.kind)

    @property
    def target(self) -> str | None:
        """The tool, resource uri or prompt the call named (None for other methods, and in records before it)."""
        targets = [str(r.get("target")) for r in self.records if r.get("target") is not None]
        return targets[0] if targets else None

    @property
    def server(self) -> str | None:
        servers = [str(r.get("server")) for r in self.records if r.get("server")]
        return servers[0] if servers else None

    @property
    def principal(self) -> str | None:
        return principal_text(self.first.get("principal"))

    @property
    def trace_id(self) -> str | None:
        return next((record.trace_id for record in self.records if record.trace_id), None)

    @property
    def verdict(self) -> str:
        closing = self.closing
        if closing is None:
            return "open" if self.first.kind == "decision" else self.first.kind
        decision, status = closing.get("decision"), closing.get("status")
        if decision == "allow":
            return "allowed"
        if decision == "deny":
            return "refused" if status == "refused" else "denied"
        return "cancelled" if status == "cancelled" else "error"

    @property
    def status(self) -> str:
        closing = self.closing
        return str(closing.get("status")) if closing is not None else ""

    @property
    def decided_by(self) -> str:
        """Who ended the call: the interceptors that blocked or failed it, the gateway, the upstream, the client."""
        closing = self.closing
        if closing is None or closing.get("decision") == "allow":
            return ""
        names = [e.name for e in closing.entries if e.outcome in ("blocked", "failed") and e.mode != "audit"]
        if names:
            return ", ".join(dict.fromkeys(names))
        status = closing.get("status")
        return {"refused": "gateway", "upstream_error": "upstream", "cancelled": "client"}.get(str(status), "")

    @property
    def flagged_by(self) -> list[str]:
        """Interceptors in audit mode that would have blocked or changed the call."""
        names = [e.name for r in self.records for e in r.entries if e.mode == "audit" and e.acted]
        return list(dict.fromkeys(names))

    @property
    def latency_ms(self) -> float | None:
        """From the request record to the record that closed the call (the upstream's time and both chains)."""
        closing = self.closing
        if closing is None or closing is self.first:
            return None
        start, end = _parse_time(self.first.get("time")), _parse_time(closing.get("time"))
        return None if start is None or end is None else (end - start).total_seconds() * 1000

    @property
    def chain_ms(self) -> float | None:
        """The longest interceptor run of the closing chain: for a call with one record, all there is to time."""
        closing = self.closing or self.first
        durations = [e.duration_ms for e in closing.entries if e.duration_ms is not None]
        return max(durations) if durations else None

    def acted(self, guard: str) -> bool:
        return any(e.name == guard and e.acted for r in self.records for e in r.entries)

    def text(self) -> str:
        return "\n".join(record.raw.decode(errors="replace") for record in self.records).casefold()


def principal_text(principal: object) -> str | None:
    if not isinstance(principal, Mapping):
        return None
    kind, ident = principal.get("type"), principal.get("id")
    return f"{kind}:{ident}" if kind else str(ident)


def group_calls(records: Iterable[RecordView]) -> dict[str, CallView]:
    """Records by call (a record without a call id stands alone), each call's records in storage order."""
    calls: dict[str, CallView] = {}
    for record in sorted(records, key=lambda r: r.pos):
        call_id = record.get("call_id")
        key = str(call_id) if call_id is not None else record.id
        calls.setdefault(key, CallView(key, [])).records.append(record)
    return calls


@dataclass(frozen=True)
class Filters:
    verdict: str = ""
    guard: str = ""
    upstream: str = ""
    principal: str = ""
    text: str = ""
    target: str = ""

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> Filters:
        def value(name: str) -> str:
            return str(query.get(name) or "").strip()[:_MAX_FILTER]

        verdict = value("verdict")
        return cls(
            verdict=verdict if verdict in VERDICTS else "",
            guard=value("guard"),
            upstream=value("upstream"),
            principal=value("principal"),
            text=value("q"),
            target=value("target"),
        )

    @property
    def active(self) -> bool:
        return any((self.verdict, self.guard, self.upstream, self.principal, self.text, self.target))

    def query(self) -> dict[str, str]:
        pairs = {"verdict": self.verdict, "guard": self.guard, "upstream": self.upstream}
        pairs.update(target=self.target, principal=self.principal, q=self.text)
        return {name: value for name, value in pairs.items() if value}

    def matches(self, call: CallView) -> bool:
        if self.verdict and call.verdict != self.verdict:
            return False
        if self.guard and not call.acted(self.guard):
            return False
        if self.upstream and (call.server or "") != self.upstream:
            return False
        if self.target and self.target.casefold() not in (call.target or "").casefold():
            return False
        if self.principal and self.principal.casefold() not in (call.principal or "").casefold():
            return False
        return not self.text or self.text.casefold() in call.text()


def names_seen(calls: Sequence[CallView]) -> tuple[list[str], list[str], list[str]]:
    """The upstreams, guards and targets named by these calls, for the filters' suggestions."""
    upstreams = sorted({call.server for call in calls if call.server})
    guards = sorted({e.name for call in calls for r in call.records for e in r.entries})
    targets = sorted({call.target for call in calls if call.target})
    return upstreams, guards, targets


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
