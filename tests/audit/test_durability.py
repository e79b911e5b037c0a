"""No acknowledged record is lost when the writing process is killed with SIGKILL mid-run."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio
import orjson
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from mcp_interceptors.audit import SqliteStore, load_key, verify_source

pytestmark = pytest.mark.anyio

APPENDER = Path(__file__).with_name("_appender.py")


async def test_sigkill_loses_no_acknowledged_record(tmp_path: Path) -> None:
    db, key_path = tmp_path / "audit.db", tmp_path / "audit-key"
    command = [sys.executable, str(APPENDER), str(db), str(key_path), "-1", "4"]
    acknowledged: list[str] = []
    async with await anyio.open_process(command, stderr=None) as process:
        assert process.stdout is not None
        lines = BufferedByteReceiveStream(process.stdout)
        killed = False
        try:
            with anyio.fail_after(60):
                ready = (await lines.receive_until(b"\n", 1024)).decode()
                assert ready.startswith("ready ")
                while len(acknowledged) < 300:
                    acknowledged.append((await lines.receive_until(b"\n", 1024)).decode())
            os.kill(process.pid, signal.SIGKILL)  # mid-run: appends are in flight right now
            killed = True
            # Ids the child printed before dying are still in the pipe: each was acknowledged.
            with anyio.fail_after(30):
                while True:
                    try:
                        acknowledged.append((await lines.receive_until(b"\n", 1024)).decode())
                    except (anyio.EndOfStream, anyio.IncompleteRead):
                        break
        finally:
            # os.kill, not process.kill(): Popen.kill() polls first and would reap the child behind
            # asyncio's child watcher, which then reports returncode 255.
            if not killed:
                os.kill(process.pid, signal.SIGKILL)
            with anyio.fail_after(30):
                await process.wait()
    assert process.returncode == -signal.SIGKILL

    store = SqliteStore(db)
    try:
        stored = {orjson.loads(raw)["id"] for _, raw in store.iter_records()}
        report = verify_source(store, load_key(key_path).trusted())
    finally:
        store.close()
    assert report.ok, report.first
    missing = [record_id for record_id in acknowledged if record_id not in stored]
    assert missing == []
    assert len(stored) >= len(acknowledged) + 1  # plus the segment header


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes")
def test_a_new_audit_database_and_its_directory_are_owner_only(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "fresh" / "audit.db")
    try:
        store.append([], [])
    finally:
        store.close()
    assert (tmp_path / "fresh").stat().st_mode & 0o777 == 0o700
    for name in ("audit.db", "audit.db-wal"):
        if (tmp_path / "fresh" / name).exists():
            assert (tmp_path / "fresh" / name).stat().st_mode & 0o077 == 0, name
