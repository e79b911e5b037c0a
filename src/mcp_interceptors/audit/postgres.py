"""The shared audit store: PostgreSQL through SQLAlchemy Core and psycopg 3, for several gateway replicas.

Same tables as SQLite. Each replica's writer owns its own chain segment, so concurrent writers never
contend on a chain head; `pos` (an identity column) gives the storage order verify walks.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from typing import Any, Final

from sqlalchemy import (
    BigInteger,
    Column,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    insert,
    select,
    text,
)
from sqlalchemy.engine import Engine
from sqlalchemy.engine.url import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import PoolProxiedConnection

from mcp_interceptors.audit.records import CallEnd
from mcp_interceptors.audit.store import (
    RECEIPT_COLUMNS,
    RECEIPT_INDEX_COLUMNS,
    RECEIPTS_TABLE,
    RECORD_COLUMNS,
    RECORD_INDEX_COLUMNS,
    RECORDS_TABLE,
    ItemKind,
    ReceiptRow,
    RecordRow,
    SegmentTail,
    StoreError,
    call_end_as_recorded,
    index_item,
    insert_sql,
    row_params,
    split_record_id,
    tail_as_recorded,
)

_SCHEMA_LOCK: Final = 0x6D637069  # "mcpi": serialises CREATE TABLE across replicas starting together
#: Whatever the server's default, an acknowledged batch must be on disk. Per transaction (not per session), so
#: that it holds behind a pooler in transaction mode too.
_SYNCHRONOUS_COMMIT: Final = "SET LOCAL synchronous_commit = on"
_INSERT_RECORD: Final = insert_sql(RECORDS_TABLE, RECORD_COLUMNS, "%s")
_INSERT_RECEIPT: Final = insert_sql(RECEIPTS_TABLE, RECEIPT_COLUMNS, "%s")
_FETCH_SIZE: Final = 1000

_metadata = MetaData()
_pos = BigInteger().with_variant(Integer(), "sqlite")
records_table = Table(
    RECORDS_TABLE,
    _metadata,
    Column("pos", _pos, primary_key=True, autoincrement=True),
    Column("id", Text, nullable=False),  # segment_id-seq: the (segment_id, seq) index serves lookups
    Column("segment_id", Text, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("kind", Text, nullable=False),
    Column("time", Text, nullable=False),
    Column("key_id", Text, nullable=False),
    Column("call_id", Text),
    Column("phase", Text),
    Column("hash", Text, nullable=False),
    Column("record", Text, nullable=False),
    UniqueConstraint("segment_id", "seq"),
    Index(f"{RECORDS_TABLE}_call", "call_id"),
    Index(f"{RECORDS_TABLE}_segments", "kind", "key_id"),
)
receipts_table = Table(
    RECEIPTS_TABLE,
    _metadata,
    Column("pos", _pos, primary_key=True, autoincrement=True),
    Column("id", Text, nullable=False, unique=True),
    Column("call_id", Text, nullable=False),
    Column("key_id", Text, nullable=False),
    Column("hash", Text, nullable=False),
    Column("receipt", Text, nullable=False),
)


def engine_url_for(url: str) -> str:
    """Use psycopg 3 unless the URL names a driver: `postgresql://` → `postgresql+psycopg://`."""
    parsed = make_url(url.replace("postgres://", "postgresql://", 1) if url.startswith("postgres://") else url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


class PostgresStore:
    """`Store` over SQLAlchemy Core. Written for PostgreSQL; any SQLAlchemy URL works for comparison."""

    inline_commit = False  # a network round trip: the writer calls `append` in a worker thread
    needs_sync = False  # a commit is durable when it returns (synchronous_commit = on)

    def __init__(self, url: str, *, create: bool = True) -> None:
        self._engine: Engine = create_engine(engine_url_for(url), pool_size=2, max_overflow=2, pool_pre_ping=True)
        self._is_postgres = self._engine.dialect.name == "postgresql"
        #: The connection `append` uses with psycopg (checked out of the pool at the first append).
        self._writer: PoolProxiedConnection | None = None
        try:
            with self._engine.begin() as conn:
                if create:
                    if self._is_postgres:
                        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SCHEMA_LOCK})
                    _metadata.create_all(conn)
                elif not all(self._engine.dialect.has_table(conn, t) for t in (RECORDS_TABLE, RECEIPTS_TABLE)):
                    raise StoreError(f"no audit tables at {make_url(url).render_as_string()}")
        except SQLAlchemyError as exc:
            # the driver's own message, on one line (psycopg's spans several; SQLAlchemy appends a link)
            reason = " ".join(str(getattr(exc, "orig", None) or exc).split())
            where = make_url(url).render_as_string()  # password hidden
            raise StoreError(f"cannot open the audit database {where}: {reason}") from exc

    def append(self, records: Sequence[RecordRow], receipts: Sequence[ReceiptRow]) -> None:
        if self._engine.dialect.driver == "psycopg":
            psycopg = self._engine.dialect.loaded_dbapi  # imported here: the `postgres` extra may not be installed
            try:
                self._append_pipelined(records, receipts)
            except (psycopg.OperationalError, psycopg.InterfaceError):
                # The connection broke (a server restart, a failover, an idle timeout): once more, on a new one.
                # Were the first commit to have landed after all, the retry fails on (segment_id, seq) instead of
                # writing the batch twice.
                self._drop_writer()
                self._append_pipelined(records, receipts)
            return
        with self._engine.begin() as conn:
            if self._is_postgres:
                conn.execute(text(_SYNCHRONOUS_COMMIT))
            conn.execute(insert(records_table), _by_column(RECORD_COLUMNS, records))
            if receipts:
                conn.execute(insert(receipts_table), _by_column(RECEIPT_COLUMNS, receipts))

    def _append_pipelined(self, records: Sequence[RecordRow], receipts: Sequence[ReceiptRow]) -> None:
        """One transaction in one round trip: psycopg's pipeline sends its statements and the commit together,
        on a connection this store keeps for its appends (no pool check-out, and no ping, per batch)."""
        if self._writer is None:
            self._writer = self._engine.raw_connection()
        conn = self._writer.driver_connection  # a psycopg.Connection
        assert conn is not None  # None only once closed, and it is dropped then
        with conn.pipeline(), conn.transaction(), conn.cursor() as cursor:
            cursor.execute(_SYNCHRONOUS_COMMIT)
            cursor.executemany(_INSERT_RECORD, [row_params(row) for row in records])
            if receipts:
                cursor.executemany(_INSERT_RECEIPT, [row_params(row) for row in receipts])

    def _drop_writer(self) -> None:
        if self._writer is not None:
            self._writer.invalidate()  # closed, and not returned to the pool
            self._writer = None

    def sync(self) -> None:
        pass

    def checkpoint(self) -> None:
        pass

    def lineage_tail(self, key_ids: Collection[str]) -> SegmentTail | None:
        if not key_ids:
            return None
        r = records_table.c
        with self._engine.connect() as conn:
            head = conn.execute(
                select(r.segment_id, r.key_id)
                .where(r.kind == "segment", r.key_id.in_(list(key_ids)))
                .order_by(r.pos.desc())
                .limit(1)
            ).first()
            if head is None:
                return None
            last = conn.execute(
                select(r.id, r.seq, r.hash, r.record)
                .where(r.segment_id == head.segment_id)
                .order_by(r.seq.desc())
                .limit(1)
            ).one()
        return tail_as_recorded(SegmentTail(head.segment_id, head.key_id, last.id, last.seq, last.hash), last.record)

    def find_request(self, call_id: str) -> CallEnd | None:
        r = records_table.c
        query = (
            select(r.id, r.hash, r.time, r.record)
            .where(r.call_id == call_id, r.phase == "request")
            .order_by(r.pos.desc())
            .limit(1)
        )
        with self._engine.connect() as conn:
            row = conn.execute(query).first()
        return (
            None if row is None else call_end_as_recorded(CallEnd(id=row.id, hash=row.hash, time=row.time), row.record)
        )

    def get_record(self, record_id: str) -> bytes | None:
        key = split_record_id(record_id)
        if key is None:
            return None
        r = records_table.c
        return self._scalar(select(r.record).where(r.segment_id == key[0], r.seq == key[1]))

    def get_receipt(self, record_id: str) -> bytes | None:
        return self._scalar(select(receipts_table.c.receipt).where(receipts_table.c.id == record_id))

    def tail(self, limit: int) -> list[tuple[int, bytes]]:
        r = records_table.c
        with self._engine.connect() as conn:
            rows = conn.execute(select(r.pos, r.record).order_by(r.pos.desc()).limit(limit)).all()
        return [(int(row.pos), str(row.record).encode()) for row in reversed(rows)]

    def records_at(self, positions: Collection[int]) -> list[tuple[int, bytes]]:
        if not positions:
            return []
        r = records_table.c
        query = select(r.pos, r.record).where(r.pos.in_(list(positions))).order_by(r.pos)
        return [(int(row.pos), str(row.record).encode()) for row in self._stream(query)]

    def iter_records(self, after_pos: int = 0) -> Iterator[tuple[int, bytes]]:
        r = records_table.c
        query = select(r.pos, r.record).where(r.pos > after_pos).order_by(r.pos)
        for row in self._stream(query):
            yield int(row.pos), str(row.record).encode()

    def iter_snapshot(self, *, index: bool = False) -> Iterator[tuple[ItemKind, bytes]]:
        r, c = records_table.c, receipts_table.c
        records = select(r.record, *(r[name] for name in RECORD_INDEX_COLUMNS)).order_by(r.pos)
        receipts = select(c.receipt, *(c[name] for name in RECEIPT_INDEX_COLUMNS)).order_by(c.pos)
        isolation = "REPEATABLE READ" if self._is_postgres else "SERIALIZABLE"
        with self._engine.connect().execution_options(isolation_level=isolation) as conn, conn.begin():
            # One transaction at REPEATABLE READ: both queries read the same snapshot.
            for row in conn.execution_options(yield_per=_FETCH_SIZE).execute(records):
                yield "record", str(row[0]).encode()
                if index:
                    yield index_item(RECORD_INDEX_COLUMNS, row[1:])
            for row in conn.execution_options(yield_per=_FETCH_SIZE).execute(receipts):
                yield "receipt", str(row[0]).encode()
                if index:
                    yield index_item(RECEIPT_INDEX_COLUMNS, row[1:])

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._engine.dispose()

    def _scalar(self, query: Any) -> bytes | None:
        with self._engine.connect() as conn:
            value = conn.execute(query).scalar_one_or_none()
        return None if value is None else str(value).encode()

    def _stream(self, query: Any) -> Iterator[Any]:
        with self._engine.connect() as conn:
            result = conn.execution_options(yield_per=_FETCH_SIZE).execute(query)
            yield from result


def _by_column(columns: Sequence[str], rows: Sequence[RecordRow] | Sequence[ReceiptRow]) -> list[dict[str, Any]]:
    """Rows as SQLAlchemy's `insert()` takes them: one mapping of column to value each."""
    return [dict(zip(columns, row_params(row), strict=True)) for row in rows]
