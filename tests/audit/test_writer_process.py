"""The audit writer process (`audit.process`) and the gateway's client of it (`ProcessAuditWriter`).

The process is driven two ways: its line handler directly (sync, no pipe), and as the real child the
gateway starts, through `ProcessAuditWriter`: records, receipts, flush on close, and failing closed once
the process is gone.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import orjson
import psutil
import pytest
from helpers import until

from mcp_interceptors.audit import (
    AuditWriteError,
    DecisionInput,
    SigningKey,
    open_store,
    payload_hash,
    process,
    verify_source,
)
from mcp_interceptors.audit.process import _Writer, decision_from_wire, decision_to_wire
from mcp_interceptors.audit.records import prepare_entry
from mcp_interceptors.audit.writer import BATCH_AFTER_TURNS
from mcp_interceptors.gateway.audit_process import ProcessAuditWriter

Make = Callable[..., DecisionInput]
KEY_FILE = Path("keys") / "audit-key"  # where the `key` fixture writes it, under tmp_path


def _batch(*decisions: DecisionInput) -> bytes:
    return b"[" + b",".join(decision_to_wire(decision) for decision in decisions) + b"]"


def _writer(tmp_path: Path, *, receipts: bool = False) -> _Writer:
    writer = _Writer(str(tmp_path / "audit.db"), str(tmp_path / KEY_FILE), receipts=receipts)
    (opened,) = writer._answer([b'{"open":true}'])
    assert set(opened) == {"segment_id", "key_id"}
    return writer


def _verified(tmp_path: Path, key: SigningKey) -> Any:
    store = open_store(tmp_path / "audit.db", create=False)
    try:
        report = verify_source(store, key.trusted())
    finally:
        store.close()
    assert report.ok, report
    return report


def test_the_wire_form_keeps_the_target_and_trace(make_decision: Make) -> None:
    decision = make_decision(target="post_note", trace_id="4bf92f3577b34da6a3ce929d0e0e4736")
    back = decision_from_wire(orjson.loads(decision_to_wire(decision)))
    assert (back.target, back.trace_id) == ("post_note", decision.trace_id)
    assert prepare_entry(back).body == prepare_entry(decision).body
    assert decision_from_wire(orjson.loads(decision_to_wire(make_decision()))).target is None


def test_batches_are_answered_in_order_and_chained(tmp_path: Path, key: SigningKey, make_decision: Make) -> None:
    writer = _writer(tmp_path)
    answers = writer._answer([_batch(make_decision(), make_decision()), _batch(make_decision())])
    assert answers == [{"n": 2}, {"n": 1}]
    assert _verified(tmp_path, key).records == 4  # the segment's first record and three decisions


def test_receipts_name_the_records_and_close_calls(tmp_path: Path, key: SigningKey, make_decision: Make) -> None:
    writer = _writer(tmp_path, receipts=True)
    request = make_decision(call_id="call-1")
    response = make_decision(call_id="call-1", phase="response", direction="receiving")
    (answer,) = writer._answer([_batch(request, response)])
    first, second = answer["receipts"]
    assert first[0].endswith("-1") and second[0].endswith("-2")
    assert first[4] is None  # a request opens its call
    assert second[4]["request"]["id"] == first[0] and second[4]["response"]["id"] == second[0]
    _verified(tmp_path, key)


def test_a_record_without_a_form_fails_alone(tmp_path: Path, key: SigningKey, make_decision: Make) -> None:
    writer = _writer(tmp_path)
    broken = orjson.loads(decision_to_wire(make_decision()))
    broken["phase"] = "sideways"  # refused by DecisionInput
    line = b"[" + decision_to_wire(make_decision()) + b"," + orjson.dumps(broken) + b"]"
    (answer,) = writer._answer([line])
    assert answer["n"] == 2
    assert list(answer["failed"]) == ["1"] and "sideways" in answer["failed"]["1"]
    assert _verified(tmp_path, key).records == 2


def test_lines_before_open_and_unknown_lines_are_refused(tmp_path: Path, key: SigningKey, make_decision: Make) -> None:
    writer = _Writer(str(tmp_path / "audit.db"), str(tmp_path / KEY_FILE), receipts=False)
    assert writer._answer([_batch(make_decision())]) == [{"error": "the audit segment is not open"}]
    (opened,) = writer._answer([b'{"open":true}'])  # the same writer opens fine afterwards
    assert "segment_id" in opened
    (unknown,) = writer._answer([b'{"close":true}'])
    assert "not a batch" in unknown["error"]


def test_a_store_that_refuses_fails_the_batch(tmp_path: Path, key: SigningKey, make_decision: Make) -> None:
    writer = _writer(tmp_path)
    assert writer._segment is not None
    writer._segment.store.close()
    (answer,) = writer._answer([_batch(make_decision())])
    assert "error" in answer


def test_serve_reads_lines_longer_than_one_read_and_answers_each(
    tmp_path: Path, key: SigningKey, make_decision: Make
) -> None:
    """A line spans several reads (here 4 of `_READ_SIZE`), and several lines come in one: each is answered."""
    writer = _Writer(str(tmp_path / "audit.db"), str(tmp_path / KEY_FILE), receipts=False)
    big = make_decision(intent_payload={"text": "x" * (4 * process._READ_SIZE)})
    data = b'{"open":true}\n' + _batch(big) + b"\n" + _batch(make_decision()) + b"\n" + _batch(make_decision())
    data += b"\n"
    to_child, from_parent = os.pipe()
    from_child, to_parent = os.pipe()
    with anyio.from_thread.start_blocking_portal() as portal:
        served = portal.start_task_soon(anyio.to_thread.run_sync, writer.serve, to_child, to_parent)
        with os.fdopen(from_parent, "wb") as out:
            for start in range(0, len(data), 50_000):  # pieces that split lines anywhere
                out.write(data[start : start + 50_000])
                out.flush()
        served.result(timeout=30)
    os.close(to_child)
    os.close(to_parent)
    with os.fdopen(from_child, "rb") as answers:
        lines = [orjson.loads(line) for line in answers.read().splitlines()]
    assert "segment_id" in lines[0] and lines[1:] == [{"n": 1}] * 3
    report = _verified(tmp_path, key)
    assert report.records == 4
    stored = open_store(tmp_path / "audit.db", create=False)
    try:
        first = orjson.loads([raw for _, raw in stored.iter_records()][1])
    finally:
        stored.close()
    assert first["body"]["intent_hash"] == payload_hash(big.intent_payload)


# -- through the real child process ------------------------------------------------------------------


@asynccontextmanager
async def running(tmp_path: Path, **options: Any) -> AsyncIterator[ProcessAuditWriter]:
    """A `ProcessAuditWriter` with its child started, closed (flushed) on the way out; 30 s for it all."""
    writer = ProcessAuditWriter(str(tmp_path / "audit.db"), tmp_path / KEY_FILE, **options)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(writer.run)
            yield writer
            await writer.aclose()


@pytest.mark.anyio
async def test_process_writer_records_and_returns_receipts(
    tmp_path: Path, key: SigningKey, make_decision: Make
) -> None:
    async with running(tmp_path, receipts=True) as writer:
        segment_id = writer.segment_id
        request = await writer.submit(make_decision(call_id="c-1"))
        response = await writer.submit(make_decision(call_id="c-1", phase="response", direction="receiving"))
        first, second = await request.wait(), await response.wait()
    assert (first.id, second.id) == (f"{segment_id}-1", f"{segment_id}-2")
    assert second.compound is not None and second.compound.request is not None
    assert second.compound.request.id == first.id
    assert writer.stats.records == 2 and writer.stats.failed_records == 0
    _verified(tmp_path, key)


@pytest.mark.anyio
async def test_records_waited_for_within_a_few_loop_turns_share_one_batch(
    tmp_path: Path, key: SigningKey, make_decision: Make
) -> None:
    """A batch goes `BATCH_AFTER_TURNS` loop turns after the first wait on it: the records other tasks queue and
    wait for meanwhile (a busy gateway's other calls) go in the same line and transaction."""
    async with running(tmp_path) as writer:

        async def record_after(turns: int) -> None:
            for _ in range(turns):
                await anyio.lowlevel.checkpoint()
            await (await writer.submit(make_decision())).wait()

        async with anyio.create_task_group() as tg:
            for turns in range(BATCH_AFTER_TURNS - 1):
                tg.start_soon(record_after, turns)
        assert (writer.stats.batches, writer.stats.records) == (1, BATCH_AFTER_TURNS - 1)
        await record_after(0)  # on its own, it goes on its own
        assert (writer.stats.batches, writer.stats.records) == (2, BATCH_AFTER_TURNS)
    _verified(tmp_path, key)


@pytest.mark.anyio
async def test_process_writer_flushes_queued_records_on_close(
    tmp_path: Path, key: SigningKey, make_decision: Make
) -> None:
    writer = ProcessAuditWriter(str(tmp_path / "audit.db"), tmp_path / KEY_FILE, max_delay=60)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            await tg.start(writer.run)
            pending = [await writer.submit(make_decision()) for _ in range(5)]
            await writer.aclose()  # nobody waited, and max_delay is far off: closing sends them
    assert all(record.settled and record.error is None for record in pending)
    assert _verified(tmp_path, key).records == 6
    with pytest.raises(AuditWriteError):
        await writer.submit(make_decision())


@pytest.mark.anyio
async def test_records_nobody_waits_for_are_written_within_max_delay(
    tmp_path: Path, key: SigningKey, make_decision: Make
) -> None:
    """Unawaited records (a request's, while its call is upstream) go on their own within `max_delay`, batch after
    batch: the one timer that serves them is re-armed for each batch queued after the last went."""
    async with running(tmp_path, max_delay=0.05) as writer:
        for round_ in range(3):
            # A record waited for goes at once; the timer armed when it was queued still runs, and fires before
            # the unawaited records queued after it are due: it must wait for them, not forget them.
            await (await writer.submit(make_decision(call_id=f"c-{round_}-waited"))).wait()
            await anyio.sleep(0.02)  # so that the timer fires well before these are due
            pending = [await writer.submit(make_decision(call_id=f"c-{round_}-{n}")) for n in range(2)]
            with anyio.fail_after(5):
                for record in pending:
                    await record.done.wait()  # set once written; waiting on it asks for no batch
            assert all(record.error is None for record in pending)
        assert writer.stats.batches == 6 and writer.stats.records == 9
    assert _verified(tmp_path, key).records == 10


@pytest.mark.anyio
async def test_process_writer_fails_closed_when_the_process_dies_then_starts_a_new_one(
    tmp_path: Path, key: SigningKey, make_decision: Make
) -> None:
    async with running(tmp_path, restart_delay=0.5) as writer:
        first_segment = writer.segment_id
        await (await writer.submit(make_decision())).wait()
        (child,) = _writer_children()
        child.send_signal(signal.SIGKILL)
        with pytest.raises(AuditWriteError):
            while True:  # until the loop has seen the pipe close: then nothing more is accepted
                await (await writer.submit(make_decision())).wait()
        with pytest.raises(AuditWriteError):  # until a new process has opened its segment: fail closed
            await writer.submit(make_decision())
        with anyio.fail_after(10):
            await until(lambda: writer.segment_id != first_segment)  # replaced `restart_delay` later
        (replacement,) = _writer_children()
        assert replacement.pid != child.pid
        await (await writer.submit(make_decision())).wait()
    report = _verified(tmp_path, key)
    assert report.segments == 2  # the new segment continues the chain where the killed process stopped


@pytest.mark.anyio
async def test_a_writer_process_that_cannot_start_again_is_retried_until_it_can(
    tmp_path: Path, key: SigningKey, make_decision: Make, caplog: pytest.LogCaptureFixture
) -> None:
    key_file, moved = tmp_path / KEY_FILE, tmp_path / "elsewhere"
    async with running(tmp_path, restart_delay=0.1) as writer:
        first_segment = writer.segment_id
        key_file.rename(moved)  # a new process cannot load its key: it does not open a segment
        (child,) = _writer_children()
        child.send_signal(signal.SIGKILL)
        with anyio.fail_after(30):  # each retry starts a Python process: seconds apiece on a loaded machine
            await until(lambda: caplog.text.count("did not start again") >= 2)  # retried, each time later
            with pytest.raises(AuditWriteError):
                await writer.submit(make_decision())
            moved.rename(key_file)
            await until(lambda: writer.segment_id != first_segment)
        await (await writer.submit(make_decision())).wait()
    assert "next try in 0.2 s" in caplog.text and "next try in 0.4 s" in caplog.text
    assert _verified(tmp_path, key).segments == 2


def _writer_children() -> list[psutil.Process]:
    return [
        process
        for process in psutil.Process(os.getpid()).children()
        if "mcp_interceptors.audit.process" in " ".join(process.cmdline())
    ]


@pytest.mark.anyio
async def test_process_writer_canonicalises_what_orjson_cannot_encode(
    tmp_path: Path, key: SigningKey, make_decision: Make
) -> None:
    payload = {"method": "tools/call", "params": {"name": "add", "arguments": {"n": 2**70}}}
    async with running(tmp_path, receipts=True) as writer:
        receipt = await writer.append(make_decision(intent_payload=payload, executed_payload=payload))
    store = open_store(tmp_path / "audit.db", create=False)
    try:
        raw = store.get_record(receipt.id)
    finally:
        store.close()
    assert raw is not None
    assert orjson.loads(raw)["body"]["intent_hash"] == payload_hash(payload)
    _verified(tmp_path, key)


def test_checkpoints_run_beside_the_batches(
    tmp_path: Path, key: SigningKey, make_decision: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(process, "CHECKPOINT_EVERY", 3)
    writer = _writer(tmp_path)
    before = (tmp_path / "audit.db").stat().st_size  # the records are in the WAL until a checkpoint
    writer._answer([_batch(*(make_decision() for _ in range(40)))])
    writer._maybe_checkpoint()
    assert writer._checkpointing is not None
    writer._checkpointing.join(timeout=30)
    assert not writer._checkpointing.is_alive()
    assert (tmp_path / "audit.db").stat().st_size > before
    assert _verified(tmp_path, key).records == 41


@pytest.mark.anyio
async def test_a_malformed_answer_fails_its_records_and_frees_their_waiters(
    tmp_path: Path, key: SigningKey, make_decision: Make
) -> None:
    async with running(tmp_path) as writer:
        pending = await writer.submit(make_decision())
        batch = writer._next
        assert batch is not None
        writer._next, writer._wanted = None, False
        writer._sent.append(batch)  # as if sent: the answer below is taken as its
        writer._answered(b"[1, 2]")  # a list where an object belongs
        with pytest.raises(AuditWriteError, match="malformed answer"):
            await pending.wait()
