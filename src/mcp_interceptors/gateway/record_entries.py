"""Pure: the parts of an audit record built from a chain result: per-interceptor entries, and an error's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp import MCPError

from mcp_interceptors.executor import ChainResult
from mcp_interceptors.protocol.results import MutationResult, ValidationResult

#: Per escalating interceptor, the audit entry of the approval it was given or refused.
Approvals = Mapping[str, Mapping[str, Any]]


def error_entry(exc: MCPError, *data_keys: str) -> dict[str, Any]:
    """The `error` of a record for `exc`: its code and message, and those of `data_keys` whose value in its
    `data` is a string (only the gateway's own words: an upstream's data may not be recordable)."""
    error: dict[str, Any] = {"code": exc.error.code, "message": exc.error.message}
    data = exc.error.data
    if isinstance(data, Mapping):
        error.update({key: data[key] for key in data_keys if isinstance(data.get(key), str)})
    return error


def interceptor_entries(result: ChainResult, payload_in: Any, approvals: Approvals | None = None) -> list[Any]:
    """Per-interceptor audit entries; mutators carry the payload before and after (the record keeps a diff), and
    an escalating validator the `approval` it got (who was asked, the answer and when)."""
    entries: list[dict[str, Any]] = []
    current = payload_in
    for item in result.results:
        entry: dict[str, Any] = {
            "name": item.interceptor,
            "type": item.type,
            "mode": item.mode or "active",
            "duration_ms": item.duration_ms,
        }
        if isinstance(item, ValidationResult):
            entry["valid"] = item.valid
            entry["severity"] = item.severity
            if item.messages:
                entry["messages"] = [m.to_wire() for m in item.messages]
            approval = approvals.get(item.interceptor or "") if approvals else None
            if approval is not None:
                entry["approval"] = dict(approval)
        elif isinstance(item, MutationResult):
            entry["modified"] = item.modified
            entry["payload_before"] = current
            entry["payload_after"] = item.payload
            if item.mode != "audit" and item.modified:
                current = item.payload
        entries.append(entry)
    for failure in result.failures:
        entries.append(
            {
                "name": failure.interceptor,
                "mode": failure.mode,
                "fail_open": failure.fail_open,
                "error": {"code": failure.code, "reason": failure.reason, "timeout": failure.timeout},
            }
        )
    return entries
