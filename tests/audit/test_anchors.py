"""Anchors: `audit head` lines and receipts clients kept catch what the chain alone cannot, a cut tail."""

from __future__ import annotations

import io
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest

from mcp_interceptors.audit import AuditReceipt, DecisionInput, SigningKey, SqliteStore, open_audit_writer
from mcp_interceptors.audit.anchors import RECEIPT_META_KEY, AnchorError, read_anchors
from mcp_interceptors.audit.commands import EXIT_ERROR, EXIT_FAILED, EXIT_OK, head, verify
from mcp_interceptors.gateway import recording
from mcp_interceptors.gateway.recording import receipt_meta

Make = Callable[..., DecisionInput]


@pytest.fixture
def calls(sqlite_store: SqliteStore, key: SigningKey, make_decision: Make) -> list[list[AuditReceipt]]:
    """Three calls, each a request and a response; the receipts of each call's records, in order."""

    async def write() -> list[list[AuditReceipt]]:
        done = []
        async with open_audit_writer(sqlite_store, key) as writer:
            for index in range(3):
                request = await writer.append(make_decision(call_id=f"c{index}"))
                response = await writer.append(
                    make_decision(phase="response", direction="receiving", call_id=f"c{index}")
                )
                done.append([request, response])
        return done

    return anyio.run(write)


def _key_path(tmp_path: Path) -> Path:
    return tmp_path / "keys" / "audit-key"


def _cut_after(store: SqliteStore, record_id: str) -> None:
    """Delete every record stored after `record_id`, and their receipts: a clean cut of the tail."""
    with sqlite3.connect(store.path) as conn:
        (pos,) = conn.execute("SELECT pos FROM audit_records WHERE id = ?", (record_id,)).fetchone()
        cut = [row[0] for row in conn.execute("SELECT id FROM audit_records WHERE pos > ?", (pos,))]
        conn.executemany("DELETE FROM audit_records WHERE id = ?", [(i,) for i in cut])
        conn.executemany("DELETE FROM audit_receipts WHERE id = ?", [(i,) for i in cut])


def _verify(store: SqliteStore, tmp_path: Path, *anchor_files: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = verify(store.path, out, key_path=_key_path(tmp_path), anchor_files=anchor_files, err=err)
    return code, out.getvalue(), err.getvalue()


def test_a_cut_tail_verifies_alone_and_fails_against_the_head_kept_before_the_cut(
    sqlite_store: SqliteStore, calls: list[list[AuditReceipt]], tmp_path: Path
) -> None:
    heads = io.StringIO()
    assert head(sqlite_store.path, heads) == EXIT_OK
    (line,) = [orjson.loads(text) for text in heads.getvalue().splitlines()]
    last = calls[-1][-1]
    assert line == {
        "id": last.id,
        "hash": last.hash,
        "signature": last.signature,
        "keyId": last.key_id,
        "time": line["time"],
    }
    anchor_file = tmp_path / "heads.jsonl"
    anchor_file.write_text(heads.getvalue())
    assert _verify(sqlite_store, tmp_path, anchor_file)[:2] == (
        EXIT_OK,
        "OK: 7 records in 1 segments, 3 receipts, 1 anchored records\n",
    )

    _cut_after(sqlite_store, calls[0][-1].id)  # the last two calls are gone, receipts and all
    assert _verify(sqlite_store, tmp_path)[0] == EXIT_OK  # the limit anchors exist for
    code, out, _ = _verify(sqlite_store, tmp_path, anchor_file)
    assert code == EXIT_FAILED
    assert out.splitlines()[1] == (
        f"first bad record: {last.id}: deleted: {anchor_file} line 1 names it, but it is missing "
        "(its segment ends at seq 2): the trail was cut or the record deleted"
    )


def test_a_receipt_a_client_kept_names_its_deleted_call(
    sqlite_store: SqliteStore, calls: list[list[AuditReceipt]], tmp_path: Path
) -> None:
    kept = calls[1]
    meta = {RECEIPT_META_KEY: receipt_meta(kept)}  # as the reply's `_meta` carried it
    anchor_file = tmp_path / "kept.json"
    anchor_file.write_bytes(orjson.dumps(meta, option=orjson.OPT_INDENT_2))
    assert _verify(sqlite_store, tmp_path, anchor_file)[0] == EXIT_OK

    _cut_after(sqlite_store, calls[0][-1].id)
    code, out, _ = _verify(sqlite_store, tmp_path, anchor_file)
    assert code == EXIT_FAILED
    bad = [line for line in out.splitlines() if kept[0].id in line or kept[1].id in line]
    assert any(f"first bad record: {kept[0].id}: deleted: {anchor_file} names it" in line for line in bad)
    assert any(f"{kept[1].id}: deleted" in line for line in bad)


def test_an_edited_record_fails_its_anchor_and_an_altered_anchor_is_refused(
    sqlite_store: SqliteStore, calls: list[list[AuditReceipt]], tmp_path: Path
) -> None:
    record = calls[0][0]
    unsigned = tmp_path / "unsigned.jsonl"
    unsigned.write_text(orjson.dumps({"id": record.id, "hash": "0" * 64}).decode() + "\n")
    code, out, _ = _verify(sqlite_store, tmp_path, unsigned)
    assert code == EXIT_FAILED
    assert (
        out.splitlines()[1]
        == f"first bad record: {record.id}: edited: its hash differs from the one {unsigned} line 1 holds"
    )

    # A signed anchor must be the trail's own word: a hash changed under its signature is not evidence.
    forged = tmp_path / "forged.jsonl"
    line = {"id": record.id, "hash": "0" * 64, "signature": record.signature, "keyId": record.key_id}
    forged.write_text(orjson.dumps(line).decode() + "\n")
    code, _, err = _verify(sqlite_store, tmp_path, forged)
    assert code == EXIT_ERROR
    assert f"{forged} line 1: the signature of record {record.id} does not verify with key {record.key_id}" in err

    receipt: dict[str, Any] = receipt_meta(calls[2])["receipt"]  # type: ignore[index]
    receipt["call_id"] = "someone-else"
    altered = tmp_path / "altered.jsonl"
    altered.write_text(orjson.dumps(receipt).decode() + "\n")
    code, _, err = _verify(sqlite_store, tmp_path, altered)
    assert code == EXIT_ERROR
    assert f"{altered} line 1: the receipt of call someone-else does not match its hash" in err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "names no records"),
        ('{"id": "abc-1", "hash": "aa"}\nnot json\n', "line 2: not JSON"),
        ('{"hash": "aa"}\n', "line 1: no record id"),
        ('{"id": "abc-1"}\n', "line 1: record abc-1 has no hash"),
        ("[1]", "line 1 item 1: expected a JSON object, got int"),
    ],
)
def test_unreadable_anchor_files_are_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "anchors.jsonl"
    path.write_text(text)
    with pytest.raises(AnchorError, match=message):
        read_anchors(path)


def test_the_receipt_meta_key_is_the_gateways() -> None:
    assert recording.RECEIPT_META_KEY == RECEIPT_META_KEY


def test_cli_head_then_verify_with_the_anchor(
    sqlite_store: SqliteStore, calls: list[list[AuditReceipt]], tmp_path: Path
) -> None:
    def audit(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "mcp_interceptors", "audit", *args, "--store", str(sqlite_store.path)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

    heads = audit("head")
    assert heads.returncode == 0, heads.stderr
    anchor_file = tmp_path / "heads.jsonl"
    anchor_file.write_text(heads.stdout)
    key = ["--key-file", str(_key_path(tmp_path))]
    assert audit("verify", "--anchor", str(anchor_file), *key).returncode == 0
    _cut_after(sqlite_store, calls[1][-1].id)
    cut = audit("verify", "--anchor", str(anchor_file), *key)
    assert cut.returncode == 1
    assert f"first bad record: {calls[2][-1].id}: deleted" in cut.stdout
    missing = audit("verify", "--anchor", str(tmp_path / "absent.jsonl"), *key)
    assert missing.returncode == 2
    assert missing.stderr.startswith("mcp-interceptors audit: error: cannot read anchor file")
