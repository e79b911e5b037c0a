"""A varied audit trail written through the real writer, for the web view's tests.

Calls: allowed with a mutation (its new value holds `<script>`), denied by a guard, a shadow mutation, drift,
a refusal (of a tool whose name holds `<script>`), an upstream error, one still open (a `resources/read`), and
`fillers` plain allowed calls. The tool calls name `echo` as their target.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio

from mcp_interceptors.audit import DecisionInput, Store, load_or_create_key, open_audit_writer

SCRIPT = "<script>window.__pwned = 1</script>"
START = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@dataclass
class Trail:
    store: Path
    key_file: Path
    calls: dict[str, str] = field(default_factory=dict)  # label -> call id
    records: dict[str, list[str]] = field(default_factory=dict)  # label -> record ids, in order


def payload(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"method": "tools/call", "params": {"name": tool, "arguments": arguments}}


class _Writer:
    def __init__(self, writer: Any, trail: Trail, tag: str) -> None:
        self.writer, self.trail, self.tick, self.tag = writer, trail, 0, tag

    async def leg(self, label: str, call_id: str, **fields: Any) -> None:
        self.tick += 1
        call_id = call_id.replace("c-", f"c{self.tag}-", 1)
        defaults: dict[str, Any] = {
            "timestamp": START + timedelta(seconds=self.tick),
            "event": "tools/call",
            "phase": "request",
            "direction": "sending",
            "decision": "allow",
            "status": "success",
            "session_id": "s-1",
            "principal": {"type": "user", "id": "alice"},
            "server": "notes",
            "call_id": call_id,
            "target": "echo",
            "intent_payload": payload("echo", text="hi"),
            "executed_payload": payload("echo", text="hi"),
        }
        defaults.update(fields)
        receipt = await self.writer.append(DecisionInput(**defaults))
        self.trail.calls[label] = call_id
        self.trail.records.setdefault(label, []).append(receipt.id)


def _validator(name: str, valid: bool = True, mode: str = "active", message: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": name, "type": "validation", "mode": mode, "valid": valid, "duration_ms": 0.2}
    if not valid:
        entry["severity"] = "error"
        entry["messages"] = [{"message": message or f"{name} says no", "path": "$.params", "severity": "error"}]
    return entry


def _mutator(name: str, before: Any, after: Any, mode: str = "active") -> dict[str, Any]:
    return {
        "name": name,
        "type": "mutation",
        "mode": mode,
        "modified": before != after,
        "payload_before": before,
        "payload_after": after,
        "duration_ms": 0.4,
    }


async def write_trail(store: Store, trail: Trail, fillers: int = 0, tag: str = "") -> None:
    """Write the calls (their ids are `c<tag>-<label>`), then close `store`."""
    try:
        await _write(store, trail, fillers, tag)
    finally:
        store.close()


async def _write(store: Store, trail: Trail, fillers: int, tag: str) -> None:
    key = load_or_create_key(trail.key_file)
    async with open_audit_writer(store, key) as writer:
        w = _Writer(writer, trail, tag)
        raw, scrubbed = payload("echo", text=f"{SCRIPT} AKIA..."), payload("echo", text=f"{SCRIPT} [REDACTED]")
        mutation = [_mutator("secrets", raw, scrubbed), _validator("tool-policy")]
        await w.leg("mutated", "c-mutated", interceptors=mutation, intent_payload=scrubbed, executed_payload=scrubbed)
        await w.leg("mutated", "c-mutated", phase="response", direction="receiving", intent_payload={"ok": 1})
        denial = [_validator("tool-policy", valid=False, message=f"tool {SCRIPT} is not allowed")]
        await w.leg(
            "denied",
            "c-denied",
            decision="deny",
            status="validation_failed",
            interceptors=denial,
            principal={"type": "user", "id": "bob"},
            intent_payload=None,
            executed_payload=None,
        )
        shadow = [_mutator("pii", payload("echo", text="ana@example.com"), payload("echo", text="[EMAIL]"), "audit")]
        await w.leg(
            "shadow", "c-shadow", server="archive", principal={"type": "service", "id": "ci"}, interceptors=shadow
        )
        await w.leg("shadow", "c-shadow", phase="response", direction="receiving", server="archive")
        await w.leg(
            "drift", "c-drift", server="archive", executed_payload=payload("echo", text="changed after approval")
        )
        await w.leg("drift", "c-drift", phase="response", direction="receiving", server="archive")
        refusal = {"code": -32602, "message": f"Unknown tool: {SCRIPT}", "reason": "not advertised to this session"}
        await w.leg(
            "refused",
            "c-refused",
            decision="deny",
            status="refused",
            error=refusal,
            intent_payload=None,
            target=f"no_such_{SCRIPT}",
        )
        await w.leg("upstream", "c-upstream")
        upstream_error = {"code": -32603, "message": "upstream went away"}
        await w.leg(
            "upstream",
            "c-upstream",
            phase="response",
            direction="receiving",
            decision="error",
            status="upstream_error",
            error=upstream_error,
            intent_payload=None,
            executed_payload=None,
        )
        await w.leg("open", "c-open", event="resources/read", target="notes://groceries")
        for index in range(fillers):
            await w.leg(f"filler-{index}", f"c-filler-{index:04d}")
            await w.leg(f"filler-{index}", f"c-filler-{index:04d}", phase="response", direction="receiving")


def build_trail(folder: Path, store: Store | None = None, fillers: int = 0) -> Trail:
    from mcp_interceptors.audit import SqliteStore

    trail = Trail(folder / "audit.db", folder / "audit-key")
    anyio.run(write_trail, store if store is not None else SqliteStore(trail.store), trail, fillers)
    return trail
