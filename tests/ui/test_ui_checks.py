"""The detail page's signature and chain status is `audit verify`'s own: the excerpt of a call finds, on that
call's records, what verifying the whole trail finds on them, whatever was done to the store."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import anyio
import orjson
import pytest
from ui_trail import Trail, build_trail, write_trail

from mcp_interceptors.audit import SqliteStore, load_key, rotate_key, verify_source
from mcp_interceptors.ui.checks import check_call
from mcp_interceptors.ui.pages import one_call
from mcp_interceptors.ui.reader import AuditReader

Tamper = Callable[[sqlite3.Connection, Trail], None]


def _edit(db: sqlite3.Connection, trail: Trail) -> None:
    record_id = trail.records["denied"][0]
    (raw,) = db.execute("SELECT record FROM audit_records WHERE id = ?", (record_id,)).fetchone()
    record = orjson.loads(raw)
    record["body"]["status"] = "success"
    db.execute("UPDATE audit_records SET record = ? WHERE id = ?", (orjson.dumps(record).decode(), record_id))


def _resign(db: sqlite3.Connection, trail: Trail) -> None:
    """A record carrying another record's signature: its hash is right, the signature is not its own."""
    target, donor = trail.records["drift"][0], trail.records["drift"][1]
    (raw,) = db.execute("SELECT record FROM audit_records WHERE id = ?", (target,)).fetchone()
    (donor_raw,) = db.execute("SELECT record FROM audit_records WHERE id = ?", (donor,)).fetchone()
    record = orjson.loads(raw)
    record["signature"] = orjson.loads(donor_raw)["signature"]
    db.execute("UPDATE audit_records SET record = ? WHERE id = ?", (orjson.dumps(record).decode(), target))


def _delete_request(db: sqlite3.Connection, trail: Trail) -> None:
    db.execute("DELETE FROM audit_records WHERE id = ?", (trail.records["shadow"][0],))


def _delete_receipt(db: sqlite3.Connection, trail: Trail) -> None:
    db.execute("DELETE FROM audit_receipts WHERE id = ?", (trail.records["upstream"][1],))


def _edit_column(db: sqlite3.Connection, trail: Trail) -> None:
    db.execute("UPDATE audit_records SET phase = 'response' WHERE id = ?", (trail.records["mutated"][0],))


def _break_json(db: sqlite3.Connection, trail: Trail) -> None:
    db.execute("UPDATE audit_records SET record = '{not json' WHERE id = ?", (trail.records["refused"][0],))


def _findings_by_call(trail: Trail, reader: AuditReader) -> dict[str, set[tuple[str, str]]]:
    found = {}
    trusted = load_key(trail.key_file).trusted()
    for label, call_id in trail.calls.items():
        located = one_call(reader, call_id)
        assert located is not None, label
        _, rows = located
        check = check_call(reader, rows, trusted)
        names = {(f.record_id, f.problem.value) for r in rows for f in check.of(str(r.columns[0]))}
        names |= {(f"receipt:{k}", f.problem.value) for k, fs in check.receipts.items() for f in fs}
        found[label] = names | {(f.record_id, f.problem.value) for f in check.around}
    return found


def test_an_untouched_trail_verifies_call_by_call(trail: Trail) -> None:
    reader = AuditReader(trail.store)
    try:
        assert all(not found for found in _findings_by_call(trail, reader).values())
    finally:
        reader.close()


@pytest.mark.parametrize("tamper", [_edit, _resign, _delete_request, _delete_receipt, _edit_column, _break_json])
def test_what_audit_verify_finds_on_a_calls_records_its_detail_page_finds(trail: Trail, tamper: Tamper) -> None:
    with sqlite3.connect(trail.store) as db:
        tamper(db, trail)
    store = SqliteStore(trail.store, create=False)
    try:
        whole = verify_source(store, load_key(trail.key_file).trusted())
    finally:
        store.close()
    assert whole.findings, "the tampering must be one audit verify sees"
    reader = AuditReader(trail.store)
    try:
        per_call = _findings_by_call(trail, reader)
    finally:
        reader.close()
    record_ids = {rid: label for label, ids in trail.records.items() for rid in ids}
    for finding in whole.findings:
        name = finding.record_id.removeprefix("receipt:")
        if name in record_ids:  # a finding on a record of a call: that call's page shows it, same problem
            assert (finding.record_id, finding.problem.value) in per_call[record_ids[name]], finding
    touched = [label for label, found in per_call.items() if found]
    assert touched, "some call's page must show the tampering"


def test_a_restarted_and_rotated_key_lineage_is_followed_to_the_trusted_key(tmp_path: Path) -> None:
    trail = build_trail(tmp_path)
    old_keys = load_key(trail.key_file).trusted()
    rotate_key(trail.key_file)
    later = Trail(trail.store, trail.key_file)
    anyio.run(write_trail, SqliteStore(trail.store), later, 0, "2")  # a new segment, signed by the new key
    reader = AuditReader(trail.store)
    try:
        _, rows = one_call(reader, later.records["denied"][0]) or (None, [])
        check = check_call(reader, rows, old_keys)  # trusting only the key before the rotation
        assert check.ok, (check.by_record, check.around)
        assert check.records_read > len(rows) + 2  # both segments' headers and the link between them
    finally:
        reader.close()


def test_a_segment_under_a_key_nobody_trusts_shows_its_records_invalid(tmp_path: Path) -> None:
    trail = build_trail(tmp_path)
    trusted = load_key(trail.key_file).trusted()
    forged = Trail(trail.store, tmp_path / "forger-key")
    anyio.run(write_trail, SqliteStore(trail.store), forged, 0, "2")
    reader = AuditReader(trail.store)
    try:
        _, rows = one_call(reader, forged.records["denied"][0]) or (None, [])
        check = check_call(reader, rows, trusted)
        (finding,) = check.of(forged.records["denied"][0])
        assert finding.problem.value == "forged" and "neither trusted nor endorsed" in finding.detail
        _, genuine = one_call(reader, trail.records["denied"][0]) or (None, [])
        assert check_call(reader, genuine, trusted).ok
    finally:
        reader.close()
