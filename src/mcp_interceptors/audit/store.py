"""The storage seam: what the writer and the commands need from an audit store, and `open_store`.

`sqlite.py` and `postgres.py` implement `Store`; `JsonlSource` reads an export for offline checks. Stores
are synchronous: the writer calls them on the event loop or in a worker thread (`Store.inline_commit`),
the commands call them directly.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

import orjson

from mcp_interceptors.audit.records import AuditError, CallEnd

ItemKind = Literal["record", "receipt", "index"]
RECORD_INDEX_COLUMNS = ("id", "segment_id", "seq", "kind", "time", "key_id", "call_id", "phase", "hash")
RECEIPT_INDEX_COLUMNS = ("id", "call_id", "key_id", "hash")
#: What a store inserts, in the order of `RecordRow` and `ReceiptRow` (whose JSON goes last: `row_params`).
RECORD_COLUMNS = (*RECORD_INDEX_COLUMNS, "record")
RECEIPT_COLUMNS = (*RECEIPT_INDEX_COLUMNS, "receipt")
RECORDS_TABLE = "audit_records"
RECEIPTS_TABLE = "audit_receipts"


class StoreError(AuditError):
    """The store is missing, unreadable, or refused a write."""


class RecordRow(NamedTuple):
    """One record as the store keeps it: the exact JSON plus the columns it is looked up by."""

    id: str
    segment_id: str
    seq: int
    kind: str
    time: str
    key_id: str
    call_id: str | None
    phase: str | None
    hash: str
    json: bytes


class ReceiptRow(NamedTuple):
    id: str
    call_id: str
    key_id: str
    hash: str
    json: bytes


def row_params(row: RecordRow | ReceiptRow) -> tuple[Any, ...]:
    """A row's values for an INSERT of `RECORD_COLUMNS` or `RECEIPT_COLUMNS`: its fields, the JSON as text."""
    return (*row[:-1], row.json.decode())


def insert_sql(table: str, columns: Sequence[str], marker: str) -> str:
    """`INSERT INTO table (columns) VALUES (marker, ...)`, with the driver's parameter `marker`."""
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(marker for _ in columns)})"


@dataclass(frozen=True)
class SegmentTail:
    """The last record of a segment, which a new segment of the same key lineage links to."""

    segment_id: str
    key_id: str
    record_id: str
    seq: int
    hash: str


@runtime_checkable
class RecordSource(Protocol):
    """Read access, enough for verify and export."""

    def iter_records(self, after_pos: int = 0) -> Iterator[tuple[int, bytes]]:
        """(pos, record JSON) in storage (commit) order, starting after `after_pos`."""
        ...

    def iter_snapshot(self, *, index: bool = False) -> Iterator[tuple[ItemKind, bytes]]:
        """Every record in storage order, then every receipt, from one consistent read snapshot
        (a live writer commits a record and its receipt together; both reads must see the same state).

        With `index`, a store follows each record and receipt with an `"index"` item: the JSON object
        of the columns it finds that row by (`RECORD_INDEX_COLUMNS`, `RECEIPT_INDEX_COLUMNS`), so
        verification can check them against the JSON. An export has no such columns and yields none."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Store(RecordSource, Protocol):
    """A durable audit store: a batch is durable once `append` returned and, if `needs_sync`, `sync()` too."""

    inline_commit: bool
    """True when `append` never waits on a disk flush or the network, so the writer may call it on the
    event loop (no thread hop and no GIL hand-off per batch); False sends it to a worker thread."""

    needs_sync: bool
    """True when committed batches are durable against power loss only after `sync()`."""

    def append(self, records: Sequence[RecordRow], receipts: Sequence[ReceiptRow]) -> None:
        """Commit one batch in one transaction (all or nothing)."""
        ...

    def sync(self) -> None:
        """Flush every committed batch to stable storage (the writer calls it in a worker thread)."""
        ...

    def checkpoint(self) -> None:
        """Housekeeping the writer runs in a worker thread every few thousand records."""
        ...

    def lineage_tail(self, key_ids: Collection[str]) -> SegmentTail | None:
        """The last record of the most recently started segment signed by one of `key_ids`."""
        ...

    def find_request(self, call_id: str) -> CallEnd | None:
        """The latest request-phase record of `call_id`, for a compound receipt."""
        ...

    def get_record(self, record_id: str) -> bytes | None: ...

    def get_receipt(self, record_id: str) -> bytes | None: ...

    def tail(self, limit: int) -> list[tuple[int, bytes]]:
        """The last `limit` records in storage order."""
        ...

    def records_at(self, positions: Collection[int]) -> list[tuple[int, bytes]]:
        """The records at these positions that exist now, in storage order."""
        ...


class JsonlSource:
    """A read-only source over `audit export --jsonl` output (records first, then receipts)."""

    def __init__(self, path: Path) -> None:
        if not path.exists():
            raise StoreError(f"audit export {path} does not exist")
        self._path = path

    def _lines(self) -> Iterator[bytes]:
        try:
            with self._path.open("rb") as handle:
                for line in handle:
                    if line.strip():
                        yield line.rstrip(b"\r\n")
        except OSError as exc:
            raise StoreError(f"cannot read the audit export {self._path}: {exc.strerror or exc}") from exc

    def iter_records(self, after_pos: int = 0) -> Iterator[tuple[int, bytes]]:
        pos = 0
        for line in self._lines():
            if _kind_of(line) == "receipt":
                continue
            pos += 1
            if pos > after_pos:
                yield pos, line

    def iter_snapshot(self, *, index: bool = False) -> Iterator[tuple[ItemKind, bytes]]:
        for _, line in self.iter_records():
            yield "record", line
        for line in self._lines():
            if _kind_of(line) == "receipt":
                yield "receipt", line

    def close(self) -> None:
        pass


def _kind_of(line: bytes) -> object:
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return data.get("kind") if isinstance(data, dict) else None


def index_item(columns: Sequence[str], values: Sequence[object]) -> tuple[ItemKind, bytes]:
    """The `"index"` item `iter_snapshot(index=True)` yields after a row. A value JSON has no type for (a
    BLOB written into an index column) becomes an object no record's value equals, so the walk names it."""
    return "index", orjson.dumps(dict(zip(columns, values, strict=True)), default=_unlike_any_record_value)


def _unlike_any_record_value(value: object) -> object:
    if isinstance(value, bytes | bytearray | memoryview):
        return {"stored_bytes": bytes(value).hex()}
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def tail_as_recorded(tail: SegmentTail, record: str | bytes) -> SegmentTail:
    """`tail` (read from the index columns) with the id, seq and hash its record's JSON states.

    Verification trusts only the JSON, so a new segment must link to what the JSON says: a link made
    from an edited `hash` column would look like a forged link by the new, innocent segment, while the
    edited row itself verifies. The columns stand when the JSON is not a well-formed record (verify
    names that record)."""
    stated = _stated(record)
    if stated is None:
        return tail
    record_id, seq, hash_, _ = stated
    return SegmentTail(tail.segment_id, tail.key_id, record_id, seq, hash_)


def call_end_as_recorded(end: CallEnd, record: str | bytes) -> CallEnd:
    """`end` (read from the index columns) with the id, hash and time its record's JSON states, for a
    compound receipt; see `tail_as_recorded`."""
    stated = _stated(record)
    if stated is None:
        return end
    record_id, _, hash_, time = stated
    return CallEnd(id=record_id, hash=hash_, time=end.time if time is None else time)


def _stated(record: str | bytes) -> tuple[str, int, str, str | None] | None:
    try:
        data = orjson.loads(record)
        record_id, seq, hash_ = data["id"], data["seq"], data["hash"]
        body = data.get("body")
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        return None
    if not (isinstance(record_id, str) and isinstance(seq, int) and isinstance(hash_, str)):
        return None
    time = body.get("time") if isinstance(body, dict) else None
    return record_id, seq, hash_, time if isinstance(time, str) else None


def split_record_id(record_id: str) -> tuple[str, int] | None:
    """`"<segment_id>-<seq>"` → (segment_id, seq), or None when it is not a record id."""
    segment_id, _, seq = record_id.rpartition("-")
    return (segment_id, int(seq)) if segment_id and seq.isdigit() else None


def is_postgres_url(target: str | Path) -> bool:
    return isinstance(target, str) and target.startswith(("postgresql:", "postgresql+", "postgres:"))
