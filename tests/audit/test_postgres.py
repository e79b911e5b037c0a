"""The PostgreSQL store on a real server: writer round trip, two writer processes at once, the commands."""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import anyio
import orjson
import pytest
from helpers import WatchedOutput
from sqlalchemy import create_engine, insert, select, text

from mcp_interceptors.audit import DecisionInput, load_key, load_or_create_key, open_audit_writer, verify_source
from mcp_interceptors.audit.commands import EXIT_OK, export_jsonl, tail, verify
from mcp_interceptors.audit.postgres import PostgresStore, engine_url_for, records_table

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

APPENDER = Path(__file__).with_name("_appender.py")
Make = Callable[..., DecisionInput]


def test_engine_url_defaults_to_psycopg() -> None:
    assert engine_url_for("postgresql://u@h:5/db") == "postgresql+psycopg://u@h:5/db"
    assert engine_url_for("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    assert engine_url_for("postgresql+psycopg://u:p@h/db") == "postgresql+psycopg://u:p@h/db"


async def test_writer_round_trip(postgres_url: str, tmp_path: Path, make_decision: Make) -> None:
    key = load_or_create_key(tmp_path / "audit-key")
    store = PostgresStore(postgres_url)
    try:
        async with open_audit_writer(store, key) as writer:
            request = await writer.append(make_decision(call_id="c1"))
            response = await writer.append(make_decision(phase="response", direction="receiving", call_id="c1"))
            denied = await writer.append(make_decision(decision="deny", status="validation_failed", call_id="c2"))
        assert response.compound is not None and response.compound.request is not None
        assert response.compound.request.hash == request.hash
        assert denied.compound is not None and denied.compound.response is None
        raw = store.get_record(request.id)
        assert raw is not None and orjson.loads(raw)["hash"] == request.hash
        report = verify_source(store, key.trusted())
        assert report.ok, report.first
        assert (report.records, report.segments, report.receipts) == (4, 1, 2)
        tail = store.lineage_tail([key.key_id])
        assert tail is not None and tail.record_id == denied.id
    finally:
        store.close()


async def test_a_writer_connection_the_server_drops_is_replaced_without_failing_the_batch(
    postgres_url: str, tmp_path: Path, make_decision: Make
) -> None:
    """The store keeps one connection for its appends (no pool check-out nor ping per batch). When the server
    ends it (a restart, a failover, `pg_terminate_backend`), the next batch goes through on a new one."""
    key = load_or_create_key(tmp_path / "audit-key")
    store = PostgresStore(postgres_url)
    admin = create_engine(engine_url_for(postgres_url))
    try:
        async with open_audit_writer(store, key) as writer:
            await writer.append(make_decision(call_id="before"))
            with admin.begin() as conn:
                ended = conn.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'idle'"
                    )
                ).all()
            assert ended, "the writer's connection was not found"
            after = await writer.append(make_decision(call_id="after"))
        report = verify_source(store, key.trusted())
        assert report.ok, report.first
        assert report.records == 3 and store.get_record(after.id) is not None
    finally:
        store.close()
        admin.dispose()


async def _run_appender(url: str, key_path: Path, count: int) -> tuple[list[str], str]:
    command = [sys.executable, str(APPENDER), url, str(key_path), str(count), "4"]
    result = await anyio.run_process(command, check=False)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    lines = result.stdout.decode().splitlines()
    assert lines[0].startswith("ready ") and lines[-1].startswith("done ")
    return lines[1:-1], lines[-1]


async def test_two_writer_processes_append_concurrently(postgres_url: str, tmp_path: Path) -> None:
    PostgresStore(postgres_url).close()  # create the tables once, as a deployment's first replica would
    keys = [tmp_path / "replica-a" / "audit-key", tmp_path / "replica-b" / "audit-key"]
    outcomes: list[tuple[list[str], str]] = []

    async def replica(key_path: Path) -> None:
        outcomes.append(await _run_appender(postgres_url, key_path, 400))

    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            for key_path in keys:
                tg.start_soon(replica, key_path)

    trusted = {**load_key(keys[0]).trusted(), **load_key(keys[1]).trusted()}
    store = PostgresStore(postgres_url, create=False)
    try:
        report = verify_source(store, trusted)
        stored = {orjson.loads(raw)["id"] for _, raw in store.iter_records()}
    finally:
        store.close()
    assert report.ok, report.first
    assert (report.records, report.segments) == (802, 2)
    for acknowledged, done in outcomes:
        assert len(acknowledged) == 400
        assert set(acknowledged) <= stored
        print(f"postgres appender: {done}")  # records batches largest seconds, for the bench notes


def test_commands_read_postgres(postgres_url: str, tmp_path: Path, make_decision: Make) -> None:
    key_path = tmp_path / "audit-key"
    key = load_or_create_key(key_path)

    async def write() -> None:
        store = PostgresStore(postgres_url)
        async with open_audit_writer(store, key) as writer:
            await writer.append(make_decision())
        store.close()

    anyio.run(write)
    out = io.StringIO()
    assert verify(postgres_url, out, key_path=key_path) == EXIT_OK
    assert out.getvalue() == "OK: 2 records in 1 segments, 0 receipts\n"
    exported = io.StringIO()
    assert export_jsonl(postgres_url, exported) == EXIT_OK
    assert len(exported.getvalue().splitlines()) == 2


def test_tail_follow_prints_a_record_another_replica_committed_late(
    postgres_url: str, tmp_path: Path, make_decision: Make
) -> None:
    """PostgreSQL numbers a row at insert and shows it at commit: a slow replica's row appears after
    rows numbered later, and a follower must still print it."""
    key = load_or_create_key(tmp_path / "audit-key")

    async def write() -> None:
        store = PostgresStore(postgres_url)
        async with open_audit_writer(store, key) as writer:
            await writer.append(make_decision(call_id="first"))
        store.close()

    anyio.run(write)
    engine = create_engine(engine_url_for(postgres_url))
    template = engine.connect()
    row = dict(template.execute(select(records_table).order_by(records_table.c.pos.desc()).limit(1)).mappings().one())
    template.close()

    def replica_row(call_id: str, seq: int) -> dict[str, object]:
        record = orjson.loads(str(row["record"]))
        record["id"] = f"replica-{call_id}"
        record["body"]["call_id"] = call_id
        fields = {key: value for key, value in row.items() if key != "pos"}
        text = orjson.dumps(record).decode()
        return {**fields, "id": record["id"], "segment_id": "replica", "seq": seq, "call_id": call_id, "record": text}

    out = WatchedOutput()
    stop = threading.Event()
    follower = threading.Thread(
        target=tail,
        args=(postgres_url, out),
        kwargs={"limit": 1, "follow": True, "poll_interval": 0.01, "should_stop": stop.is_set},
    )
    follower.start()
    try:
        assert out.wait_for("call=first")
        with engine.connect() as slow, engine.connect() as fast:
            slow_tx = slow.begin()
            slow.execute(insert(records_table).values(**replica_row("slow", 1)))  # numbered first, shown last
            with fast.begin():
                fast.execute(insert(records_table).values(**replica_row("fast", 2)))
            assert out.wait_for("call=fast")
            slow_tx.commit()
        assert out.wait_for("call=slow")
    finally:
        stop.set()
        follower.join(10)
        engine.dispose()
    printed = out.getvalue().splitlines()
    assert [line.split("call=")[-1] for line in printed] == ["first", "fast", "slow"]


async def test_a_restarted_writer_links_to_what_the_json_states_not_to_an_edited_index_column(
    postgres_url: str, tmp_path: Path, make_decision: Make
) -> None:
    """As on SQLite (tests/audit/test_verify.py): an edited `hash` column must not reach the next
    segment's link or the receipt of a call opened before the restart."""
    key = load_or_create_key(tmp_path / "audit-key")
    store = PostgresStore(postgres_url)
    try:
        async with open_audit_writer(store, key) as writer:
            request = await writer.append(make_decision(call_id="open"))
        engine = create_engine(engine_url_for(postgres_url))
        try:
            with engine.begin() as conn:
                conn.execute(records_table.update().where(records_table.c.id == request.id).values(hash="0" * 64))
        finally:
            engine.dispose()
        async with open_audit_writer(store, key) as writer:
            response = await writer.append(make_decision(phase="response", direction="receiving", call_id="open"))
        assert response.compound is not None and response.compound.request is not None
        assert response.compound.request.hash == request.hash
        # verify names the edited row, and nothing the restarted writer wrote
        findings = [(f.record_id, f.detail) for f in verify_source(store, key.trusted()).findings]
        assert findings == [(request.id, "its index column hash differs from its JSON")]
    finally:
        store.close()
