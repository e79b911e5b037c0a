"""The audit writer: links, signs and group-commits records; `append` returns once durable.

Callers canonicalise their decision on their own task, queue it, and wait. On a store that commits on the
event loop without a sync, everything queued is committed in one synchronous step `BATCH_AFTER_TURNS` loop
turns after the first caller waits (on asyncio; elsewhere on that caller's task, after one turn); records
nobody waits for are committed by the writer task within `max_delay`.
Otherwise the writer task takes everything queued while the previous commit was in flight as the next
batch. Either way: one transaction and at most one fsync per batch. The writer owns one chain segment,
opened (and made durable) before `task_status.started()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, cast

import anyio
import anyio.abc
import anyio.lowlevel

from mcp_interceptors.audit.records import AuditError, DecisionInput, PreparedEntry, prepare_entry
from mcp_interceptors.audit.segment import AuditReceipt, Segment
from mcp_interceptors.audit.signing import SigningKey
from mcp_interceptors.audit.store import Store

_log = logging.getLogger(__name__)

#: Loop turns between the first wait on a record that is not durable yet and the commit (or the send, with a
#: writer process) of everything queued by then. Each turn runs what was ready for the loop, so on a busy
#: gateway the records of the calls it is handling join the batch (one transaction for more calls); on an
#: idle one the turns pass in microseconds and add no latency worth measuring.
BATCH_AFTER_TURNS: Final = 4


def call_after_turns(loop: asyncio.AbstractEventLoop, turns: int, callback: Callable[..., object], *args: Any) -> None:
    """Run `callback(*args)` `turns` loop turns from now (at least one): one `call_soon` per turn, so each
    turn first runs what was ready for the loop then."""
    if turns > 1:
        loop.call_soon(call_after_turns, loop, turns - 1, callback, *args)
    else:
        loop.call_soon(callback, *args)


class AuditWriteError(AuditError):
    """The record was not made durable: the writer is not running or the store refused the batch."""


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
    """A queued record: `await pending.wait()` returns its receipt once it is durable.

    `event`, `phase` and `call_id` name it in errors; `entry` is what an in-process writer seals, `wire` what
    a writer process is sent (`audit.process`)."""

    event: str
    phase: str
    call_id: str | None
    demand: Callable[[PendingRecord], None]
    entry: PreparedEntry | None = None
    wire: bytes = b""
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
            self.demand(self)  # its writer commits it now or a few loop turns from now, or sends its batch
        if not self.settled:
            await self.done.wait()
        if self.error is not None:
            raise AuditWriteError(f"audit record not written: {self.error}") from self.error
        assert self.receipt is not None  # set together with `settled`
        return self.receipt


class RecordWriter(Protocol):
    """What the gateway records through: an `AuditWriter`, or a writer process's client."""

    segment_id: str
    stats: WriterStats

    async def submit(self, decision: DecisionInput) -> PendingRecord: ...

    async def append(self, decision: DecisionInput) -> AuditReceipt: ...


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
        self.segment = Segment(store, key, open_calls_limit=open_calls_limit)
        self.segment_id = self.segment.segment_id
        self.stats = WriterStats()
        self._max_batch = max_batch
        self._max_delay = max_delay
        # Callers commit for themselves when a commit never waits for the disk (nothing to await inside it).
        self._callers_commit = store.inline_commit and not store.needs_sync
        self._held: list[PendingRecord] = []  # taken off the queue by the writer task, not yet committed
        self._wake = anyio.Event()
        self._housekeeping: anyio.abc.TaskGroup | None = None
        self._flush_timeout = flush_timeout
        self._send, self._receive = anyio.create_memory_object_stream[PendingRecord](max_buffer_size=queue_size)
        self._started = False
        self._stopped = anyio.Event()
        self._checkpoint_every = checkpoint_every
        self._checkpointed_at = 0
        self._checkpointing = False
        #: The loop that commits after `BATCH_AFTER_TURNS` turns (asyncio's; None on another event loop).
        self._loop: asyncio.AbstractEventLoop | None = None
        self._commit_due = False

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
        entry = prepare_entry(decision)
        pending = PendingRecord(decision.event, entry.phase, entry.call_id, self._commit_queued, entry)
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
            with contextlib.suppress(RuntimeError):  # not asyncio (trio): the waiting caller commits instead
                self._loop = asyncio.get_running_loop()
            await anyio.to_thread.run_sync(self.segment.open)
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
        """A caller needs a queued record durable: commit everything queued, if the store allows it on the loop:
        `BATCH_AFTER_TURNS` loop turns from now (the records other tasks queue meanwhile come along), or now
        without a loop to count them on. No task switch, and the records of every call in flight (their
        requests) come along."""
        if self._callers_commit and self._housekeeping is not None:
            if needed is not None and self._loop is not None:
                if not self._commit_due:
                    self._commit_due = True
                    # The caller's own wait took one turn already (`PendingRecord.wait`).
                    call_after_turns(self._loop, BATCH_AFTER_TURNS - 1, self._commit_due_records)
                return
            while batch := self._held_and_queued():
                self._commit_now(batch)
        if needed is not None and not needed.settled:
            self._wake.set()  # handed straight to the writer task, or it commits on its own: no delay then

    def _commit_due_records(self) -> None:
        self._commit_due = False
        self._commit_queued()

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
                entries = _entries(batch)
                if self.store.inline_commit:
                    # On the loop: a worker thread would have to win the GIL back from a busy event
                    # loop (up to sys.getswitchinterval() per hand-off), which costs more than the commit.
                    receipts = self.segment.write(entries)
                else:
                    receipts = await anyio.to_thread.run_sync(self.segment.write, entries)
                if self.store.needs_sync:
                    await anyio.to_thread.run_sync(self.store.sync)
            except Exception as exc:
                self._refused(batch, exc)
                return
        self._acknowledge(batch, receipts)

    def _commit_now(self, batch: list[PendingRecord]) -> None:
        """Commit on the event loop, without an await: nothing else runs until the batch is settled."""
        try:
            receipts = self.segment.write(_entries(batch))
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


def _entries(batch: list[PendingRecord]) -> list[PreparedEntry]:
    entries = [pending.entry for pending in batch]
    assert None not in entries  # an in-process writer prepares every record it queues
    return cast(list[PreparedEntry], entries)


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
