"""The functions behind `audit tail/show/verify/export/keys`, on a real SQLite store."""

from __future__ import annotations

import io
import socket
import sqlite3
import threading
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from helpers import WatchedOutput

from mcp_interceptors.audit import DecisionInput, SigningKey, SqliteStore, commands, open_audit_writer
from mcp_interceptors.audit.commands import (
    EXIT_ERROR,
    EXIT_FAILED,
    EXIT_OK,
    Follower,
    decided_by,
    export_jsonl,
    keys,
    show,
    tail,
    verify,
)

Make = Callable[..., DecisionInput]


@pytest.fixture
def trail(sqlite_store: SqliteStore, key: SigningKey, make_decision: Make) -> list[str]:
    """A segment header, then a request and a drifted response for call c1, then a denial. Returns ids."""

    async def write() -> list[str]:
        async with open_audit_writer(sqlite_store, key) as writer:
            request = await writer.append(make_decision(call_id="c1"))
            response = await writer.append(
                make_decision(
                    phase="response",
                    direction="receiving",
                    call_id="c1",
                    intent_payload={"content": "approved"},
                    executed_payload={"content": "sent"},
                )
            )
            denied = await writer.append(
                make_decision(
                    decision="deny", status="validation_failed", call_id="c2", intent_payload=None, target="post\x1b[2J"
                )
            )
        return [f"{writer.segment_id}-0", request.id, response.id, denied.id]

    return anyio.run(write)


def _key_path(key_dir: Path) -> Path:
    return key_dir / "keys" / "audit-key"


def test_tail_prints_the_last_records(sqlite_store: SqliteStore, trail: list[str]) -> None:
    out = io.StringIO()
    assert tail(sqlite_store.path, out, limit=2) == EXIT_OK
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0] == (
        f"2026-09-01T10:00:00.000000Z  {trail[2]}  tools/call response receiving  allow/success  "
        "server=notes session=s-1 call=c1  DRIFT"
    )
    # The record names its tool; a control character a client put in it is escaped, not sent to the terminal.
    assert f"{trail[3]}  tools/call request sending  deny/validation_failed  target=post\\x1b[2J server=" in lines[1]


def test_tail_json_and_segment_lines(sqlite_store: SqliteStore, key: SigningKey, trail: list[str]) -> None:
    out = io.StringIO()
    assert tail(sqlite_store.path, out, limit=10, as_json=True) == EXIT_OK
    assert [orjson.loads(line)["id"] for line in out.getvalue().splitlines()] == trail
    out = io.StringIO()
    tail(sqlite_store.path, out, limit=10)
    header_line = out.getvalue().splitlines()[0]
    assert header_line.endswith(f"{trail[0]}  segment start  key={key.key_id} prev=genesis")


def test_tail_follow_prints_new_records(
    sqlite_store: SqliteStore, key: SigningKey, trail: list[str], make_decision: Make
) -> None:
    stop = threading.Event()
    out = WatchedOutput()

    def follow() -> int:
        return tail(sqlite_store.path, out, limit=1, follow=True, poll_interval=0.01, should_stop=stop.is_set)

    async def wait_for(needle: str) -> None:
        with anyio.fail_after(10):
            assert await anyio.to_thread.run_sync(out.wait_for, needle, 10, abandon_on_cancel=True)

    async def scenario() -> str:
        async with open_audit_writer(sqlite_store, key) as writer, anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, follow)
            try:
                await wait_for("segment start")  # tail printed its last record and is now following
                receipt = await writer.append(make_decision(call_id="late"))
                await wait_for("call=late")
            finally:
                stop.set()
        return receipt.id

    late_id = anyio.run(scenario)
    printed = out.getvalue().splitlines()
    # The last record before following is the new writer's segment header, which continues the trail.
    assert printed[0].endswith(f"segment start  key={key.key_id} prev={trail[3]}")
    assert len(printed) == 2
    assert f"  {late_id}  " in printed[1] and "call=late" in printed[1]


def test_show_prints_the_record_and_its_receipt(sqlite_store: SqliteStore, trail: list[str]) -> None:
    out = io.StringIO()
    assert show(sqlite_store.path, trail[2], out) == EXIT_OK
    document = orjson.loads(out.getvalue())
    assert document["record"]["id"] == trail[2]
    assert document["record"]["body"]["drift"] is True
    assert document["receipt"]["request"]["id"] == trail[1]
    assert document["receipt"]["response"]["id"] == trail[2]
    out = io.StringIO()
    assert show(sqlite_store.path, trail[1], out) == EXIT_OK
    assert "receipt" not in orjson.loads(out.getvalue())


def test_show_unknown_id_and_missing_database(sqlite_store: SqliteStore, trail: list[str], tmp_path: Path) -> None:
    err = io.StringIO()
    assert show(sqlite_store.path, "nope-1", io.StringIO(), err=err) == EXIT_ERROR
    assert err.getvalue() == "error: no audit record with id nope-1\n"
    err = io.StringIO()
    assert show(tmp_path / "missing.db", "x", io.StringIO(), err=err) == EXIT_ERROR
    assert "does not exist" in err.getvalue()
    assert not (tmp_path / "missing.db").exists()


def test_verify_with_a_missing_trust_file_names_it(sqlite_store: SqliteStore, trail: list[str], tmp_path: Path) -> None:
    err = io.StringIO()
    missing = tmp_path / "anchors.jsonl"
    assert verify(sqlite_store.path, io.StringIO(), trusted_keys=[missing], err=err) == EXIT_ERROR
    assert err.getvalue() == f"error: cannot read trust file {missing}: No such file or directory\n"


def test_unreachable_postgres_is_one_line_without_the_password() -> None:
    pytest.importorskip("psycopg")
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    err = io.StringIO()
    assert tail(f"postgresql://audit:s3cret@127.0.0.1:{port}/db", io.StringIO(), err=err) == EXIT_ERROR
    message = err.getvalue()
    assert message.startswith(f"error: cannot open the audit database postgresql://audit:***@127.0.0.1:{port}/db: ")
    assert message.count("\n") == 1 and "s3cret" not in message and "sqlalche.me" not in message


def test_commands_refuse_files_that_are_not_audit_databases(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_text("not sqlite at all " * 100)
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    for target, message in ((junk, "cannot open the audit database"), (empty, "is not an audit database")):
        err = io.StringIO()
        assert tail(target, io.StringIO(), err=err) == EXIT_ERROR
        assert message in err.getvalue()
        err = io.StringIO()
        assert verify(target, io.StringIO(), key_path=None, err=err) == EXIT_ERROR
        assert message in err.getvalue()


def test_verify_passes_then_names_the_edited_record(
    sqlite_store: SqliteStore, trail: list[str], tmp_path: Path
) -> None:
    key_path = _key_path(tmp_path)
    out = io.StringIO()
    assert verify(sqlite_store.path, out, key_path=key_path) == EXIT_OK
    assert out.getvalue() == "OK: 4 records in 1 segments, 2 receipts\n"
    conn = sqlite3.connect(sqlite_store.path)
    with conn:
        conn.execute(
            "UPDATE audit_records SET record = replace(record, '\"deny\"', '\"allow\"') WHERE id = ?", (trail[3],)
        )
    out = io.StringIO()
    assert verify(sqlite_store.path, out, key_path=key_path) == EXIT_FAILED
    assert out.getvalue().splitlines()[:2] == [
        "FAILED: 4 records in 1 segments, 2 receipts",
        f"first bad record: {trail[3]}: edited: content does not match its hash",
    ]


def test_verify_without_a_key_file_trusts_on_first_use(
    sqlite_store: SqliteStore, trail: list[str], tmp_path: Path
) -> None:
    out = io.StringIO()
    assert verify(sqlite_store.path, out, key_path=tmp_path / "absent") == EXIT_OK
    assert out.getvalue().startswith("note: no trusted keys given")


def test_export_jsonl_then_verify_the_export_with_exported_keys(
    sqlite_store: SqliteStore, trail: list[str], tmp_path: Path
) -> None:
    out = io.StringIO()
    assert export_jsonl(sqlite_store.path, out) == EXIT_OK
    lines = [orjson.loads(line) for line in out.getvalue().splitlines()]
    assert [line["id"] for line in lines[:4]] == trail
    assert [line["kind"] for line in lines[4:]] == ["receipt", "receipt"]
    export = tmp_path / "audit.jsonl"
    export.write_text(out.getvalue())
    anchors = io.StringIO()
    assert keys(None, anchors, key_path=_key_path(tmp_path), export=True) == EXIT_OK
    anchor_file = tmp_path / "anchors.jsonl"
    anchor_file.write_text(anchors.getvalue())
    result = io.StringIO()
    assert verify(export, result, trusted_keys=[anchor_file], key_path=None) == EXIT_OK
    assert result.getvalue() == "OK: 4 records in 1 segments, 2 receipts\n"


def test_keys_lists_the_local_key_and_the_store_keys(
    sqlite_store: SqliteStore, key: SigningKey, trail: list[str], tmp_path: Path
) -> None:
    out = io.StringIO()
    assert keys(sqlite_store.path, out, key_path=_key_path(tmp_path)) == EXIT_OK
    assert out.getvalue().splitlines() == [
        f"key file: {_key_path(tmp_path)}",
        f"current key: {key.key_id} {key.public.public_key} (created {key.created_at})",
        f"store key: {key.key_id} {key.public.public_key} segments=1 (trusted)",
    ]


def test_keys_rotate_then_verify_still_passes(
    sqlite_store: SqliteStore, key: SigningKey, trail: list[str], tmp_path: Path, make_decision: Make
) -> None:
    out = io.StringIO()
    assert keys(None, out, key_path=_key_path(tmp_path), rotate=True) == EXIT_OK
    lines = out.getvalue().splitlines()
    assert lines[2].startswith(f"endorsed by: {key.key_id} at ")
    assert lines[3] == f"retired key: {key.key_id} {key.public.public_key}"
    assert verify(sqlite_store.path, io.StringIO(), key_path=_key_path(tmp_path)) == EXIT_OK


def test_keys_without_a_key_file(tmp_path: Path) -> None:
    err = io.StringIO()
    assert keys(None, io.StringIO(), key_path=tmp_path / "none", err=err) == EXIT_ERROR
    assert "does not exist" in err.getvalue()


def test_follower_watches_skipped_positions_until_they_fill_or_expire(
    sqlite_store: SqliteStore, trail: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    last = sqlite_store.tail(1)[0][0]
    template = sqlite_store.path

    def place(pos: int, seq: int) -> None:
        with closing(sqlite3.connect(template)) as conn, conn:
            conn.execute(
                "INSERT INTO audit_records (pos, id, segment_id, seq, kind, time, key_id, call_id, phase, hash, record)"
                " SELECT ?, 'late-' || ?, 'late', ?, kind, time, key_id, call_id, phase, hash, record"
                " FROM audit_records WHERE pos = ?",
                (pos, seq, seq, last),
            )

    follower = Follower(last)
    place(last + 3, 1)  # two positions skipped: numbered, not yet visible
    assert [pos for pos, _ in follower.poll(sqlite_store)] == [last + 3]
    assert set(follower.gaps) == {last + 1, last + 2}
    place(last + 1, 2)  # committed late
    assert [pos for pos, _ in follower.poll(sqlite_store)] == [last + 1]
    monkeypatch.setattr(commands, "GAP_WAIT_S", 0.0)  # the other one was rolled back: stop looking
    assert follower.poll(sqlite_store) == [] and follower.gaps == {}


def test_tail_show_and_keys_report_a_malformed_stored_record_with_exit_2(
    sqlite_store: SqliteStore, trail: list[str], tmp_path: Path
) -> None:
    """A record that is not a JSON object (or a header whose key is not an object) is an unreadable
    record: one error line and exit 2, as documented, not a traceback with exit 1 ("verification failed")."""
    conn = sqlite3.connect(sqlite_store.path)
    with conn:
        conn.execute("UPDATE audit_records SET record = '{bad' WHERE id = ?", (trail[1],))
        conn.execute("UPDATE audit_records SET record = '[1]' WHERE id = ?", (trail[0],))
        conn.execute("UPDATE audit_receipts SET receipt = 'nope' WHERE id = ?", (trail[3],))
    out, err = io.StringIO(), io.StringIO()
    assert tail(sqlite_store.path, out, err=err) == EXIT_ERROR
    lines = out.getvalue().splitlines()
    assert lines[:2] == ["?  #1  not a well-formed record", "?  #2  not a well-formed record"]
    assert trail[2] in lines[2] and trail[3] in lines[3]
    assert err.getvalue() == "error: some records are not well-formed JSON objects; `audit verify` names them\n"
    out = io.StringIO()  # verify names the records as tail numbers them (it said #0 and #1), receipts from 1
    assert verify(sqlite_store.path, out, key_path=_key_path(tmp_path)) == EXIT_FAILED
    assert "first bad record: #1: edited: not a well-formed audit record" in out.getvalue()
    assert "#2: edited: not a well-formed audit record" in out.getvalue()
    assert "receipt#2: edited: not a well-formed receipt" in out.getvalue()
    err = io.StringIO()
    assert show(sqlite_store.path, trail[1], io.StringIO(), err=err) == EXIT_ERROR
    assert err.getvalue() == f"error: audit record {trail[1]} is not a well-formed JSON object; run `audit verify`\n"
    err = io.StringIO()
    assert show(sqlite_store.path, trail[3], io.StringIO(), err=err) == EXIT_ERROR
    assert err.getvalue() == f"error: the receipt of {trail[3]} is not a well-formed JSON object; run `audit verify`\n"
    err = io.StringIO()
    assert keys(sqlite_store.path, io.StringIO(), key_path=_key_path(tmp_path), err=err) == EXIT_ERROR
    assert err.getvalue() == "error: 2 records have no readable key; `audit verify` names them\n"


def test_keys_for_a_missing_key_file_does_not_suggest_itself(tmp_path: Path) -> None:
    err = io.StringIO()
    assert keys(None, io.StringIO(), key_path=tmp_path / "none", err=err) == EXIT_ERROR
    assert "run `audit keys` to create it" not in err.getvalue()
    assert "the gateway creates it when it first starts with audit enabled" in err.getvalue()


def test_commands_report_a_store_they_cannot_read_with_exit_2(
    sqlite_store: SqliteStore, trail: list[str], tmp_path: Path
) -> None:
    """docs/audit.md: exit 2 when the store cannot be read, with one line naming it, never a traceback
    (exit 1 would read as "verification failed"). A damaged file, a database missing its receipts table,
    a directory, and a directory named like an export."""
    sqlite_store.close()
    with closing(sqlite3.connect(sqlite_store.path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    damaged = tmp_path / "damaged.db"
    data = sqlite_store.path.read_bytes()
    damaged.write_bytes(data[:page_size] + b"\xa5" * (len(data) - page_size))  # the schema page survives
    no_receipts = tmp_path / "no-receipts.db"
    no_receipts.write_bytes(data)
    with closing(sqlite3.connect(no_receipts)) as conn:
        conn.execute("DROP TABLE audit_receipts")
    folder = tmp_path / "folder.db"
    folder.mkdir()
    export_folder = tmp_path / "export.jsonl"
    export_folder.mkdir()
    cases = [
        (damaged, "cannot read the audit database"),
        (no_receipts, "is not an audit database (no audit_receipts table)"),
        (folder, "cannot open the audit database"),
    ]
    for target, message in cases:
        for name in ("verify", "export", "keys"):
            err = io.StringIO()
            if name == "verify":
                code = verify(target, io.StringIO(), key_path=None, err=err)
            elif name == "export":
                code = export_jsonl(target, io.StringIO(), err=err)
            else:
                code = keys(target, io.StringIO(), key_path=_key_path(tmp_path), err=err)
            assert code == EXIT_ERROR, (target, name)
            assert message in err.getvalue() and err.getvalue().count("\n") == 1, (target, name, err.getvalue())
    for target in (no_receipts, folder):
        err = io.StringIO()
        assert tail(target, io.StringIO(), err=err) == EXIT_ERROR
        err = io.StringIO()
        assert show(target, trail[1], io.StringIO(), err=err) == EXIT_ERROR
    errors = io.StringIO(), io.StringIO()
    assert verify(export_folder, io.StringIO(), key_path=None, err=errors[0]) == EXIT_ERROR
    assert export_jsonl(export_folder, io.StringIO(), err=errors[1]) == EXIT_ERROR
    for err in errors:
        assert err.getvalue().startswith(f"error: cannot read the audit export {export_folder}")


@pytest.mark.parametrize(
    ("stored", "column"),
    [(b"\xff\x00", "?"), (b"[1]", "?"), (b'{"\xff"}', "CAST(? AS TEXT)")],
    ids=["blob", "json-blob", "not-utf8-text"],
)
def test_records_stored_as_bytes_are_reported_not_a_traceback(
    sqlite_store: SqliteStore, trail: list[str], tmp_path: Path, stored: bytes, column: str
) -> None:
    """A row written as a BLOB, or as TEXT that is not UTF-8, is a malformed record: verify names it
    (exit 1), tail prints its placeholder (exit 2), export goes on to the end; none of them crashes."""
    with closing(sqlite3.connect(sqlite_store.path)) as conn, conn:
        conn.execute(f"UPDATE audit_records SET record = {column} WHERE id = ?", (stored, trail[1]))
        conn.execute("UPDATE audit_receipts SET receipt = ? WHERE id = ?", (stored, trail[2]))
    out = io.StringIO()
    assert verify(sqlite_store.path, out, key_path=_key_path(tmp_path)) == EXIT_FAILED
    assert "first bad record: #2: edited: not a well-formed audit record" in out.getvalue()
    out, err = io.StringIO(), io.StringIO()
    assert tail(sqlite_store.path, out, err=err) == EXIT_ERROR
    assert out.getvalue().splitlines()[1] == "?  #2  not a well-formed record"
    out = io.StringIO()
    assert export_jsonl(sqlite_store.path, out) == EXIT_OK
    assert len(out.getvalue().splitlines()) == 4 + 2
    err = io.StringIO()
    assert show(sqlite_store.path, trail[1], io.StringIO(), err=err) == EXIT_ERROR
    assert "is not a well-formed JSON object" in err.getvalue()


def test_show_never_prints_another_record_under_the_id_asked_for(sqlite_store: SqliteStore, trail: list[str]) -> None:
    """`show` finds a record by its index columns, which verification does not cover: swapped `seq`
    columns (or receipt ids) must not make it print the response record as the request."""
    with closing(sqlite3.connect(sqlite_store.path)) as conn, conn:
        conn.execute("UPDATE audit_records SET seq = -1 WHERE id = ?", (trail[1],))
        conn.execute("UPDATE audit_records SET seq = 1 WHERE id = ?", (trail[2],))
        conn.execute("UPDATE audit_records SET seq = 2 WHERE id = ?", (trail[1],))
        conn.execute("UPDATE audit_receipts SET id = 'moved' WHERE id = ?", (trail[3],))
        conn.execute("UPDATE audit_receipts SET id = ? WHERE id = ?", (trail[3], trail[2]))
    err = io.StringIO()
    assert show(sqlite_store.path, trail[1], io.StringIO(), err=err) == EXIT_ERROR
    assert err.getvalue() == f"error: the row indexed as {trail[1]} holds record {trail[2]!r}; run `audit verify`\n"
    err = io.StringIO()
    assert show(sqlite_store.path, trail[3], io.StringIO(), err=err) == EXIT_ERROR
    expected = f"error: the receipt indexed as {trail[3]} is the receipt of {trail[2]!r}; run `audit verify`\n"
    assert err.getvalue() == expected


def test_verify_locates_a_malformed_record_by_the_record_before_it_when_rows_are_missing(
    sqlite_store: SqliteStore, trail: list[str], tmp_path: Path
) -> None:
    """With a row deleted before it, a malformed record's place among the records (#3) is no longer
    the position `tail` prints (#4): the finding also names the record stored before it."""
    with closing(sqlite3.connect(sqlite_store.path)) as conn, conn:
        conn.execute("DELETE FROM audit_records WHERE id = ?", (trail[1],))
        conn.execute("UPDATE audit_records SET record = '{bad' WHERE id = ?", (trail[3],))
    out = io.StringIO()
    assert tail(sqlite_store.path, out, err=io.StringIO()) == EXIT_ERROR
    assert "?  #4  not a well-formed record" in out.getvalue().splitlines()
    out = io.StringIO()
    assert verify(sqlite_store.path, out, key_path=_key_path(tmp_path)) == EXIT_FAILED
    assert f"#3: edited: not a well-formed audit record (stored after {trail[2]})" in out.getvalue()


# ---- what `tail` says decided a record


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (
            {
                "decision": "deny",
                "interceptors": [
                    {"name": "pii", "type": "validation", "valid": True},
                    {
                        "name": "secrets",
                        "type": "validation",
                        "valid": False,
                        "messages": [{"message": "credential found: aws_access_key", "path": "$.params.arguments.x"}],
                    },
                ],
            },
            "by secrets: credential found: aws_access_key at $.params.arguments.x",
        ),
        (
            {"decision": "deny", "interceptors": [{"name": "size-limit", "type": "validation", "valid": False}]},
            "by size-limit: invalid (error)",
        ),
        (
            {"decision": "deny", "interceptors": [{"name": "far", "error": {"code": -32603, "reason": "timeout"}}]},
            "by far: timeout",
        ),
        (
            {"decision": "deny", "interceptors": [], "error": {"code": -32602, "message": "not shown", "reason": "r"}},
            "by not shown r",
        ),
        (
            {
                "decision": "deny",
                "interceptors": [
                    {"name": "shadow", "type": "validation", "valid": False, "mode": "audit"},
                    {"name": "open", "error": {"reason": "down"}, "fail_open": True},
                ],
                "error": None,
            },
            None,
        ),
        (
            {"decision": "allow", "interceptors": [{"name": "secrets", "type": "mutation", "modified": True}]},
            "changed by secrets",
        ),
        ({"decision": "allow", "interceptors": [{"name": "secrets", "type": "mutation", "modified": False}]}, None),
        (
            {
                "decision": "deny",
                "interceptors": [
                    {
                        "name": "g",
                        "type": "validation",
                        "valid": False,
                        "messages": [{"message": f"m{i}"} for i in range(5)],
                    }
                ],
            },
            "by g: m0; g: m1; g: m2 (and 2 more)",
        ),
        (
            {
                "decision": "deny",
                "interceptors": [{"name": "g", "valid": False, "messages": [{"message": "a\x1b[2Jb"}]}],
            },
            "by g: a\\x1b[2Jb",
        ),
    ],
)
def test_decided_by_names_the_interceptor_and_its_reason(body: dict[str, Any], said: str | None) -> None:
    assert decided_by(body) == said
