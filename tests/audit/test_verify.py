"""Verification names the first bad record and why: edited, deleted, reordered, forged, broken link."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from mcp_interceptors.audit import (
    DecisionInput,
    JsonlSource,
    Problem,
    PublicKey,
    SigningKey,
    SqliteStore,
    VerifyReport,
    load_or_create_key,
    open_audit_writer,
    rotate_key,
    verify_records,
    verify_source,
)
from mcp_interceptors.audit.records import hash_of
from mcp_interceptors.audit.signing import endorse, generate_key

pytestmark = pytest.mark.anyio

Make = Callable[..., DecisionInput]


class Tamper:
    """Direct SQL on the audit database, as someone with write access to the file would do."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)

    def rows(self, table: str = "audit_records") -> list[tuple[int, str, dict[str, Any]]]:
        column = "record" if table == "audit_records" else "receipt"
        return [
            (pos, record_id, orjson.loads(text))
            for pos, record_id, text in self.conn.execute(f"SELECT pos, id, {column} FROM {table} ORDER BY pos")
        ]

    def record(self, record_id: str) -> dict[str, Any]:
        (text,) = self.conn.execute("SELECT record FROM audit_records WHERE id = ?", (record_id,)).fetchone()
        loaded: dict[str, Any] = orjson.loads(text)
        return loaded

    def put(self, record_id: str, record: dict[str, Any], table: str = "audit_records") -> None:
        column = "record" if table == "audit_records" else "receipt"
        self.conn.execute(
            f"UPDATE {table} SET {column} = ?, hash = ? WHERE id = ?",
            (orjson.dumps(record).decode(), record["hash"], record_id),
        )

    def delete(self, record_id: str, table: str = "audit_records") -> None:
        self.conn.execute(f"DELETE FROM {table} WHERE id = ?", (record_id,))


def reseal(record: dict[str, Any], key: SigningKey) -> dict[str, Any]:
    """Recompute the hash of an edited record and sign it, as a forger holding `key` would."""
    digest = bytes.fromhex(hash_of(record))
    return {**record, "hash": digest.hex(), "signature": key.sign(digest)}


@pytest.fixture
async def trail(sqlite_store: SqliteStore, key: SigningKey, make_decision: Make) -> dict[int, str]:
    """Ten decision records in one segment: five calls, each a request then a response. Returns seq → id."""
    ids = {}
    async with open_audit_writer(sqlite_store, key) as writer:
        for call in range(5):
            request = await writer.append(make_decision(call_id=f"c{call}"))
            response = await writer.append(make_decision(phase="response", direction="receiving", call_id=f"c{call}"))
            ids[2 * call + 1], ids[2 * call + 2] = request.id, response.id
    ids[0] = f"{writer.segment_id}-0"
    return ids


def _check(store: SqliteStore, trusted: dict[str, PublicKey] | None) -> VerifyReport:
    return verify_source(store, trusted)


async def test_untouched_trail_verifies(sqlite_store: SqliteStore, key: SigningKey, trail: dict[int, str]) -> None:
    report = _check(sqlite_store, key.trusted())
    assert report.ok
    assert (report.records, report.segments, report.receipts) == (11, 1, 5)
    assert report.notes == ()


async def test_without_trust_anchors_genesis_keys_are_trusted_on_first_use(
    sqlite_store: SqliteStore, trail: dict[int, str]
) -> None:
    report = _check(sqlite_store, None)
    assert report.ok
    assert "trusted on first use" in report.notes[0]


async def test_open_calls_are_a_note_not_a_finding(
    sqlite_store: SqliteStore, key: SigningKey, make_decision: Make
) -> None:
    """A call whose request record no closing record follows is in flight, or was left open by a gateway that
    ended without closing it: verification names it in a note (the trail is intact), oldest first."""
    async with open_audit_writer(sqlite_store, key) as writer:
        for call in ("open-1", "closed", "open-2"):
            await writer.append(make_decision(call_id=call))
        await writer.append(make_decision(phase="response", direction="receiving", call_id="closed"))
        await writer.append(make_decision(decision="deny", status="refused", call_id="denied"))
        opened = [f"{writer.segment_id}-1", f"{writer.segment_id}-3"]
    report = _check(sqlite_store, key.trusted())
    assert report.ok
    assert report.notes == (
        "open calls, with a request record and no record closing them: 2 (in flight as the trail was read, or left "
        f"open by a gateway that ended without closing them, killed say): open-1 (request {opened[0]}), "
        f"open-2 (request {opened[1]})",
    )


async def test_edited_field_is_named(sqlite_store: SqliteStore, key: SigningKey, trail: dict[int, str]) -> None:
    tamper = Tamper(sqlite_store.path)
    record = tamper.record(trail[4])
    record["body"]["decision"] = "deny"
    tamper.put(trail[4], record)
    first = _check(sqlite_store, key.trusted()).first
    assert first is not None
    assert (first.record_id, first.problem) == (trail[4], Problem.EDITED)
    assert first.detail == "content does not match its hash"


@pytest.mark.parametrize("edit", ["rename", "drop"])
async def test_an_edited_or_dropped_target_is_named(
    sqlite_store: SqliteStore, key: SigningKey, make_decision: Make, edit: str
) -> None:
    """`target` is signed like every other field: renaming the tool, or taking the key out (to pass the record
    off as one written before it existed), is an edit."""
    async with open_audit_writer(sqlite_store, key) as writer:
        written = await writer.append(make_decision(call_id="c1", target="post_note"))
    tamper = Tamper(sqlite_store.path)
    record = tamper.record(written.id)
    if edit == "rename":
        record["body"]["target"] = "read_note"
    else:
        del record["body"]["target"]
    tamper.put(written.id, record)
    first = _check(sqlite_store, key.trusted()).first
    assert first is not None and (first.record_id, first.problem) == (written.id, Problem.EDITED)


async def test_a_key_written_twice_is_edited_though_the_last_value_hashes_right(
    sqlite_store: SqliteStore, key: SigningKey, trail: dict[int, str], tmp_path: Path
) -> None:
    """A reader that keeps the first of two equal keys would show `deny` where the signed record says
    `allow`: such text is not I-JSON (RFC 8785's input) and is named, in the store and in an export."""
    tamper = Tamper(sqlite_store.path)
    for record_id, table, column in ((trail[3], "audit_records", "record"), (trail[6], "audit_receipts", "receipt")):
        (text,) = tamper.conn.execute(f"SELECT {column} FROM {table} WHERE id = ?", (record_id,)).fetchone()
        field = '"decision":"allow"' if table == "audit_records" else '"call_id":"c2"'
        forged = field.replace("allow", "deny").replace("c2", "c0")
        assert field in text
        tamper.conn.execute(
            f"UPDATE {table} SET {column} = ? WHERE id = ?", (text.replace(field, forged + "," + field, 1), record_id)
        )
    export = tmp_path / "audit.jsonl"
    export.write_bytes(b"".join(raw + b"\n" for _, raw in sqlite_store.iter_snapshot()))
    for source in (sqlite_store, JsonlSource(export)):
        report = verify_source(source, key.trusted())
        found = [(f.record_id, f.problem, f.detail) for f in report.findings]
        assert found == [
            (trail[3], Problem.EDITED, "the key 'decision' appears twice in one object"),
            (f"receipt:{trail[6]}", Problem.EDITED, "the key 'call_id' appears twice in one object"),
        ]


async def test_edited_and_rehashed_record_is_forged(
    sqlite_store: SqliteStore, key: SigningKey, trail: dict[int, str]
) -> None:
    tamper = Tamper(sqlite_store.path)
    record = tamper.record(trail[4])
    record["body"]["status"] = "success"
    record["body"]["server"] = "elsewhere"
    record["hash"] = hash_of(record)  # a consistent hash, but the old signature
    tamper.put(trail[4], record)
    report = _check(sqlite_store, key.trusted())
    assert report.first is not None
    assert (report.first.record_id, report.first.problem) == (trail[4], Problem.FORGED)
    assert report.first.detail == "signature does not verify"
    # The next record still points at the original hash.
    assert (report.findings[1].record_id, report.findings[1].problem) == (trail[5], Problem.BROKEN_LINK)


async def test_deleted_record_is_named_at_the_gap(
    sqlite_store: SqliteStore, key: SigningKey, trail: dict[int, str]
) -> None:
    Tamper(sqlite_store.path).delete(trail[4])
    report = _check(sqlite_store, key.trusted())
    assert report.first is not None
    assert (report.first.record_id, report.first.problem) == (trail[5], Problem.DELETED)
    assert report.first.detail == "seq 4 missing before it"
    # The receipt of call c1 referred to the deleted response record.
    assert any(f.record_id == f"receipt:{trail[4]}" and f.problem is Problem.DELETED for f in report.findings)


async def test_swapped_records_are_reordered(sqlite_store: SqliteStore, key: SigningKey, trail: dict[int, str]) -> None:
    tamper = Tamper(sqlite_store.path)
    fourth, fifth = tamper.record(trail[4]), tamper.record(trail[5])
    tamper.put(trail[4], fifth)  # the row at position 4 now holds record 5, and vice versa
    tamper.put(trail[5], fourth)
    report = _check(sqlite_store, key.trusted())
    assert report.first is not None
    assert (report.first.record_id, report.first.problem) == (trail[5], Problem.REORDERED)
    # the JSON moved without its index columns, which the row after it no longer matches
    assert [(f.record_id, f.problem) for f in report.findings[1:]] == [(trail[4], Problem.EDITED)]


async def test_record_resigned_with_another_key_is_forged(
    sqlite_store: SqliteStore, key: SigningKey, trail: dict[int, str], tmp_path: Path
) -> None:
    attacker = load_or_create_key(tmp_path / "attacker-key")
    tamper = Tamper(sqlite_store.path)
    record = tamper.record(trail[6])
    record["body"]["decision"] = "allow"
    record["body"]["principal"] = {"type": "user", "id": "admin"}
    tamper.put(trail[6], reseal(record, attacker))
    first = _check(sqlite_store, key.trusted()).first
    assert first is not None
    assert (first.record_id, first.problem, first.detail) == (trail[6], Problem.FORGED, "signature does not verify")


async def test_record_claiming_the_forgers_key_id_is_forged(
    sqlite_store: SqliteStore, key: SigningKey, trail: dict[int, str], tmp_path: Path
) -> None:
    attacker = load_or_create_key(tmp_path / "attacker-key")
    tamper = Tamper(sqlite_store.path)
    record = tamper.record(trail[6])
    record["key_id"] = attacker.key_id
    tamper.put(trail[6], reseal(record, attacker))
    first = _check(sqlite_store, key.trusted()).first
    assert first is not None
    assert (first.record_id, first.problem) == (trail[6], Problem.FORGED)
    assert first.detail == f"key id {attacker.key_id} is not its segment's key {key.key_id}"


async def test_segment_signed_by_an_unknown_key_is_forged(
    sqlite_store: SqliteStore, key: SigningKey, trail: dict[int, str], tmp_path: Path, make_decision: Make
) -> None:
    attacker = load_or_create_key(tmp_path / "attacker-key")
    async with open_audit_writer(sqlite_store, attacker) as writer:
        await writer.append(make_decision())
    report = _check(sqlite_store, key.trusted())
    assert report.first is not None
    assert (report.first.record_id, report.first.problem) == (f"{writer.segment_id}-0", Problem.FORGED)
    assert "neither trusted nor endorsed" in report.first.detail


async def test_deleted_and_edited_receipts(sqlite_store: SqliteStore, key: SigningKey, trail: dict[int, str]) -> None:
    tamper = Tamper(sqlite_store.path)
    tamper.delete(trail[2], table="audit_receipts")
    receipt = next(doc for _, rid, doc in tamper.rows("audit_receipts") if rid == trail[4])
    receipt["response"]["time"] = "2020-01-01T00:00:00.000000Z"
    tamper.put(trail[4], receipt, table="audit_receipts")
    report = _check(sqlite_store, key.trusted())
    found = [(f.record_id, f.problem) for f in report.findings]
    assert found == [(trail[2], Problem.DELETED), (f"receipt:{trail[4]}", Problem.EDITED)]
    assert report.findings[0].detail == "the compound receipt of call c0 is missing"


async def test_jsonl_export_verifies_offline_and_catches_reordered_lines(
    sqlite_store: SqliteStore, key: SigningKey, trail: dict[int, str], tmp_path: Path
) -> None:
    lines = [raw for _, raw in sqlite_store.iter_snapshot()]
    export = tmp_path / "audit.jsonl"
    export.write_bytes(b"\n".join(lines) + b"\n")
    trusted = {key.key_id: key.public}  # a third party needs only the public key
    assert verify_source(JsonlSource(export), trusted).ok
    lines[7], lines[8] = lines[8], lines[7]
    export.write_bytes(b"\n".join(lines) + b"\n")
    first = verify_source(JsonlSource(export), trusted).first
    assert first is not None
    assert (first.record_id, first.problem) == (trail[8], Problem.REORDERED)


# -- rotation -----------------------------------------------------------------------------------------


async def _rotated_trail(store: SqliteStore, key_path: Path, make_decision: Make) -> tuple[SigningKey, SigningKey]:
    old = load_or_create_key(key_path)
    async with open_audit_writer(store, old) as writer:
        for _ in range(3):
            await writer.append(make_decision())
    new = rotate_key(key_path)
    async with open_audit_writer(store, new) as writer:
        for _ in range(3):
            await writer.append(make_decision())
    return old, new


def _headers(store: SqliteStore) -> list[dict[str, Any]]:
    return [r for _, raw in store.iter_records() if (r := orjson.loads(raw))["kind"] == "segment"]


async def test_rotation_links_the_new_segment_to_the_old_one(
    sqlite_store: SqliteStore, tmp_path: Path, make_decision: Make
) -> None:
    old, new = await _rotated_trail(sqlite_store, tmp_path / "audit-key", make_decision)
    first_header, second_header = _headers(sqlite_store)
    assert second_header["key_id"] == new.key_id
    assert second_header["body"]["prev_record"] == f"{first_header['segment_id']}-3"
    assert second_header["body"]["endorsement"]["key_id"] == old.key_id
    assert _check(sqlite_store, new.trusted()).ok
    # Trusting only the old key is enough: the new one is endorsed by it in the chain.
    assert _check(sqlite_store, {old.key_id: old.public}).ok
    # A restart with the same key continues the lineage without a new endorsement.
    async with open_audit_writer(sqlite_store, new) as writer:
        await writer.append(make_decision())
    third_header = _headers(sqlite_store)[2]
    assert third_header["body"]["endorsement"] is None
    assert third_header["body"]["prev_record"] == f"{second_header['segment_id']}-3"
    assert _check(sqlite_store, {old.key_id: old.public}).ok


async def test_rotation_link_to_a_deleted_record_fails(
    sqlite_store: SqliteStore, tmp_path: Path, make_decision: Make
) -> None:
    _, new = await _rotated_trail(sqlite_store, tmp_path / "audit-key", make_decision)
    first_header, second_header = _headers(sqlite_store)
    Tamper(sqlite_store.path).delete(f"{first_header['segment_id']}-3")  # the old segment's tail
    first = _check(sqlite_store, new.trusted()).first
    assert first is not None
    assert (first.record_id, first.problem) == (second_header["id"], Problem.DELETED)
    assert first.detail == f"links to record {first_header['segment_id']}-3, which is missing"


async def test_rotation_link_with_a_wrong_hash_fails(
    sqlite_store: SqliteStore, tmp_path: Path, make_decision: Make
) -> None:
    _, new = await _rotated_trail(sqlite_store, tmp_path / "audit-key", make_decision)
    header = _headers(sqlite_store)[1]
    header["prev_hash"] = "f" * 64
    Tamper(sqlite_store.path).put(header["id"], reseal(header, new))  # validly signed by the new key
    first = _check(sqlite_store, new.trusted()).first
    assert first is not None
    assert (first.record_id, first.problem) == (header["id"], Problem.BROKEN_LINK)


async def test_rotation_endorsement_not_signed_by_the_old_key_fails(
    sqlite_store: SqliteStore, tmp_path: Path, make_decision: Make
) -> None:
    old = load_or_create_key(tmp_path / "audit-key")
    async with open_audit_writer(sqlite_store, old) as writer:
        await writer.append(make_decision())
    impostor, fresh = generate_key(), generate_key()
    endorsement = {**endorse(impostor, fresh.public, "2026-09-01T00:00:00.000000Z"), "key_id": old.key_id}
    endorsement["public_key"] = old.public.public_key
    claimed = SigningKey(
        private_key=fresh.private_key, created_at=fresh.created_at, endorsement=endorsement, retired=(old.public,)
    )
    async with open_audit_writer(sqlite_store, claimed) as writer:
        await writer.append(make_decision())
    header = _headers(sqlite_store)[1]
    first = _check(sqlite_store, {old.key_id: old.public}).first
    assert first is not None
    assert (first.record_id, first.problem) == (header["id"], Problem.FORGED)
    assert first.detail == f"rotation endorsement by key {old.key_id} does not verify"


async def test_verify_reads_one_snapshot_while_the_writer_appends(
    sqlite_store: SqliteStore, key: SigningKey, make_decision: Make
) -> None:
    async with open_audit_writer(sqlite_store, key) as writer:
        await writer.append(make_decision(call_id="c1"))
        items = sqlite_store.iter_snapshot()
        first = next(items)  # the read snapshot is fixed from here on
        # A response and its receipt committed now must not appear as a receipt without its record.
        await writer.append(make_decision(phase="response", direction="receiving", call_id="c1"))
        report = verify_records([first, *items], key.trusted())
    assert report.ok, report.first
    assert (report.records, report.receipts) == (2, 0)
    assert verify_source(sqlite_store, key.trusted()).receipts == 1


async def test_a_record_claiming_a_huge_seq_is_a_gap_not_out_of_memory(
    sqlite_store: SqliteStore, key: SigningKey, trail: dict[int, str]
) -> None:
    """A forger can put any `seq` (and a matching `id`) in a record: the gap before it is reported in
    ranges, never listed number by number (a `seq` of 10**12 once ran `audit verify` out of memory)."""
    tamper = Tamper(sqlite_store.path)
    record = reseal(tamper.record(trail[3]), key)
    segment_id = record["segment_id"]
    huge = 10**12
    record.update(seq=huge, id=f"{segment_id}-{huge}")
    tamper.put(trail[3], reseal(record, key))
    report = _check(sqlite_store, key.trusted())
    first = report.first
    assert first is not None
    assert (first.record_id, first.problem) == (f"{segment_id}-{huge}", Problem.DELETED)
    assert first.detail == f"seq 3, 11-{huge - 1} missing before it"  # 4-10 follow it, stored late


async def test_a_gap_filled_late_in_the_middle_is_reported_in_ranges(
    sqlite_store: SqliteStore, key: SigningKey, trail: dict[int, str]
) -> None:
    """Records 2 and 4 stored after 5: 3 is still missing, so the gap reads `seq 3 missing`."""
    tamper = Tamper(sqlite_store.path)
    tamper.delete(trail[3])
    for seq in (2, 4):
        row = tamper.conn.execute("SELECT * FROM audit_records WHERE id = ?", (trail[seq],)).fetchone()
        tamper.delete(trail[seq])
        tamper.conn.execute(f"INSERT INTO audit_records VALUES (NULL{', ?' * (len(row) - 1)})", row[1:])
    first = _check(sqlite_store, key.trusted()).first
    assert first is not None
    assert (first.record_id, first.problem, first.detail) == (trail[5], Problem.DELETED, "seq 3 missing before it")


@pytest.mark.parametrize("prev_record", [["x"], {"id": "x"}, 5])
async def test_a_header_whose_prev_record_is_not_a_string_is_reported_not_a_traceback(
    sqlite_store: SqliteStore, key: SigningKey, trail: dict[int, str], prev_record: object
) -> None:
    tamper = Tamper(sqlite_store.path)
    header = tamper.record(trail[0])
    header["body"]["prev_record"] = prev_record
    tamper.put(trail[0], reseal(header, key))
    first = _check(sqlite_store, key.trusted()).first
    assert first is not None
    assert (first.record_id, first.problem) == (trail[0], Problem.EDITED)
    assert first.detail == "segment header's prev_record is not a record id"


async def test_a_restarted_writer_links_to_what_the_json_states_not_to_an_edited_index_column(
    sqlite_store: SqliteStore, key: SigningKey, make_decision: Make
) -> None:
    """The index columns are not verified, so the writer must not build on them: with the `hash` column
    of the last record edited, the next segment's link and the receipt closing a call opened before the
    restart once carried the edited hash, and verify blamed the new, innocent header for a broken link."""
    async with open_audit_writer(sqlite_store, key) as writer:
        request = await writer.append(make_decision(call_id="open"))
    Tamper(sqlite_store.path).conn.execute("UPDATE audit_records SET hash = ? WHERE id = ?", ("0" * 64, request.id))
    async with open_audit_writer(sqlite_store, key) as writer:
        response = await writer.append(make_decision(phase="response", direction="receiving", call_id="open"))
    assert response.compound is not None and response.compound.request is not None
    assert (response.compound.request.id, response.compound.request.hash) == (request.id, request.hash)
    header = _headers(sqlite_store)[-1]
    assert (header["body"]["prev_record"], header["prev_hash"]) == (request.id, request.hash)
    # verify names the edited row, and nothing the restarted writer wrote
    findings = [(f.record_id, f.detail) for f in _check(sqlite_store, key.trusted()).findings]
    assert findings == [(request.id, "its index column hash differs from its JSON")]


@pytest.mark.parametrize(
    ("column", "value"),
    [("id", "x-1"), ("segment_id", "x"), ("seq", 99), ("kind", "segment"), ("time", "1999-01-01T00:00:00.000000Z"),
     ("key_id", "0" * 16), ("call_id", "other"), ("phase", "response"), ("hash", "0" * 64)],
)  # fmt: skip
async def test_an_index_column_edited_without_the_json_is_named(
    sqlite_store: SqliteStore, key: SigningKey, trail: dict[int, str], column: str, value: object
) -> None:
    """The columns are what `audit show`, the writer and anyone's SQL find rows by: one that no longer
    says what the record's JSON says is an edit, named on its record (it once verified OK)."""
    Tamper(sqlite_store.path).conn.execute(f"UPDATE audit_records SET {column} = ? WHERE id = ?", (value, trail[3]))
    findings = [(f.record_id, f.problem, f.detail) for f in _check(sqlite_store, key.trusted()).findings]
    assert findings == [(trail[3], Problem.EDITED, f"its index column {column} differs from its JSON")]


async def test_receipt_index_columns_edited_without_the_json_are_named(
    sqlite_store: SqliteStore, key: SigningKey, trail: dict[int, str]
) -> None:
    Tamper(sqlite_store.path).conn.execute(
        "UPDATE audit_receipts SET call_id = 'other', hash = ? WHERE id = ?", ("0" * 64, trail[4])
    )
    findings = [(f.record_id, f.problem, f.detail) for f in _check(sqlite_store, key.trusted()).findings]
    assert findings == [(f"receipt:{trail[4]}", Problem.EDITED, "its index columns call_id, hash differ from its JSON")]


# -- compound receipts: derived from their records (format 2), signed before (format 1) --------------------

#: A trail written by the writer of 2026-11-30 (receipts of format 1, each with its own signature): call c1
#: allowed and answered, call c2 denied. Its signing key's public half:
SIGNED_RECEIPTS_TRAIL = Path(__file__).parent.parent / "data" / "audit" / "trail-v1-signed-receipts.jsonl"
SIGNED_RECEIPTS_KEY = PublicKey.from_b64("gTRKY6zvGwt6W3kI-AKNUwSz-llhBZGedkh6h-nNcZA")


def _receipt(tamper: Tamper, receipt_id: str) -> dict[str, Any]:
    return next(doc for _, rid, doc in tamper.rows("audit_receipts") if rid == receipt_id)


def _rehashed(receipt: dict[str, Any]) -> dict[str, Any]:
    """A receipt edited by someone who recomputed its hash, as anyone can: it has no signature."""
    return {**receipt, "hash": hash_of(receipt)}


async def test_receipts_are_derived_unsigned_and_name_both_records(
    sqlite_store: SqliteStore, key: SigningKey, trail: dict[int, str]
) -> None:
    receipt = _receipt(Tamper(sqlite_store.path), trail[2])
    assert receipt["v"] == 2
    assert "signature" not in receipt
    request, response = Tamper(sqlite_store.path).record(trail[1]), Tamper(sqlite_store.path).record(trail[2])
    assert receipt["request"] == {"id": trail[1], "hash": request["hash"], "time": request["body"]["time"]}
    assert receipt["response"] == {"id": trail[2], "hash": response["hash"], "time": response["body"]["time"]}
    assert (receipt["call_id"], receipt["key_id"]) == ("c0", key.key_id)
    assert hash_of(receipt) == receipt["hash"]


@pytest.mark.parametrize(
    ("edit", "detail"),
    [
        (lambda r, t: {**r, "call_id": "c9"}, "its call_id or key_id is not its closing record's"),
        (lambda r, t: {**r, "key_id": "0" * 16}, "its call_id or key_id is not its closing record's"),
        (lambda r, t: {**r, "request": None, "response": None}, "its response side is not its closing record"),
        (lambda r, t: {**r, "request": {**r["request"], "time": "2020-01-01T00:00:00.000000Z"}}, "its request side"),
        (lambda r, t: {**r, "request": r["response"]}, "its request side is not a request record of its call"),
        (lambda r, t: {**r, "request": None}, "its request side is null, but request record {} is its call's"),
        (lambda r, t: {**r, "id": t[3]}, "record {} closes no call"),
    ],
)
async def test_a_receipt_edited_and_rehashed_is_named_edited(
    sqlite_store: SqliteStore,
    key: SigningKey,
    trail: dict[int, str],
    edit: Callable[[dict[str, Any], dict[int, str]], dict[str, Any]],
    detail: str,
) -> None:
    tamper = Tamper(sqlite_store.path)
    edited = _rehashed(edit(_receipt(tamper, trail[4]), trail))
    tamper.put(trail[4], edited, table="audit_receipts")
    tamper.conn.execute(
        "UPDATE audit_receipts SET call_id = json_extract(receipt, '$.call_id'),"
        " key_id = json_extract(receipt, '$.key_id') WHERE id = ?",
        (trail[4],),
    )
    report = _check(sqlite_store, key.trusted())
    (finding,) = [f for f in report.findings if f.record_id == f"receipt:{edited['id']}"]
    assert finding.problem is Problem.EDITED
    assert finding.detail.startswith(detail.format(trail[3]))


async def test_a_denials_receipt_names_the_denied_request_and_no_response(
    sqlite_store: SqliteStore, key: SigningKey, make_decision: Make
) -> None:
    async with open_audit_writer(sqlite_store, key) as writer:
        denied = await writer.append(make_decision(call_id="d", decision="deny", status="validation_failed"))
    assert denied.compound is not None
    assert denied.compound.request is not None and denied.compound.request.id == denied.id
    assert denied.compound.response is None
    assert _check(sqlite_store, key.trusted()).ok
    tamper = Tamper(sqlite_store.path)
    receipt = _receipt(tamper, denied.id)
    tamper.put(denied.id, _rehashed({**receipt, "response": receipt["request"]}), table="audit_receipts")
    report = _check(sqlite_store, key.trusted())
    assert [(f.record_id, f.problem, f.detail) for f in report.findings] == [
        (f"receipt:{denied.id}", Problem.EDITED, "its response side is not null")
    ]


def test_a_trail_with_signed_receipts_still_verifies() -> None:
    """Written before records named their `target`, too: none of its records has the key."""
    report = verify_source(JsonlSource(SIGNED_RECEIPTS_TRAIL), {SIGNED_RECEIPTS_KEY.key_id: SIGNED_RECEIPTS_KEY})
    assert report.ok, report.findings
    assert (report.records, report.receipts) == (4, 2)
    bodies = [orjson.loads(line)["body"] for line in SIGNED_RECEIPTS_TRAIL.read_bytes().splitlines()[:4]]
    assert [body for body in bodies if "target" in body] == []


def test_a_signed_receipt_edited_and_rehashed_is_forged(tmp_path: Path) -> None:
    lines = SIGNED_RECEIPTS_TRAIL.read_bytes().splitlines()
    receipt = orjson.loads(lines[-2])
    assert (receipt["v"], receipt["call_id"]) == (1, "c1") and "signature" in receipt
    lines[-2] = orjson.dumps(_rehashed({**receipt, "call_id": "c9"}))
    edited = tmp_path / "edited.jsonl"
    edited.write_bytes(b"\n".join(lines) + b"\n")
    report = verify_source(JsonlSource(edited), {SIGNED_RECEIPTS_KEY.key_id: SIGNED_RECEIPTS_KEY})
    assert [(f.record_id, f.problem, f.detail) for f in report.findings] == [
        (f"receipt:{receipt['id']}", Problem.FORGED, "signature does not verify")
    ]
