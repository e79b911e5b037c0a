"""The audit writer process: a chain segment written from a process of its own, fed JSON lines on stdin.

`python -m mcp_interceptors.audit.process --store TARGET --key-file PATH [--receipts]`. The first line is
`{"open": true}`: the process opens its segment and answers `{"segment_id": ...}` (or `{"error": why}`).
Every later line is a batch, a JSON array of records, each a decision in wire form (`decision_to_wire`) or
`{"prepared": [...]}` (a body the sender canonicalised itself); its answer, once the records are committed
(and synced, on a FULL store), is one line: `{"n": count}`, plus `"receipts"` (each
`AuditReceipt.to_wire()`) with `--receipts`, plus `"failed": {index: why}` for records with no canonical
form; or `{"error": why}` when the store refused the batch. Batches are answered in the order they came,
and every batch read in one go is committed in one transaction (group commit). End of input ends the
process, after answering everything read; SIGINT and SIGTERM are ignored (a terminal's Ctrl-C, or a service
manager stopping a whole process group, reaches us too, and the gateway closes our input once it has
flushed).

The gateway runs one so that building, hashing, signing and storing its records cost its event loop only
the encoding of each decision (see `gateway.audit_process`).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import orjson

from mcp_interceptors.audit.records import DecisionInput, PreparedEntry, prepare_entry
from mcp_interceptors.audit.segment import Segment
from mcp_interceptors.audit.signing import load_key
from mcp_interceptors.audit.store import Store
from mcp_interceptors.audit.targets import open_store

_log = logging.getLogger("mcp_interceptors.audit.process")

#: Every `checkpoint_every` records, the WAL is copied back into the database (SQLite; a no-op elsewhere).
CHECKPOINT_EVERY: Final = 2000
#: Below malloc's mmap threshold (128 KiB): a larger buffer is mapped, shrunk and unmapped on every read.
_READ_SIZE: Final = 1 << 16


# -- the wire form of a decision ---------------------------------------------------------------------------


def decision_to_wire(decision: DecisionInput) -> bytes:
    """The decision as JSON for the writer process: its fields, the payloads as they are (the process
    canonicalises them). Raises `TypeError` for a value orjson cannot write (an integer past 64 bits, a
    non-string key, a lone surrogate): the caller then sends `prepared_to_wire(prepare_entry(decision))`.
    A float NaN or infinity is written as null, as the gateway's own encoding sends it on: the record hashes
    the payload as dispatched (in process, `canonical_json` refuses it instead)."""
    wire: dict[str, Any] = {
        "timestamp": decision.timestamp,
        "event": decision.event,
        "phase": decision.phase,
        "direction": decision.direction,
        "decision": decision.decision,
        "status": decision.status,
        "session_id": decision.session_id,
        "principal": decision.principal,
        "server": decision.server,
        "call_id": decision.call_id,
        "interceptors": decision.interceptors,
        "intent_payload": decision.intent_payload,
        "error": decision.error,
    }
    if decision.redacted:
        wire["redacted"] = decision.redacted
    if decision.trace_id is not None:
        wire["trace_id"] = decision.trace_id
    if decision.target is not None:
        wire["target"] = decision.target
    if decision.executed_payload is decision.intent_payload:
        wire["same"] = True  # hashed once, as in-process (`body_for`)
    else:
        wire["executed_payload"] = decision.executed_payload
    return orjson.dumps(wire)


def decision_from_wire(wire: Mapping[str, Any]) -> DecisionInput:
    intent = wire["intent_payload"]
    return DecisionInput(
        timestamp=datetime.fromisoformat(wire["timestamp"]),
        event=wire["event"],
        phase=wire["phase"],
        direction=wire["direction"],
        decision=wire["decision"],
        status=wire["status"],
        session_id=wire["session_id"],
        principal=wire["principal"],
        server=wire["server"],
        call_id=wire["call_id"],
        interceptors=wire["interceptors"],
        intent_payload=intent,
        executed_payload=intent if wire.get("same") else wire["executed_payload"],
        error=wire["error"],
        redacted=wire.get("redacted", ()),
        trace_id=wire.get("trace_id"),
        target=wire.get("target"),
    )


def prepared_to_wire(entry: PreparedEntry) -> bytes:
    body, time, phase, call_id, opens_call, closes_call = entry
    # As text: parsed and written again, a canonical number could change its form (1e+21 to 1e21).
    return orjson.dumps({"prepared": [body.decode(), time, phase, call_id, opens_call, closes_call]})


def entry_from_wire(wire: Mapping[str, Any]) -> PreparedEntry:
    """One record of a batch line, prepared; raises what `prepare_entry` raises for a bad decision."""
    prepared = wire.get("prepared")
    if prepared is None:
        return prepare_entry(decision_from_wire(wire))
    body, time, phase, call_id, opens_call, closes_call = prepared
    return PreparedEntry(body.encode(), time, phase, call_id, opens_call, closes_call)


# -- the process -------------------------------------------------------------------------------------------


class _Writer:
    def __init__(self, store_target: str, key_file: str, *, receipts: bool) -> None:
        self._store_target = store_target
        self._key_file = key_file
        self._receipts = receipts
        self._segment: Segment | None = None
        self._since_checkpoint = 0
        self._checkpointing: threading.Thread | None = None

    def serve(self, read_fd: int, write_fd: int) -> None:
        unended: list[bytes] = []  # the start of a line whose end has not come yet
        try:
            while chunk := os.read(read_fd, _READ_SIZE):
                unended.append(chunk)
                if b"\n" not in chunk:
                    continue  # a long line: joined once, when its end comes
                lines = b"".join(unended).split(b"\n")
                unended = [lines.pop()]
                answers = self._answer([line for line in lines if line.strip()])
                if answers:
                    _write_all(write_fd, b"".join(orjson.dumps(answer) + b"\n" for answer in answers))
                self._maybe_checkpoint()
        finally:
            if self._checkpointing is not None:
                self._checkpointing.join()
            if self._segment is not None:
                self._segment.store.close()

    def _answer(self, lines: Sequence[bytes]) -> list[dict[str, Any]]:
        answers: list[dict[str, Any]] = []
        batches: list[list[PreparedEntry | str]] = []
        for line in lines:
            try:
                message = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                message = exc
            if isinstance(message, list):
                batches.append([_entry_or_error(item) for item in message])
                continue
            answers.extend(self._commit(batches))  # in order: what came before this line is answered first
            batches = []
            if isinstance(message, dict) and message.get("open") is True:
                answers.append(self._open())
            else:
                answers.append({"error": f"not a batch of records nor an open request: {line[:200]!r}"})
        answers.extend(self._commit(batches))
        return answers

    def _open(self) -> dict[str, Any]:
        if self._segment is None:
            try:
                segment = Segment(open_store(self._store_target), load_key(self._key_file))
                segment.open()
            except Exception as exc:
                return {"error": f"cannot open the audit segment: {exc}"}
            self._segment = segment
        return {"segment_id": self._segment.segment_id, "key_id": self._segment.key.key_id}

    def _commit(self, batches: Sequence[list[PreparedEntry | str]]) -> list[dict[str, Any]]:
        if not batches:
            return []
        segment = self._segment
        if segment is None:
            return [{"error": "the audit segment is not open"} for _ in batches]
        entries = [entry for items in batches for entry in items if not isinstance(entry, str)]
        try:
            receipts = iter(segment.write(entries) if entries else [])
            if entries and segment.store.needs_sync:
                segment.store.sync()
        except Exception as exc:
            _log.error("a batch of %d records was not written: %s", len(entries), exc)
            return [{"error": str(exc)} for _ in batches]
        self._since_checkpoint += len(entries)
        answers = []
        for items in batches:
            answer: dict[str, Any] = {"n": len(items)}
            failed = {str(index): item for index, item in enumerate(items) if isinstance(item, str)}
            if failed:
                answer["failed"] = failed
            if self._receipts:
                answer["receipts"] = [None if isinstance(item, str) else next(receipts).to_wire() for item in items]
            answers.append(answer)
        return answers

    def _maybe_checkpoint(self) -> None:
        """Every `CHECKPOINT_EVERY` records, copy the WAL back into the database, in a thread: the batches that
        arrive meanwhile are answered without waiting for it (SQLite lets the copy and the commits overlap)."""
        segment = self._segment
        if segment is None or self._since_checkpoint < CHECKPOINT_EVERY:
            return
        if self._checkpointing is not None and self._checkpointing.is_alive():
            return
        self._since_checkpoint = 0
        self._checkpointing = threading.Thread(target=_checkpoint, args=(segment.store,), daemon=True)
        self._checkpointing.start()


def _checkpoint(store: Store) -> None:
    try:
        store.checkpoint()
    except Exception:
        # Housekeeping only: records stay durable without it, so log and try again later.
        _log.warning("audit store checkpoint failed", exc_info=True)


def _entry_or_error(item: Any) -> PreparedEntry | str:
    try:
        return entry_from_wire(item)
    except Exception as exc:  # one bad record fails alone, not its batch
        return f"{type(exc).__name__}: {exc}"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcp_interceptors.audit.process", description=__doc__)
    parser.add_argument("--store", required=True, help="SQLite path or URL, or a postgresql:// URL")
    parser.add_argument("--key-file", required=True)
    parser.add_argument("--receipts", action="store_true", help="answer each batch with its records' receipts")
    args = parser.parse_args(argv)
    # It ends when its input does (the gateway closed it, or exited): a Ctrl-C or a service manager's SIGTERM
    # sent to the whole group must not end it before the gateway has flushed what it queued.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="audit writer: %(message)s")
    _Writer(args.store, args.key_file, receipts=args.receipts).serve(sys.stdin.fileno(), sys.stdout.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main())
