"""audit-log: a sink that records every event as one JSON line (time, event, phase, session, server,
principal, trace id, payload size and SHA-256, and optionally the payload) to a file or stderr.

Sinks are opt-in in chains (`Chain(sinks=True)`, gateway `chain.sinks: true`), never block and never
change the payload; this one is fail-open. Signed, hash-chained storage is the audit package's job.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from mcp_interceptors.guards._config import EVENT_OR_WILDCARD, GuardSchema, SettingsCache
from mcp_interceptors.host import InterceptorHost, Invocation
from mcp_interceptors.protocol.invoke import now_iso
from mcp_interceptors.protocol.results import SinkResult

SCHEMA = GuardSchema(
    {
        "path": {"type": "string", "default": "-", "description": "JSON-lines file to append to; `-` is stderr."},
        "include_payload": {"type": "boolean", "default": False, "description": "Payloads may hold secrets."},
        "max_payload_bytes": {"type": "integer", "minimum": 0, "default": 65_536},
        "events": {"type": "array", "items": EVENT_OR_WILDCARD, "minItems": 1, "default": ["*"]},
    },
    build_only=["path", "events"],
)
_OPTIONS = orjson.OPT_NON_STR_KEYS


@dataclass(frozen=True, slots=True)
class _Settings:
    include_payload: bool
    max_payload_bytes: int


def _compile(raw: Mapping[str, Any]) -> _Settings:
    return _Settings(raw["include_payload"], raw["max_payload_bytes"])


def audit_record(inv: Invocation, settings: _Settings) -> dict[str, Any]:
    """The JSON-line record of one invocation."""
    body = orjson.dumps(inv.payload, default=str, option=_OPTIONS)
    context = inv.context
    record: dict[str, Any] = {"ts": now_iso(), "event": inv.event, "phase": inv.phase}
    if context is not None:
        if context.session_id:
            record["sessionId"] = context.session_id
        if context.server:
            record["server"] = context.server
        if context.trace_id:
            record["traceId"] = context.trace_id
        if context.principal is not None:
            record["principal"] = context.principal.to_wire()
    record["payloadBytes"] = len(body)
    record["payloadSha256"] = hashlib.sha256(body).hexdigest()
    if settings.include_payload:
        if len(body) <= settings.max_payload_bytes:
            record["payload"] = orjson.Fragment(body)
        else:
            record["payloadTruncated"] = True
    return record


class AuditLog:
    def __init__(self, settings: SettingsCache[_Settings], path: str) -> None:
        self.settings = settings
        self.path = path

    def write(self, line: bytes) -> None:
        if self.path == "-":
            sys.stderr.write(line.decode("utf-8"))
            sys.stderr.flush()
            return
        # Opened per record: no handle to leak, and rotated files are picked up at once.
        with open(self.path, "ab") as file:
            file.write(line)

    async def record(self, inv: Invocation) -> SinkResult:
        record = audit_record(inv, self.settings.for_config(inv.config))
        self.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
        return SinkResult(recorded=True, metrics={"payloadBytes": float(record["payloadBytes"])})


def build(name: str, config: Mapping[str, Any]) -> InterceptorHost:
    """A host with one fail-open sink on every configured event, both phases."""
    settings = SettingsCache(name, SCHEMA, config, _compile)
    log = AuditLog(settings, settings.raw["path"])
    host = InterceptorHost(name, copy_payloads=False)
    host.sink(
        name,
        events=settings.raw["events"],
        phase="both",
        fail_open=True,
        description="Records every event as a JSON line.",
        config_schema=SCHEMA.advertised,
    )(log.record)
    return host
