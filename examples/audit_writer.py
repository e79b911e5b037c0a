"""The audit writer as the gateway uses it: one call's request and response records, then an offline check.

python examples/audit_writer.py [FOLDER]     (default: a temporary folder)

Writes `audit.db` and `audit-key` into FOLDER, prints each record's receipt and the call's compound
receipt, and verifies the store with the key's public half as the trust anchor (docs/audit.md).
"""

from __future__ import annotations

import json
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import anyio

from mcp_interceptors.audit import AuditWriter, DecisionInput, load_or_create_key, open_store, verify_source

CALL = {"method": "tools/call", "params": {"name": "save_note", "arguments": {"text": "hi"}}}
RESULT = {"content": [{"type": "text", "text": "saved"}], "isError": False}


def decision(phase: Literal["request", "response"], payload: object) -> DecisionInput:
    """One chain's outcome in plain values, as the gateway fills it in from its chain result."""
    return DecisionInput(
        timestamp=datetime.now(UTC),
        event="tools/call",
        phase=phase,
        direction="sending" if phase == "request" else "receiving",
        decision="allow",
        status="success",
        session_id="session-1",
        server="notes",
        call_id="call-1",  # links the request and response records of one call
        intent_payload=payload,  # what the chain approved
        executed_payload=payload,  # what was actually dispatched
    )


async def main(folder: Path) -> None:
    store = open_store(folder / "audit.db")  # or "postgresql://user@host/db"
    key = load_or_create_key(folder / "audit-key")  # default: ~/.mcp-interceptors/audit-key
    writer = AuditWriter(store, key)
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)  # opens this process's segment (durably) first
        request = await writer.append(decision("request", CALL))  # returns once committed
        pending = await writer.submit(decision("response", RESULT))  # queued: overlap it with other work
        response = await pending.wait()  # durable from here on: now the client may see the reply
        await writer.aclose()  # flush and stop; cancelling the task group flushes too
    print("request record:", request.id, "signed by key", request.key_id)
    print("response record:", response.id)
    assert response.compound is not None  # the response closed the call
    print("compound receipt:", json.dumps(response.compound.to_dict(), indent=2))
    report = verify_source(store, key.trusted())  # key.trusted(): this key and every retired one
    store.close()
    print(f"verified: {report.ok}, {report.records} records in {report.segments} segments, {report.receipts} receipts")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        anyio.run(main, Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory(prefix="audit-example-") as folder:
            anyio.run(main, Path(folder))
