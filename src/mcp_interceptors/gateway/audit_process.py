"""The gateway's audit writer when its chain segment lives in a writer process (`mcp_interceptors.audit.process`).

The event loop only encodes each decision (one orjson call) and queues it; the process canonicalises,
hashes, links, signs and commits. The contract is the in-process `AuditWriter`'s: `submit` queues, and
`await pending.wait()` returns once the record is committed (raising `AuditWriteError` if it is not). One
batch is with the process at a time, and everything queued while it is goes as the next: one line, one
transaction, one answer. A record nobody waits for (a request's, while its call is upstream) goes within
`max_delay`. If the process dies, the records it had not acknowledged fail, and so does every record
after them until a new process has opened its segment (`restart_delay` later): the gateway fails closed,
and recovers by itself.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections import deque
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.abc
import orjson

import mcp_interceptors
from mcp_interceptors.audit.process import decision_to_wire, prepared_to_wire
from mcp_interceptors.audit.records import DecisionInput, prepare_entry
from mcp_interceptors.audit.segment import AuditReceipt
from mcp_interceptors.audit.writer import (
    BATCH_AFTER_TURNS,
    AuditWriteError,
    PendingRecord,
    WriterStats,
    call_after_turns,
)
from mcp_interceptors.gateway.jsonrpc.spawn import spawn_piped

_log = logging.getLogger(__name__)
#: Put first on the writer process's path, so it runs exactly the code we do.
_SOURCE: Final = str(Path(mcp_interceptors.__file__).resolve().parents[1])
_STOP_S: Final = 5.0
#: The longest wait between two attempts to start a writer process again.
_RESTART_MAX_S: Final = 30.0


class _Batch:
    """Records sent (or to be sent) in one line, and the futures of the callers waiting for its answer."""

    __slots__ = ("answered", "due", "records", "since", "waiters")

    def __init__(self, since: float) -> None:
        #: When its first record was queued (the loop's clock), and whether it is to go as soon as the process is
        #: free (a record of it is waited for, or was queued `max_delay` ago).
        self.since = since
        self.due = False
        self.records: list[_PipedRecord] = []
        #: One future per waiting caller, not one shared: a caller cancelled while it waits cancels only its own.
        self.waiters: list[asyncio.Future[None]] = []
        self.answered = False

    async def wait(self) -> None:
        if not self.answered:
            waiter = asyncio.get_running_loop().create_future()
            self.waiters.append(waiter)
            await waiter

    def answer(self) -> None:
        self.answered = True
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)


class _PipedRecord(PendingRecord):
    batch: _Batch

    async def wait(self) -> AuditReceipt:
        if not self.settled:
            self.demand(self)  # its batch goes a few loop turns from now, or when the process is free
            await self.batch.wait()
        if self.error is not None:
            raise AuditWriteError(f"audit record not written: {self.error}") from self.error
        return self.receipt or _NO_RECEIPT


#: What a record's wait returns when the gateway did not ask for receipts (`audit.receipts: false`).
_NO_RECEIPT: Final = AuditReceipt(id="", hash="", signature="", key_id="")


class ProcessAuditWriter:
    """Start with `await task_group.start(writer.run)`; then `await writer.submit(decision)` from any task.

    The receipts `wait` returns are the records' own with `receipts=True` (the process then sends them
    back); without, they are empty (`id == ""`), which is all a gateway without `audit.receipts` needs.
    """

    def __init__(
        self,
        store: str,
        key_file: Path,
        *,
        receipts: bool = False,
        max_delay: float = 0.02,
        flush_timeout: float = 5.0,
        restart_delay: float = 1.0,
    ) -> None:
        self.store = store
        self.key_file = key_file
        self.receipts = receipts
        self.segment_id = ""
        self.stats = WriterStats()
        self._max_delay = max_delay
        self._flush_timeout = flush_timeout
        self._restart_delay = restart_delay
        #: The batch records are queued in, until it is sent (None: nothing queued).
        self._next: _Batch | None = None
        self._sent: deque[_Batch] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stdin: int | None = None
        self._outgoing = bytearray()
        self._failure: AuditWriteError | None = AuditWriteError("the audit writer process is not running")
        self._opening: asyncio.Future[Any] | None = None
        #: Which process the pipes are with: a replaced one's late callbacks are ignored.
        self._generation = 0
        #: Set when the current process died, or the writer is closing (then `_closing` is set too).
        self._gone = anyio.Event()
        self._closing = anyio.Event()
        self._stopped = anyio.Event()

    async def append(self, decision: DecisionInput) -> AuditReceipt:
        pending = await self.submit(decision)
        return await pending.wait()

    async def submit(self, decision: DecisionInput) -> PendingRecord:
        """Queue a decision and return at once; `await pending.wait()` before relying on its durability."""
        if self._failure is not None:
            raise AuditWriteError(f"{self._failure}; the record was not written")
        try:
            wire = decision_to_wire(decision)
        except TypeError:  # a value orjson cannot write: canonicalised here (or refused, as in-process)
            wire = prepared_to_wire(prepare_entry(decision))
        pending = _PipedRecord(decision.event, decision.phase, decision.call_id, self._demand, wire=wire)
        batch = self._next
        if batch is None:
            assert self._loop is not None  # set before `_failure` is cleared
            batch = self._next = _Batch(self._loop.time())
            if self._timer is None:
                self._timer = self._loop.call_at(batch.since + self._max_delay, self._flush_unawaited)
        pending.batch = batch
        batch.records.append(pending)
        return pending

    async def run(self, *, task_status: anyio.abc.TaskStatus[str] = anyio.TASK_STATUS_IGNORED) -> None:
        """Start the process and open its segment; then serve until cancelled or closed, and flush what is queued.

        A process that dies is replaced, `restart_delay` later (doubling, up to 30 s, while new ones fail to
        start); the new one opens a segment of its own, linked to where the chain stopped. Until it has, every
        record fails: the gateway fails closed, and recovers by itself. The first process failing to start
        raises here."""
        self._loop = asyncio.get_running_loop()
        try:
            await self._serve(task_status)
            delay = self._restart_delay
            while not self._closing.is_set():
                with anyio.move_on_after(delay):
                    await self._closing.wait()
                if self._closing.is_set():
                    break
                try:
                    await self._serve(None)
                    delay = self._restart_delay
                except (OSError, AuditWriteError) as exc:
                    delay = min(delay * 2, _RESTART_MAX_S)
                    _log.error("the audit writer process did not start again (%s); next try in %g s", exc, delay)
        finally:
            stats = self.stats
            _log.info(
                "audit writer process: %d records in %d batches (largest %d), %d refused",
                stats.records,
                stats.batches,
                stats.largest_batch,
                stats.failed_records,
            )
            self._stopped.set()

    async def _serve(self, task_status: anyio.abc.TaskStatus[str] | None) -> None:
        """Run one process until it dies or the writer closes (flushing the queue then)."""
        loop = asyncio.get_running_loop()
        argv = [sys.executable, "-m", "mcp_interceptors.audit.process", "--store", self.store]
        argv += ["--key-file", str(self.key_file)] + (["--receipts"] if self.receipts else [])
        path = os.pathsep.join(filter(None, [_SOURCE, os.environ.get("PYTHONPATH")]))
        spawned = await spawn_piped(argv, {**os.environ, "PYTHONPATH": path})
        process, stdin_fd, stdout_fd = spawned.process, spawned.stdin_fd, spawned.stdout_fd
        self._generation += 1
        generation, self._gone = self._generation, anyio.Event()
        reader = os.fdopen(stdout_fd, "rb", buffering=0)
        transport: asyncio.BaseTransport | None = None
        try:
            transport, _ = await loop.connect_read_pipe(lambda: _Replies(self, generation), reader)
            self._stdin = stdin_fd
            self.segment_id = await self._open()
            self._failure = None
            if task_status is not None:
                task_status.started(self.segment_id)
            else:
                _log.warning("audit writer process started again: segment %s continues the chain", self.segment_id)
            if self._closing.is_set():
                self._gone.set()
            await self._gone.wait()
        finally:
            # Flush what callers queued: shielded from our cancellation, bounded by our deadline.
            with anyio.CancelScope(shield=True):
                if self._failure is None:
                    self._failure = AuditWriteError("the audit writer has stopped")
                    with anyio.move_on_after(self._flush_timeout):
                        while self._next is not None or self._sent:
                            self._send_queued()
                            if self._sent:
                                await self._sent[-1].wait()
                self._fail_all(AuditWriteError("the audit writer stopped before this record was flushed"))
                self._stdin = None
                self._outgoing.clear()
                loop.remove_writer(stdin_fd)
                os.close(stdin_fd)  # end of its input: it answers what it read, then exits
                with anyio.move_on_after(_STOP_S):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()
                if transport is not None:
                    transport.close()
                else:
                    reader.close()

    async def _open(self) -> str:
        """Have the process open its segment (its answer to the first line); returns the segment id."""
        assert self._loop is not None
        self._opening = self._loop.create_future()
        self._write(b'{"open":true}\n')
        answer = await self._opening
        self._opening = None
        if not isinstance(answer, dict) or not isinstance(answer.get("segment_id"), str):
            why = answer.get("error") if isinstance(answer, dict) else None
            raise AuditWriteError(f"the audit writer process did not open its segment: {why or answer!r}")
        return str(answer["segment_id"])

    async def aclose(self) -> None:
        """Stop accepting records, flush the queue and wait for `run` to return."""
        self._closing.set()
        self._gone.set()
        if self._loop is not None:
            await self._stopped.wait()

    # -- the pipe ----------------------------------------------------------------------------------

    def _demand(self, pending: PendingRecord) -> None:
        # Its batch goes `BATCH_AFTER_TURNS` loop turns from now (the records other tasks queue meanwhile go
        # along), or, while the process has the previous one, as soon as that is answered.
        batch: _Batch | None = getattr(pending, "batch", None)
        if batch is None or batch is not self._next or batch.due:
            return  # sent already, or asked for already
        batch.due = True
        if not self._sent and self._loop is not None:
            call_after_turns(self._loop, BATCH_AFTER_TURNS, self._send_if_queued, batch)

    def _send_if_queued(self, batch: _Batch) -> None:
        if batch is self._next:  # else it went already (with its timer's flush, a close, the process's death)
            self._send_queued()

    def _send_queued(self) -> None:
        batch = self._next
        if self._sent or batch is None:
            return
        self._next = None
        self._sent.append(batch)
        self._write(b"[" + b",".join(record.wire for record in batch.records) + b"]\n")

    def _flush_unawaited(self) -> None:
        """Records queued `max_delay` ago that nobody waited for go now, or next. One timer serves every batch
        (it is not cancelled when a batch goes, only re-armed for the one queued since), so a busy gateway
        arms one per `max_delay`, not one per batch."""
        self._timer = None
        batch = self._next
        if batch is None:
            return
        assert self._loop is not None
        due = batch.since + self._max_delay
        if self._loop.time() < due:
            self._timer = self._loop.call_at(due, self._flush_unawaited)
            return
        batch.due = True
        self._send_queued()

    def _write(self, line: bytes) -> None:
        if self._stdin is None:
            self._fail_all(AuditWriteError("the audit writer process has stopped"))
            return
        if self._outgoing:
            self._outgoing += line
            return
        try:
            written = os.write(self._stdin, line)
        except BlockingIOError:
            written = 0
        except OSError as exc:  # its end of the pipe is gone: it died
            self._died(f"cannot write to the audit writer process: {exc}")
            return
        if written < len(line):
            self._outgoing += line[written:]
            assert self._loop is not None
            self._loop.add_writer(self._stdin, self._write_more)

    def _write_more(self) -> None:
        assert self._stdin is not None and self._loop is not None
        try:
            written = os.write(self._stdin, self._outgoing)
        except BlockingIOError:
            return
        except OSError as exc:
            self._loop.remove_writer(self._stdin)
            self._died(f"cannot write to the audit writer process: {exc}")
            return
        del self._outgoing[:written]
        if not self._outgoing:
            self._loop.remove_writer(self._stdin)

    def _answered(self, line: bytes) -> None:
        if self._opening is not None:
            try:
                self._opening.set_result(orjson.loads(line))
            except orjson.JSONDecodeError as exc:
                self._opening.set_exception(AuditWriteError(f"malformed answer from the audit writer process: {exc}"))
            return
        if not self._sent:
            self._died("the audit writer process answered a batch it was not sent")
            return
        batch = self._sent.popleft()
        try:
            self._settle(batch, orjson.loads(line))
        except Exception as exc:  # a malformed answer: the records it leaves unsettled fail, and nobody hangs
            self._fail(batch, AuditWriteError(f"malformed answer from the audit writer process: {exc!r}"))
        batch.answer()
        queued = self._next
        if queued is not None and queued.due:  # someone waits on what queued meanwhile: it is the next batch
            self._send_queued()

    def _settle(self, batch: _Batch, answer: Any) -> None:
        if "error" in answer:
            _log.error("audit batch of %d records not written: %s", len(batch.records), answer["error"])
            self._fail(batch, AuditWriteError(str(answer["error"])))
            return
        failed = answer.get("failed") or {}
        receipts = answer.get("receipts")
        self.stats.batches += 1
        self.stats.largest_batch = max(self.stats.largest_batch, len(batch.records))
        for index, record in enumerate(batch.records):
            why = failed.get(str(index))
            if why is not None:
                self.stats.failed_records += 1
                record.settle(None, AuditWriteError(why))
            else:
                self.stats.records += 1
                record.settle(_NO_RECEIPT if receipts is None else AuditReceipt.from_wire(receipts[index]), None)

    def _fail(self, batch: _Batch, error: AuditWriteError) -> None:
        self.stats.failed_batches += 1
        for record in batch.records:
            if not record.settled:
                self.stats.failed_records += 1
                record.settle(None, error)

    def _died(self, why: str) -> None:
        if self._failure is None:
            restart = "" if self._closing.is_set() else f"; a new one starts in {self._restart_delay:g} s"
            _log.error("%s: every audited call fails until a writer process runs again%s", why, restart)
        self._failure = AuditWriteError(why)
        self._stdin = None
        self._fail_all(self._failure)
        self._gone.set()

    def _fail_all(self, error: AuditWriteError) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        unsent, self._next = self._next, None
        batches = [*self._sent, *([unsent] if unsent is not None else [])]
        self._sent.clear()
        for batch in batches:
            self._fail(batch, error)
            batch.answer()


class _Replies(asyncio.Protocol):
    """The answers of one writer process (`generation`); nothing once another has replaced it."""

    def __init__(self, writer: ProcessAuditWriter, generation: int) -> None:
        self._writer = writer
        self._generation = generation
        self._pending = b""

    def data_received(self, data: bytes) -> None:
        if self._generation != self._writer._generation:
            return
        lines = (self._pending + data).split(b"\n")
        self._pending = lines.pop()
        for line in lines:
            if line:
                self._writer._answered(line)

    def connection_lost(self, exc: Exception | None) -> None:
        writer = self._writer
        if self._generation != writer._generation:
            return
        if writer._opening is not None and not writer._opening.done():
            writer._opening.set_result({"error": "the process exited (its errors are above)"})
        elif writer._sent or writer._failure is None:
            writer._died("the audit writer process exited")
