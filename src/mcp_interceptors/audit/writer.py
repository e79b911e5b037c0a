"""The audit writer: links, signs and group-commits records; `append` returns once durable.

Callers canonicalise their decision on their own task, queue it, and wait. On a store that commits on the
event loop without a sync, the first caller to wait commits everything queued so far, in one synchronous
step (no task switch); records nobody waits for are committed by the writer task within `max_delay`.
Otherwise the writer task takes everything queued while the previous commit was in flight as the next
batch. Either way: one transaction and at most one fsync per batch. The writer owns one chain segment,
opened (and made durable) before `task_status.started()`.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import orjson

from mcp_interceptors.audit.records import (
    GENESIS_HASH,
    AuditError,
    CallEnd,
    CompoundReceipt,
    DecisionInput,
    PreparedEntry,
    format_time,
    prepare_entry,
    receipt_for,
    seal_record,
    segment_body_for,
)
from mcp_interceptors.audit.signing import SigningKey
from mcp_interceptors.audit.store import ReceiptRow, RecordRow, Store
from mcp_interceptors.canonical import canonical_json

_log = logging.getLogger(__name__)


class AuditWriteError(AuditError):
    """The record was not made durable: the writer is not running or the store refused the batch."""


@dataclass(frozen=True)
class AuditReceipt:
    """Proof that a record is durable: its id, hash, signature and key id, plus a compound receipt
    when the record closed a call (a response, or a request that was not allowed)."""

    id: str
    hash: str
    signature: str
    key_id: str
    compound: CompoundReceipt | None = None


@dataclass
class WriterStats:
    """Counters to assert on: records acknowledged, transactions committed, and batch sizes."""

    records: int = 0
    batches: int = 0
    largest_batch: int = 0
    failed_batches: int = 0
    failed_records: int = 0

    @property
    def mean_batch(self) -> float:
        return self.records / self.batches if self.batches else 0.0


@dataclass(eq=False)
class PendingRecord:
    """A queued record: `await pending.wait()` returns its receipt once it is durable."""

    entry: PreparedEntry
    demand: Callable[[PendingRecord], None]
    receipt: AuditReceipt | None = None
    error: Exception | None = None
    settled: bool = False
    # Made only for a caller that must wait for another task's commit: most records are settled by the
    # commit of the caller that waits for them, and an event per record costs more than its insert.
    _done: anyio.Event | None = field(default=None, repr=False)

    @property
    def done(self) -> anyio.Event:
        """Set once the record is durable or refused (waiting on it asks for no commit)."""
        if self._done is None:
            self._done = anyio.Event()
            if self.settled:
                self._done.set()
        return self._done

    def settle(self, receipt: AuditReceipt | None, error: Exception | None) -> None:
        self.receipt, self.error, self.settled = receipt, error, True
        if self._done is not None:
            self._done.set()

    async def wait(self) -> AuditReceipt:
        if not self.settled:
            # One loop turn first, so the tasks that are ready now queue theirs: one commit serves them all.
            await anyio.lowlevel.checkpoint()
        if not self.settled:
            self.demand(self)  # commits it right here when the store allows it
        if not self.settled:
            await self.done.wait()
        if self.error is not None:
            raise AuditWriteError(f"audit record not written: {self.error}") from self.error
        assert self.receipt is not None  # set together with `settled`
        return self.receipt


class AuditWriter:
    """Start with `await task_group.start(writer.run)`; then `await writer.append(decision)` from any task."""

    def __init__(
        self,
        store: Store,
        key: SigningKey,
        *,
        max_batch: int = 512,
        max_delay: float = 0.02,
        queue_size: int = 8192,
        flush_timeout: float = 5.0,
        open_calls_limit: int = 100_000,
        checkpoint_every: int = 2000,
    ) -> None:
        self.store = store
        self.key = key
        self.segment_id = uuid.uuid4().hex
        self.stats = WriterStats()
        self._max_batch = max_batch
        self._max_delay = max_delay
        # Callers commit for themselves when a commit never waits for the disk (nothing to await inside it).
        self._callers_commit = store.inline_commit and not store.needs_sync
        self._held: list[PendingRecord] = []  # taken off the queue by the writer task, not yet committed
        self._wake = anyio.Event()
        self._housekeeping: anyio.abc.TaskGroup | None = None
        self._flush_timeout = flush_timeout
        self._open_calls_limit = open_calls_limit
        self._send, self._receive = anyio.create_memory_object_stream[PendingRecord](max_buffer_size=queue_size)
        self._seq = -1
        self._prev_hash = GENESIS_HASH
        self._open_calls: OrderedDict[str, CallEnd] = OrderedDict()
        self._started = False
        self._stopped = anyio.Event()
        self._checkpoint_every = checkpoint_every
        self._checkpointed_at = 0
        self._checkpointing = False

    async def append(self, decision: DecisionInput) -> AuditReceipt:
        """Record one chain decision; returns once it is committed and synced (raises `AuditWriteError`
        if it is not). Cancelling the caller does not withdraw a record already queued."""
        pending = await self.submit(decision)
        return await pending.wait()

    async def submit(self, decision: DecisionInput) -> PendingRecord:
        """Queue a decision and return at once, so the caller can overlap the commit with other work
        (e.g. forwarding upstream) and `await pending.wait()` before it relies on durability."""
        if not self._started:
            raise AuditWriteError("the audit writer is not running; start it with `await tg.start(writer.run)`")
        pending = PendingRecord(prepare_entry(decision), self._commit_queued)
        try:
            try:
                # No loop turn while the queue has room: the caller goes on (e.g. forwards upstream) at once.
                self._send.send_nowait(pending)
            except anyio.WouldBlock:
                self._commit_queued()
                await self._send.send(pending)  # the queue is still full: wait for room (backpressure)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError) as exc:
            raise AuditWriteError("the audit writer has stopped; the record was not written") from exc
        return pending

    async def run(self, *, task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED) -> None:
        """Open this writer's segment, then commit batches until `aclose()` or cancellation."""
        try:
            await anyio.to_thread.run_sync(self._open_segment)
            async with anyio.create_task_group() as self._housekeeping:
                self._started = True
                task_status.started(self.segment_id)
                next_batch = self._unawaited_batch if self._callers_commit else self._next_batch
                while batch := await next_batch():
                    await self._commit(batch)
        finally:
            self._housekeeping = None
            # Flush what callers already queued: shielded from our cancellation, bounded by our deadline.
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._flush_timeout):
                while batch := self._held_and_queued():
                    await self._commit(batch)
            self._send.close()
            for pending in [*self._held_and_queued(), *self._queued_all()]:
                pending.settle(None, AuditWriteError("the audit writer stopped before this record was flushed"))
            self._receive.close()
            self._stopped.set()

    async def aclose(self) -> None:
        """Stop accepting records, flush the queue and wait for `run` to return."""
        self._send.close()
        self._wake.set()
        if self._started:
            await self._stopped.wait()

    # -- the loop -----------------------------------------------------------------------------------

    def _commit_queued(self, needed: PendingRecord | None = None) -> None:
        """A caller needs a queued record durable: commit everything queued, now, on its task, if the store
        allows it. No task switch, and the records of every call in flight (their requests) come along."""
        if self._callers_commit and self._housekeeping is not None:
            while batch := self._held_and_queued():
                self._commit_now(batch)
        if needed is not None and not needed.settled:
            self._wake.set()  # handed straight to the writer task, or it commits on its own: no delay then

    async def _unawaited_batch(self) -> list[PendingRecord]:
        """What no caller waited for within `max_delay` (e.g. a request record while its call is upstream)."""
        while True:
            if not self._held and not self._receive.statistics().current_buffer_used:
                try:
                    first = await self._receive.receive()
                except anyio.EndOfStream:
                    return []
                self._held.append(first)  # held: a caller may commit it, and a cancellation can't lose it
            with anyio.move_on_after(self._max_delay):
                await self._wake.wait()
            self._wake = anyio.Event()
            if batch := self._held_and_queued():
                return batch

    async def _next_batch(self) -> list[PendingRecord]:
        try:
            first = await self._receive.receive()
        except anyio.EndOfStream:
            return []
        if self.store.inline_commit:
            # No commit runs in a thread while we wait, so let the tasks that are ready now queue theirs:
            # one loop turn is much cheaper than a transaction per record.
            await anyio.lowlevel.cancel_shielded_checkpoint()  # `first` must not be lost to a cancel
        return [first, *self._queued_batch(self._max_batch - 1)]

    def _held_and_queued(self) -> list[PendingRecord]:
        batch, self._held = self._held, []
        return batch + self._queued_batch(self._max_batch - len(batch))

    def _queued_batch(self, limit: int | None = None) -> list[PendingRecord]:
        batch: list[PendingRecord] = []
        limit = self._max_batch if limit is None else limit
        while len(batch) < limit:
            try:
                batch.append(self._receive.receive_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                break
        return batch

    def _queued_all(self) -> list[PendingRecord]:
        leftovers: list[PendingRecord] = []
        while batch := self._queued_batch():
            leftovers.extend(batch)
        return leftovers

    async def _commit(self, batch: list[PendingRecord]) -> None:
        if self._callers_commit:
            self._commit_now(batch)
            return
        # Shielded: once a batch is being written it completes, and its callers must hear about it.
        with anyio.CancelScope(shield=True):
            try:
                entries = [pending.entry for pending in batch]
                if self.store.inline_commit:
                    # On the loop: a worker thread would have to win the GIL back from a busy event
                    # loop (up to sys.getswitchinterval() per hand-off), which costs more than the commit.
                    receipts = self._write_batch(entries)
                else:
                    receipts = await anyio.to_thread.run_sync(self._write_batch, entries)
                if self.store.needs_sync:
                    await anyio.to_thread.run_sync(self.store.sync)
            except Exception as exc:
                self._refused(batch, exc)
                return
        self._acknowledge(batch, receipts)

    def _commit_now(self, batch: list[PendingRecord]) -> None:
        """Commit on the event loop, without an await: nothing else runs until the batch is settled."""
        try:
            receipts = self._write_batch([pending.entry for pending in batch])
        except Exception as exc:
            self._refused(batch, exc)
            return
        self._acknowledge(batch, receipts)

    def _refused(self, batch: list[PendingRecord], exc: Exception) -> None:
        self.stats.failed_batches += 1
        self.stats.failed_records += len(batch)
        for pending in batch:
            pending.settle(None, exc)

    def _acknowledge(self, batch: list[PendingRecord], receipts: list[AuditReceipt]) -> None:
        self.stats.batches += 1
        self.stats.records += len(batch)
        self.stats.largest_batch = max(self.stats.largest_batch, len(batch))
        for pending, receipt in zip(batch, receipts, strict=True):
            pending.settle(receipt, None)
        self._maybe_checkpoint()

    def _maybe_checkpoint(self) -> None:
        if self._checkpointing or self.stats.records - self._checkpointed_at < self._checkpoint_every:
            return
        if self._housekeeping is None:
            return  # shutting down
        self._checkpointing = True
        self._checkpointed_at = self.stats.records
        self._housekeeping.start_soon(self._checkpoint)

    async def _checkpoint(self) -> None:
        try:
            await anyio.to_thread.run_sync(self.store.checkpoint)
        except Exception:
            # Housekeeping only: records stay durable without it, so log and try again later.
            _log.warning("audit store checkpoint failed", exc_info=True)
        finally:
            self._checkpointing = False

    # -- batches (on the loop or in a worker thread, per `Store.inline_commit`) -------------------------

    def _open_segment(self) -> None:
        tail = self.store.lineage_tail(self.key.trusted().keys())
        endorsement = self.key.endorsement
        # The endorsement travels in the first segment after a rotation: the one continuing the old key.
        if tail is None or tail.key_id == self.key.key_id or (endorsement or {}).get("key_id") != tail.key_id:
            endorsement = None
        body = segment_body_for(
            time=format_time(datetime.now(UTC)),
            public_key=self.key.public.public_key,
            prev_record=None if tail is None else tail.record_id,
            endorsement=endorsement,
            writer={"host": socket.gethostname(), "pid": os.getpid()},
        )
        prev_hash = GENESIS_HASH if tail is None else tail.hash
        sealed = seal_record(
            kind="segment",
            segment_id=self.segment_id,
            seq=0,
            prev_hash=prev_hash,
            key_id=self.key.key_id,
            body=canonical_json(body),
            sign=self.key.sign,
        )
        row = RecordRow(
            id=sealed.id,
            segment_id=self.segment_id,
            seq=0,
            kind="segment",
            time=body["time"],
            key_id=self.key.key_id,
            call_id=None,
            phase=None,
            hash=sealed.hash,
            json=sealed.json,
        )
        self.store.append([row], [])
        if self.store.needs_sync:
            self.store.sync()
        self._seq, self._prev_hash = 0, sealed.hash

    def _write_batch(self, entries: Sequence[PreparedEntry]) -> list[AuditReceipt]:
        seq, prev_hash = self._seq, self._prev_hash
        key_id = self.key.key_id
        rows: list[RecordRow] = []
        receipt_rows: list[ReceiptRow] = []
        results: list[AuditReceipt] = []
        opened: dict[str, CallEnd] = {}
        closed: list[str] = []
        for entry in entries:
            seq += 1
            sealed = seal_record(
                kind="decision",
                segment_id=self.segment_id,
                seq=seq,
                prev_hash=prev_hash,
                key_id=key_id,
                body=entry.body,
                sign=self.key.sign,
            )
            prev_hash = sealed.hash
            rows.append(
                RecordRow(
                    id=sealed.id,
                    segment_id=self.segment_id,
                    seq=seq,
                    kind="decision",
                    time=entry.time,
                    key_id=key_id,
                    call_id=entry.call_id,
                    phase=entry.phase,
                    hash=sealed.hash,
                    json=sealed.json,
                )
            )
            end = CallEnd(id=sealed.id, hash=sealed.hash, time=entry.time)
            compound = None
            if entry.call_id is not None and entry.opens_call:
                opened[entry.call_id] = end
            elif entry.call_id is not None and entry.closes_call:
                compound = self._compound_for(entry, end, opened)
                closed.append(entry.call_id)
                receipt_rows.append(
                    ReceiptRow(
                        id=compound.id,
                        call_id=compound.call_id,
                        key_id=key_id,
                        hash=compound.hash,
                        json=orjson.dumps(compound.to_dict()),
                    )
                )
            results.append(AuditReceipt(sealed.id, sealed.hash, sealed.signature, key_id, compound))
        self.store.append(rows, receipt_rows)
        # Only a committed batch moves the chain head; a failed one is retried from the same place.
        self._seq, self._prev_hash = seq, prev_hash
        self._remember_calls(opened, closed)
        return results

    def _compound_for(self, entry: PreparedEntry, end: CallEnd, opened: Mapping[str, CallEnd]) -> CompoundReceipt:
        call_id = entry.call_id
        assert call_id is not None
        request: CallEnd | None = end
        response: CallEnd | None = None
        if entry.phase == "response":
            request = opened.get(call_id) or self._open_calls.get(call_id) or self.store.find_request(call_id)
            response = end
        return receipt_for(
            call_id=call_id, request=request, response=response, closing_id=end.id, key_id=self.key.key_id
        )

    def _remember_calls(self, opened: Mapping[str, CallEnd], closed: Sequence[str]) -> None:
        for call_id in closed:
            self._open_calls.pop(call_id, None)
        for call_id, end in opened.items():
            if call_id not in closed:
                self._open_calls[call_id] = end
        # Calls whose response never comes must not grow memory forever; the store still has them.
        while len(self._open_calls) > self._open_calls_limit:
            self._open_calls.popitem(last=False)


@asynccontextmanager
async def open_audit_writer(store: Store, key: SigningKey, **options: Any) -> AsyncIterator[AuditWriter]:
    """Run an `AuditWriter` for the duration of the block; leaving it flushes and stops the writer."""
    writer = AuditWriter(store, key, **options)
    async with anyio.create_task_group() as tg:
        await tg.start(writer.run)
        try:
            yield writer
        finally:
            with anyio.CancelScope(shield=True):
                await writer.aclose()
