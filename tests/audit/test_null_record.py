"""A damaged SQLite file can hold a NULL record despite the schema's NOT NULL (a byte flip in a record's
header, found by fuzzing `audit verify`): verification names the record instead of raising."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def test_audit_verify_names_a_null_record_of_a_damaged_store_never_a_traceback(tmp_path: Path) -> None:
    from mcp_interceptors.audit.sqlite import SqliteStore

    store = tmp_path / "audit.db"
    SqliteStore(store).close()
    with closing(sqlite3.connect(store)) as db, db:
        db.execute(
            "INSERT INTO audit_records (id, segment_id, seq, kind, time, key_id, hash, record) "
            "VALUES ('s-0', 's', 0, 'segment', 't', 'k', 'h', '{}')"
        )
        db.execute("PRAGMA writable_schema = ON")
        db.execute(
            "UPDATE sqlite_master SET sql = replace(sql, 'record TEXT NOT NULL', 'record TEXT') "
            "WHERE name = 'audit_records'"
        )
    with closing(sqlite3.connect(store)) as db, db:
        db.execute("UPDATE audit_records SET record = NULL")
    argv = [sys.executable, "-m", "mcp_interceptors", "audit", "verify", "--store", str(store)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "FAILED" in done.stdout, done.stdout
