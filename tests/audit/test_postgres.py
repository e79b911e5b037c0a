"""The PostgreSQL store on a real server: writer round trip, two writer processes at once, the commands."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import orjson
import pytest

from mcp_interceptors.audit import DecisionInput, load_key, load_or_create_key, open_audit_writer, verify_source
from mcp_interceptors.audit.commands import EXIT_OK, export_jsonl, verify
from mcp_interceptors.audit.postgres import PostgresStore, engine_url_for

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
