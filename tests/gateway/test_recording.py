"""`gateway/recording.py`: the request leg's intent and executed payloads, and the shortcut that hashes them once."""

from __future__ import annotations

import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from mcp import MCPError

from mcp_interceptors import Chain
from mcp_interceptors.audit import AuditWriteError, SqliteStore, load_or_create_key, open_audit_writer, verify_source
from mcp_interceptors.gateway import open_inputs
from mcp_interceptors.gateway.config import parse_config
from mcp_interceptors.gateway.gateway import Gateway
from mcp_interceptors.gateway.recording import CallRecord, Leg, OpenInput, new_call_id
from mcp_interceptors.protocol.invoke import InvocationContext
from mcp_interceptors.protocol.results import same_json

pytestmark = pytest.mark.anyio


def test_call_ids_are_uuid7_so_a_store_indexes_them_in_order() -> None:
    before = time.time_ns() // 1_000_000
    ids = [new_call_id() for _ in range(2000)]
    after = time.time_ns() // 1_000_000
    parsed = [uuid.UUID(call_id) for call_id in ids]
    assert all(len(call_id) == 32 and call_id == u.hex for call_id, u in zip(ids, parsed, strict=True))
    assert {u.version for u in parsed} == {7} and {u.variant for u in parsed} == {uuid.RFC_4122}
    stamps = [int(call_id[:12], 16) for call_id in ids]
    assert before <= stamps[0] and stamps[-1] <= after and stamps == sorted(stamps)  # time first: in order
    assert len(set(ids)) == len(ids)
    assert len({call_id[13:] for call_id in ids}) == len(ids)  # and random after the time


ARGUMENTS = {"text": "hi", "n": 1, "ratio": 0.5, "tags": ["a", {"b": None}]}


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (ARGUMENTS, ARGUMENTS, True),
        ({"params": ARGUMENTS, "name": "echo"}, {"name": "echo", "params": ARGUMENTS}, True),
        (orjson.loads(orjson.dumps(ARGUMENTS)), ARGUMENTS, True),  # equal leaves, no shared objects
        ({"flag": True}, {"flag": 1}, False),  # equal in Python, not in JSON
        ({"n": 1}, {"n": 1.0}, True),  # one JSON value (RFC 8785 writes both as 1)
        ({"a": [1, 2]}, {"a": [1, 2, 3]}, False),
        ({"a": "x"}, {"b": "x"}, False),
        (None, None, True),
        (float("nan"), float("nan"), False),
    ],
)
def test_same_json_is_json_equality(a: Any, b: Any, same: bool) -> None:
    assert same_json(a, b) is same


async def request_body(tmp_path: Path, executed: Any, intent: Any) -> dict[str, Any]:
    """Record one dispatched request and read its record body back from the store."""
    store = SqliteStore(tmp_path / "audit.db")
    key = load_or_create_key(tmp_path / "audit-key")
    try:
        with anyio.fail_after(10):
            async with open_audit_writer(store, key) as writer:
                record = CallRecord(writer, InvocationContext(session_id="s", server="echo"))
                record.approved_request(Leg("tools/call", "request", None, intent))
                await record.dispatched(executed=executed, intent=intent)
                (receipt,) = await record.settle()
        raw = store.get_record(receipt.id)
    finally:
        store.close()
    assert raw is not None
    body: dict[str, Any] = orjson.loads(raw)["body"]
    return body


async def test_dispatched_equal_payloads_get_one_hash_and_no_drift(tmp_path: Path) -> None:
    params = {"name": "echo", "arguments": ARGUMENTS}
    sent, approved = {"method": "tools/call", "params": dict(params)}, {"method": "tools/call", "params": dict(params)}
    body = await request_body(tmp_path, sent, approved)
    assert body["intent_hash"] == body["executed_hash"] is not None
    assert body["drift"] is False


async def test_dispatched_changed_payload_is_drift(tmp_path: Path) -> None:
    intent = {"method": "tools/call", "params": {"name": "echo", "arguments": ARGUMENTS}}
    executed = {"method": "tools/call", "params": {"name": "echo", "arguments": {**ARGUMENTS, "text": "changed"}}}
    body = await request_body(tmp_path, executed, intent)
    assert body["intent_hash"] != body["executed_hash"]
    assert body["drift"] is True


async def test_a_result_with_no_canonical_form_fails_the_leg_naming_the_field(tmp_path: Path) -> None:
    """An integer past the doubles in an upstream's result cannot be recorded: -32603 naming the field, not
    an OverflowError (the client's own request gets -32602, tests/e2e/test_audit_call_ends.py)."""
    store = SqliteStore(tmp_path / "audit.db")
    key = load_or_create_key(tmp_path / "audit-key")
    result = {"structuredContent": {"total": 10**400}}
    try:
        with anyio.fail_after(10):
            async with open_audit_writer(store, key) as writer:
                record = CallRecord(writer, InvocationContext(session_id="s", server="echo"))
                with pytest.raises(MCPError) as failed:
                    await record.answered(Leg("tools/call", "response", None, result), result)
    finally:
        store.close()
    assert failed.value.code == -32603
    assert failed.value.data is not None
    assert failed.value.data["field"] == "structuredContent.total"
    assert (failed.value.data["event"], failed.value.data["phase"]) == ("tools/call", "response")


class RefusingStore(SqliteStore):
    """Writes the segment header, then refuses every batch as a store would: quoting its SQL and the record."""

    refuse = False

    def append(self, records: Any, receipts: Any) -> None:
        if self.refuse:
            raise sqlite3.OperationalError(f"disk I/O error [SQL: INSERT INTO audit_records] [parameters: {records}]")
        super().append(records, receipts)


async def test_an_unwritten_record_fails_the_call_naming_the_leg_not_the_store_internals(tmp_path: Path) -> None:
    """docs/audit.md: a record that cannot be written fails the call with -32603. The client's error names the
    leg (`data.reason: audit_write_failed`, event, phase); the store's error (its SQL, the record's JSON with
    session and principal) stays in the gateway's log."""
    store = RefusingStore(tmp_path / "audit.db")
    key = load_or_create_key(tmp_path / "audit-key")
    request = {"method": "tools/call", "params": {"name": "echo", "arguments": ARGUMENTS}}
    try:
        with anyio.fail_after(10):
            async with open_audit_writer(store, key) as writer:
                store.refuse = True
                record = CallRecord(writer, InvocationContext(session_id="secret-session", server="echo"))
                record.approved_request(Leg("tools/call", "request", None, request))
                await record.dispatched(executed=request, intent=request)
                with pytest.raises(AuditWriteError) as failed:
                    await record.settle()
    finally:
        store.close()
    error = failed.value
    assert error.code == -32603
    assert error.data == {
        "reason": "audit_write_failed",
        "event": "tools/call",
        "phase": "request",
        "call_id": record.call_id,
    }
    assert "SQL" not in error.message and "secret-session" not in error.message, error.message
    assert error.message == "tools/call request: the audit record was not written"


async def test_an_input_request_pushed_out_of_those_kept_is_closed_as_never_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway keeps a bounded number of input requests awaiting a 2026-07-28 client's answer: the oldest,
    forgotten, gets a `cancelled` record (its call was left open); the newer one stays open, linkable."""
    monkeypatch.setattr(open_inputs, "_OPEN_INPUTS_KEPT", 1)
    store = SqliteStore(tmp_path / "audit.db")
    key = load_or_create_key(tmp_path / "audit-key")
    config = parse_config({"upstreams": {"a": {"command": "python", "args": ["server.py"]}}})
    request = {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}}
    try:
        with anyio.fail_after(10):
            async with open_audit_writer(store, key) as writer:
                gateway = Gateway(config, Chain(role="server"), audit_writer=writer)
                context = InvocationContext(session_id="s", server="a")
                records = [CallRecord(writer, context) for _ in range(2)]
                for index, record in enumerate(records):
                    record.approved_request(Leg("sampling/createMessage", "request", None, request))
                    await record.dispatched(executed=request, intent=request)
                    opened = OpenInput("sampling/createMessage", record.call_id, context)
                    await gateway.rounds.open_inputs.open("s", "state", f"q{index}", opened)
                assert gateway.rounds.open_inputs.close("s", "state", "q0") is None
                assert gateway.rounds.open_inputs.close("other", "state", "q1") is None  # another session's
                assert gateway.rounds.open_inputs.close("s", "state", "q1") is not None
        bodies = [orjson.loads(raw)["body"] for _, raw in store.iter_records()]
        report = verify_source(store, key.trusted())
    finally:
        store.close()
    closing = [body for body in bodies if body.get("phase") == "response"]
    assert [(body["call_id"], body["decision"], body["status"]) for body in closing] == [
        (records[0].call_id, "error", "cancelled")
    ]
    assert closing[0]["error"] == {
        "code": -32800,
        "message": "never answered: 1 newer input requests were awaiting answers",
        "reason": "input_unanswered",
    }
    assert report.ok
    assert records[1].call_id in report.notes[0]  # the one still awaiting its answer is open
