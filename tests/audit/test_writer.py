"""The writer over SQLite: the records it writes, group commit, compound receipts, shutdown and failures."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import anyio
import anyio.lowlevel
import orjson
import pytest

from mcp_interceptors.audit import (
    AuditWriteError,
    AuditWriter,
    DecisionInput,
    SigningKey,
    SqliteStore,
    StoreError,
    open_audit_writer,
    open_store,
    payload_hash,
    verify_source,
)
from mcp_interceptors.audit.postgres import PostgresStore
from mcp_interceptors.audit.store import RECEIPT_COLUMNS, RECORD_COLUMNS, ReceiptRow, RecordRow
from mcp_interceptors.audit.writer import BATCH_AFTER_TURNS

pytestmark = pytest.mark.anyio

Make = Callable[..., DecisionInput]


def _body(store: SqliteStore, record_id: str) -> dict[str, Any]:
    raw = store.get_record(record_id)
    assert raw is not None
    body: dict[str, Any] = orjson.loads(raw)["body"]
    return body


async def test_allow_record(sqlite_store: SqliteStore, key: SigningKey, make_decision: Make) -> None:
    decision = make_decision()
    async with open_audit_writer(sqlite_store, key) as writer:
        receipt = await writer.append(decision)
    assert receipt.key_id == key.key_id
    assert receipt.id == f"{writer.segment_id}-1"
    assert receipt.compound is None
    body = _body(sqlite_store, receipt.id)
    assert body["decision"] == "allow"
    assert body["status"] == "success"
    assert body["principal"] == {"type": "user", "id": "u-7"}
    assert body["intent_hash"] == body["executed_hash"] == payload_hash(decision.intent_payload)
    assert body["drift"] is False
    assert verify_source(sqlite_store, key.trusted()).ok


async def test_deny_record_gets_a_receipt(sqlite_store: SqliteStore, key: SigningKey, make_decision: Make) -> None:
    blocked = {
        "name": "injection-check",
        "type": "validation",
        "mode": "active",
        "valid": False,
        "severity": "error",
        "messages": [{"path": "/params/arguments/text", "message": "injection", "severity": "error"}],
        "duration_ms": 2.5,
    }
    decision = make_decision(
        decision="deny",
        status="validation_failed",
        call_id="call-1",
        interceptors=[blocked],
        intent_payload=None,
        executed_payload=None,
        error={"code": -32001, "message": "blocked by injection-check"},
    )
    async with open_audit_writer(sqlite_store, key) as writer:
        receipt = await writer.append(decision)
    body = _body(sqlite_store, receipt.id)
    assert body["interceptors"] == [blocked]
    assert (body["intent_hash"], body["executed_hash"], body["drift"]) == (None, None, None)
    assert body["error"] == {"code": -32001, "message": "blocked by injection-check"}
    assert receipt.compound is not None
    assert receipt.compound.request is not None and receipt.compound.request.id == receipt.id
    assert receipt.compound.response is None
    stored = sqlite_store.get_receipt(receipt.id)
    assert stored is not None and orjson.loads(stored) == receipt.compound.to_dict()


@pytest.mark.parametrize("mode", ["active", "audit"])
async def test_mutation_and_audit_shadow_records_store_diffs(
    sqlite_store: SqliteStore, key: SigningKey, make_decision: Make, mode: str
) -> None:
    before = {"method": "tools/call", "params": {"arguments": {"text": "key=AKIA0000EXAMPLE"}}}
    after = {"method": "tools/call", "params": {"arguments": {"text": "key=[SECRET]"}}}
    scrubber = {
        "name": "secret-scrubber",
        "type": "mutation",
        "mode": mode,
        "modified": True,
        "duration_ms": 3.1,
        "payload_before": before,
        "payload_after": after,
    }
    # An audit-mode (shadow) mutation is recorded but not applied: the approved payload stays `before`.
    approved = after if mode == "active" else before
    async with open_audit_writer(sqlite_store, key) as writer:
        receipt = await writer.append(
            make_decision(interceptors=[scrubber], intent_payload=approved, executed_payload=approved)
        )
    body = _body(sqlite_store, receipt.id)
    (entry,) = body["interceptors"]
    assert entry["mode"] == mode
    assert entry["diff"] == [{"op": "replace", "path": "/params/arguments/text", "value": "key=[SECRET]"}]
    assert "payload_before" not in entry and "payload_after" not in entry
    assert body["intent_hash"] == payload_hash(approved)
    stored = sqlite_store.get_record(receipt.id)
    assert stored is not None
    assert (b"AKIA0000EXAMPLE" in stored) is False


async def test_upstream_error_response_closes_the_call(
    sqlite_store: SqliteStore, key: SigningKey, make_decision: Make
) -> None:
    async with open_audit_writer(sqlite_store, key) as writer:
        request = await writer.append(make_decision(call_id="call-9"))
        response = await writer.append(
            make_decision(
                phase="response",
                direction="receiving",
                decision="error",
                status="upstream_error",
                call_id="call-9",
                intent_payload=None,
                executed_payload=None,
                error={"code": -32603, "message": "upstream closed the connection"},
            )
        )
    assert request.compound is None
    compound = response.compound
    assert compound is not None
    assert compound.request is not None and compound.request.id == request.id
    assert compound.request.hash == request.hash
    assert compound.response is not None and compound.response.hash == response.hash
    assert compound.request.time == "2026-09-01T10:00:00.000000Z"
    assert _body(sqlite_store, response.id)["status"] == "upstream_error"
    assert verify_source(sqlite_store, key.trusted()).ok


async def test_response_finds_its_request_in_the_store_after_a_restart(
    sqlite_store: SqliteStore, key: SigningKey, make_decision: Make
) -> None:
    async with open_audit_writer(sqlite_store, key) as first:
        request = await first.append(make_decision(call_id="call-r"))
    async with open_audit_writer(sqlite_store, key) as second:
        response = await second.append(make_decision(phase="response", direction="receiving", call_id="call-r"))
    assert response.compound is not None and response.compound.request is not None
    assert response.compound.request.hash == request.hash
    assert verify_source(sqlite_store, key.trusted()).ok


async def test_open_calls_past_the_limit_are_forgotten_oldest_first_and_read_back_from_the_store(
    sqlite_store: SqliteStore, key: SigningKey, make_decision: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []
    find_request = sqlite_store.find_request
    monkeypatch.setattr(sqlite_store, "find_request", lambda call_id: asked.append(call_id) or find_request(call_id))
    async with open_audit_writer(sqlite_store, key, open_calls_limit=2) as writer:
        requests = [await writer.append(make_decision(call_id=f"open-{index}")) for index in range(3)]
        responses = [
            await writer.append(make_decision(phase="response", direction="receiving", call_id=f"open-{index}"))
            for index in range(3)
        ]
    assert asked == ["open-0"]  # the oldest was dropped from memory; the other two were still there
    for request, response in zip(requests, responses, strict=True):
        assert response.compound is not None and response.compound.request is not None
        assert response.compound.request.hash == request.hash
    assert verify_source(sqlite_store, key.trusted()).ok


async def test_group_commit_uses_fewer_transactions_than_appends(
    sqlite_store: SqliteStore, key: SigningKey, make_decision: Make
) -> None:
    appends = 400
    async with open_audit_writer(sqlite_store, key) as writer:
        receipts: list[str] = []

        async def one(index: int) -> None:
            receipts.append((await writer.append(make_decision(call_id=f"c{index}"))).id)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for index in range(appends):
                    tg.start_soon(one, index)
    assert len(set(receipts)) == appends
    assert writer.stats.records == appends
    assert writer.stats.batches < appends
    assert writer.stats.largest_batch > 1
    report = verify_source(sqlite_store, key.trusted())
    assert report.ok and report.records == appends + 1


async def test_run_signals_started_with_a_durable_segment_header(sqlite_store: SqliteStore, key: SigningKey) -> None:
    writer = AuditWriter(sqlite_store, key)
    async with anyio.create_task_group() as tg:
        segment_id = await tg.start(writer.run)
        assert segment_id == writer.segment_id
        header = sqlite_store.get_record(f"{segment_id}-0")
        assert header is not None and orjson.loads(header)["kind"] == "segment"
        await writer.aclose()


async def test_append_before_start_and_after_close_raise(
    sqlite_store: SqliteStore, key: SigningKey, make_decision: Make
) -> None:
    writer = AuditWriter(sqlite_store, key)
    with pytest.raises(AuditWriteError, match="not running"):
        await writer.append(make_decision())
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        await writer.aclose()
    with pytest.raises(AuditWriteError, match="stopped"):
        await writer.append(make_decision())


class _GatedStore(SqliteStore):
    """Holds decision batches in a worker thread until the test opens the gate, so records pile up."""

    gate: threading.Event | None = None

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.inline_commit = False  # the gate must not block the event loop

    def append(self, records: Sequence[RecordRow], receipts: Sequence[ReceiptRow]) -> None:
        if self.gate is not None and records[0].seq > 0:
            self.gate.wait(timeout=30)
        super().append(records, receipts)


async def test_cancelling_the_writer_flushes_what_was_queued(
    tmp_path: Path, key: SigningKey, make_decision: Make
) -> None:
    store = _GatedStore(tmp_path / "audit.db")
    store.gate = threading.Event()
    writer = AuditWriter(store, key)
    acknowledged: list[str] = []

    async def appender(index: int) -> None:
        acknowledged.append((await writer.append(make_decision(call_id=f"c{index}"))).id)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as callers, anyio.create_task_group() as writer_group:
            await writer_group.start(writer.run)
            callers.start_soon(appender, 0)
            await anyio.wait_all_tasks_blocked()  # the writer holds record 0 at the gate
            for index in range(1, 50):
                callers.start_soon(appender, index)
            await anyio.wait_all_tasks_blocked()  # records 1..49 are queued behind it
            assert writer.stats.batches == 0
            writer_group.cancel_scope.cancel()  # shutdown while records are queued
            store.gate.set()
    assert len(acknowledged) == 50
    assert (writer.stats.batches, writer.stats.largest_batch) == (2, 49)
    stored = {orjson.loads(raw)["id"] for _, raw in store.iter_records()}
    assert set(acknowledged) <= stored
    assert verify_source(store, key.trusted()).ok
    store.close()


class _FailingStore(SqliteStore):
    """Refuses the next `failures` batches, as a full disk or a lost database connection would."""

    failures = 0

    def append(self, records: Sequence[RecordRow], receipts: Sequence[ReceiptRow]) -> None:
        if self.failures and records[0].seq > 0:
            self.failures -= 1
            raise OSError("disk full")
        super().append(records, receipts)


async def test_a_refused_batch_raises_and_the_chain_continues(
    tmp_path: Path, key: SigningKey, make_decision: Make
) -> None:
    store = _FailingStore(tmp_path / "audit.db")
    async with open_audit_writer(store, key) as writer:
        store.failures = 1
        with pytest.raises(AuditWriteError, match="disk full"):
            await writer.append(make_decision())
        receipt = await writer.append(make_decision())
    assert receipt.id.endswith("-1")  # the refused record did not consume a sequence number
    assert writer.stats.failed_batches == 1
    assert verify_source(store, key.trusted()).ok
    store.close()


class _CommitLostStore(SqliteStore):
    """Commits the next batch, then raises as a connection that broke before the commit's answer came back;
    with `blind`, the next `get_record` fails too (the store is still unreachable when the writer asks)."""

    lose_next = False
    blind = False

    def append(self, records: Sequence[RecordRow], receipts: Sequence[ReceiptRow]) -> None:
        super().append(records, receipts)
        if self.lose_next:
            self.lose_next = False
            raise OSError("connection lost after COMMIT was sent")

    def get_record(self, record_id: str) -> bytes | None:
        if self.blind:
            self.blind = False
            raise OSError("connection refused")
        return super().get_record(record_id)


async def test_a_batch_committed_though_its_commit_failed_stands_and_the_chain_follows_it(
    tmp_path: Path, key: SigningKey, make_decision: Make
) -> None:
    store = _CommitLostStore(tmp_path / "audit.db")
    async with open_audit_writer(store, key) as writer:
        store.lose_next = True
        landed = await writer.append(make_decision(call_id="c1"))  # the store has it: not an error
        after = await writer.append(make_decision(call_id="c2"))
    assert (landed.id, after.id) == (f"{writer.segment_id}-1", f"{writer.segment_id}-2")
    report = verify_source(store, key.trusted())
    assert report.ok and report.records == 3, report
    store.close()


async def test_a_batch_not_known_to_be_committed_fails_and_the_next_one_learns_whether_it_was(
    tmp_path: Path, key: SigningKey, make_decision: Make
) -> None:
    store = _CommitLostStore(tmp_path / "audit.db")
    async with open_audit_writer(store, key) as writer:
        store.lose_next = store.blind = True
        with pytest.raises(AuditWriteError, match="connection lost"):
            await writer.append(make_decision(call_id="c1"))  # it landed, but the writer cannot tell yet
        after = await writer.append(make_decision(call_id="c2"))  # asks first: it did land, so this follows it
    assert after.id == f"{writer.segment_id}-2"  # reusing seq 1 would collide, and the chain would stop here
    report = verify_source(store, key.trusted())
    assert report.ok and report.records == 3, report
    store.close()


async def test_submit_queues_now_and_waits_later(
    sqlite_store: SqliteStore, key: SigningKey, make_decision: Make
) -> None:
    async with open_audit_writer(sqlite_store, key) as writer:
        # Submitting without waiting lets a caller overlap the commit with its own work (e.g. forwarding),
        # and lets records submitted back to back share one transaction.
        pending = [await writer.submit(make_decision(call_id=f"c{index}")) for index in range(100)]
        with anyio.fail_after(30):
            receipts = [await item.wait() for item in pending]
    assert [receipt.id for receipt in receipts] == [f"{writer.segment_id}-{seq}" for seq in range(1, 101)]
    assert writer.stats.batches < 100


async def test_the_first_caller_to_wait_commits_the_records_queued_before_it(
    sqlite_store: SqliteStore, key: SigningKey, make_decision: Make
) -> None:
    async with open_audit_writer(sqlite_store, key, max_delay=30) as writer:
        # Request records of calls still upstream: nobody waits for them yet.
        requests = [await writer.submit(make_decision(call_id=f"c{index}")) for index in range(3)]
        response = make_decision(phase="response", direction="receiving", call_id="c0")
        with anyio.fail_after(5):
            receipt = await writer.append(response)
        assert all(pending.done.is_set() for pending in requests)
        assert (writer.stats.batches, writer.stats.largest_batch) == (1, 4)  # one transaction for all four
    assert receipt.compound is not None and receipt.compound.request is not None
    assert receipt.compound.request.id == f"{writer.segment_id}-1"


async def test_records_waited_for_within_a_few_loop_turns_share_one_commit(
    sqlite_store: SqliteStore, key: SigningKey, make_decision: Make
) -> None:
    """The commit runs `BATCH_AFTER_TURNS` loop turns after the first wait: records other tasks queue and wait
    for meanwhile (a busy gateway's other calls) are in the same transaction; a lone record commits alone."""
    async with open_audit_writer(sqlite_store, key, max_delay=30) as writer:

        async def record_after(turns: int) -> None:
            for _ in range(turns):
                await anyio.lowlevel.checkpoint()
            await writer.append(make_decision())

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                for turns in range(BATCH_AFTER_TURNS - 1):
                    tg.start_soon(record_after, turns)
            assert (writer.stats.batches, writer.stats.records) == (1, BATCH_AFTER_TURNS - 1)
            await record_after(0)
        assert (writer.stats.batches, writer.stats.records) == (2, BATCH_AFTER_TURNS)
    assert verify_source(sqlite_store, key.trusted()).ok


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_on_trio_a_wait_commits_what_is_queued_at_once_and_no_record_is_lost(
    sqlite_store: SqliteStore, key: SigningKey, make_decision: Make
) -> None:
    """Off asyncio there is no loop to count turns on: a caller's wait commits what is queued at once (on its
    own task, or through the writer task when that task has just taken the record off the queue), and records
    nobody waits for still go within `max_delay`."""
    # `max_delay` far past the deadlines: a commit within them is the wait's doing, not the timer's.
    async with open_audit_writer(sqlite_store, key, max_delay=60) as writer:
        queued = [await writer.submit(make_decision(call_id=f"call-{n}")) for n in range(3)]
        with anyio.fail_after(5):
            receipts = [await pending.wait() for pending in queued]
        assert sorted(receipt.id for receipt in receipts) == [f"{writer.segment_id}-{seq}" for seq in (1, 2, 3)]
        # The writer task may hold the first record (handed to it as it was queued) apart from the other two.
        assert writer.stats.records == 3
        assert writer.stats.batches in (1, 2)

        async def record(n: int) -> None:
            await writer.append(make_decision(call_id=f"concurrent-{n}"))

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:
                for n in range(20):
                    tg.start_soon(record, n)
        assert writer.stats.records == 23
    async with open_audit_writer(sqlite_store, key, max_delay=0.05) as writer:
        unawaited = await writer.submit(make_decision(call_id="upstream-still-working"))
        with anyio.fail_after(5):
            await unawaited.done.wait()  # nobody asks for a commit: the writer task's `max_delay` commits it
        assert writer.stats.records == 1
    assert verify_source(sqlite_store, key.trusted()).ok


async def test_a_record_nobody_waits_for_is_committed_within_max_delay(
    sqlite_store: SqliteStore, key: SigningKey, make_decision: Make
) -> None:
    async with open_audit_writer(sqlite_store, key, max_delay=0.05) as writer:
        pending = await writer.submit(make_decision(call_id="upstream-still-working"))
        with anyio.fail_after(5):
            await pending.done.wait()  # the event itself: waiting on it asks for no commit
        assert writer.stats.records == 1
        assert sqlite_store.get_record(f"{writer.segment_id}-1") is not None


@pytest.mark.parametrize(
    ("target", "needs_sync"),
    [("audit.db", False), ("sqlite:///{dir}/audit.db", False), ("sqlite:///{dir}/audit.db?synchronous=full", True)],
)
def test_open_store_targets(tmp_path: Path, target: str, needs_sync: bool) -> None:
    resolved = target.format(dir=tmp_path) if "{dir}" in target else str(tmp_path / target)
    store = open_store(resolved)
    assert isinstance(store, SqliteStore)
    assert store.path == tmp_path / "audit.db"
    assert (store.inline_commit, store.needs_sync) == (True, needs_sync)
    # Commits never fsync on the loop; FULL durability comes from `sync()` in a worker thread.
    assert store._conn.execute("PRAGMA synchronous").fetchone() == (1,)
    assert store._conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert store._conn.execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)
    store.close()


class _CountingStore(SqliteStore):
    """Counts `sync()` and `checkpoint()` calls, which the writer makes from worker threads."""

    syncs = 0
    checkpoints = 0

    def sync(self) -> None:
        self.syncs += 1
        super().sync()

    def checkpoint(self) -> None:
        self.checkpoints += 1
        super().checkpoint()


@pytest.mark.parametrize(("synchronous", "syncs"), [("FULL", 1 + 5), ("NORMAL", 0)])
async def test_full_syncs_every_batch_before_acknowledging(
    tmp_path: Path, key: SigningKey, make_decision: Make, synchronous: Literal["FULL", "NORMAL"], syncs: int
) -> None:
    store = _CountingStore(tmp_path / "audit.db", synchronous=synchronous)
    async with open_audit_writer(store, key) as writer:
        for _ in range(5):
            await writer.append(make_decision())
    assert (writer.stats.batches, store.syncs) == (5, syncs)  # FULL: the segment header, then each batch
    store.close()


async def test_checkpoints_run_in_the_background(tmp_path: Path, key: SigningKey, make_decision: Make) -> None:
    store = _CountingStore(tmp_path / "audit.db", synchronous="FULL")
    async with open_audit_writer(store, key, checkpoint_every=10) as writer:
        for _ in range(25):
            await writer.append(make_decision())
    assert store.checkpoints == 2  # after records 10 and 20
    assert writer.stats.records == 25
    # Everything is in the main database file now, and the trail still verifies.
    assert store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
    assert verify_source(store, key.trusted()).ok
    store.close()


def test_open_store_rejects_unknown_synchronous(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="synchronous must be full or normal"):
        open_store(f"sqlite:///{tmp_path}/audit.db?synchronous=off")


def test_store_columns_follow_the_row_fields_they_are_filled_from() -> None:
    """Both stores insert `row_params(row)` into `RECORD_COLUMNS` / `RECEIPT_COLUMNS`: positions must agree."""
    assert (*RecordRow._fields[:-1], "record") == RECORD_COLUMNS
    assert (*ReceiptRow._fields[:-1], "receipt") == RECEIPT_COLUMNS


async def test_the_sqlalchemy_store_writes_through_any_sqlalchemy_url(
    tmp_path: Path, key: SigningKey, make_decision: Make
) -> None:
    """Without psycopg (here SQLite through SQLAlchemy), `PostgresStore` inserts through SQLAlchemy Core."""
    store = PostgresStore(f"sqlite:///{tmp_path}/via-sqlalchemy.db")
    try:
        async with open_audit_writer(store, key) as writer:
            await writer.append(make_decision(call_id="c1"))
            closing = await writer.append(make_decision(phase="response", direction="receiving", call_id="c1"))
        assert store.get_receipt(closing.id) is not None
        report = verify_source(store, key.trusted())
        assert report.ok and (report.records, report.receipts) == (3, 1), report
    finally:
        store.close()
