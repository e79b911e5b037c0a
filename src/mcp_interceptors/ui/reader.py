"""Read-only access to an audit store for the web view: bounded, index-backed queries on SQLite or PostgreSQL.

Every query uses an index of the store's schema (`audit/store.py`): the `pos` primary key for windows of
recent records, `(segment_id, seq)` for one record, `call_id` for a call, the receipts' `id`. Nothing reads
the whole trail. SQLite is opened read-only (`mode=ro`), PostgreSQL in read-only transactions.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sqlalchemy import create_engine, event, func, select
from sqlalchemy.engine import Engine
from sqlalchemy.engine.url import make_url
from sqlalchemy.exc import SQLAlchemyError

from mcp_interceptors.audit.postgres import engine_url_for, receipts_table, records_table
from mcp_interceptors.audit.store import RECORD_INDEX_COLUMNS, StoreError, is_postgres_url, split_record_id

#: At most this many records of one call are read (a call has a handful: its legs and embedded requests).
MAX_CALL_RECORDS: Final = 200


@dataclass(frozen=True)
class Row:
    """One stored record: its storage position, its JSON as stored, and the index columns it is found by."""

    pos: int
    raw: bytes
    columns: tuple[Any, ...]  # RECORD_INDEX_COLUMNS, in that order

    @property
    def call_id(self) -> str | None:
        value = self.columns[RECORD_INDEX_COLUMNS.index("call_id")]
        return None if value is None else str(value)


class AuditReader:
    """Queries the web view runs; thread-safe (an engine's pool), each call one short read transaction."""

    def __init__(self, target: str | Path) -> None:
        self.target = str(target)
        self.is_postgres = is_postgres_url(target)
        self._engine = _engine_for(target)
        self.description = _describe(target)
        try:
            with self._engine.connect() as conn:
                for table in (records_table, receipts_table):
                    if not self._engine.dialect.has_table(conn, table.name):
                        raise StoreError(f"{self.description} is not an audit store (no {table.name} table)")
        except SQLAlchemyError as exc:
            self._engine.dispose()
            raise StoreError(f"cannot open the audit store {self.description}: {_reason(exc)}") from exc
        except StoreError:
            self._engine.dispose()
            raise

    def head(self) -> int:
        """The highest storage position (0 for an empty store): changes whenever a record lands."""
        return int(self._scalar(select(func.max(records_table.c.pos))) or 0)

    def before(self, pos: int | None, limit: int) -> list[Row]:
        """Up to `limit` records below position `pos` (the newest when None), newest first."""
        r = records_table.c
        query = _rows().order_by(r.pos.desc()).limit(limit)
        if pos is not None:
            query = query.where(r.pos < pos)
        return self._rows(query)

    def of_calls(self, call_ids: Collection[str]) -> list[Row]:
        """Every record of these calls, in storage order."""
        if not call_ids:
            return []
        r = records_table.c
        query = _rows().where(r.call_id.in_(sorted(call_ids))).order_by(r.pos)
        return self._rows(query.limit(MAX_CALL_RECORDS * len(call_ids)))

    def record(self, record_id: str) -> Row | None:
        key = split_record_id(record_id)
        return None if key is None else self.at(*key)

    def at(self, segment_id: str, seq: int) -> Row | None:
        r = records_table.c
        rows = self._rows(_rows().where(r.segment_id == segment_id, r.seq == seq))
        return rows[0] if rows else None

    def receipts(self, record_ids: Collection[str]) -> list[tuple[bytes, tuple[Any, ...]]]:
        """The receipts with these ids (a receipt's id is the id of the record that closed its call): JSON and
        index columns (`RECEIPT_INDEX_COLUMNS`)."""
        if not record_ids:
            return []
        c = receipts_table.c
        query = select(c.receipt, c.id, c.call_id, c.key_id, c.hash).where(c.id.in_(sorted(record_ids)))
        with self._reading() as conn:
            return [(str(row[0]).encode(), tuple(row[1:])) for row in conn.execute(query.order_by(c.pos))]

    def close(self) -> None:
        self._engine.dispose()

    def _scalar(self, query: Any) -> Any:
        with self._reading() as conn:
            return conn.execute(query).scalar()

    def _rows(self, query: Any) -> list[Row]:
        with self._reading() as conn:
            return [Row(int(row[0]), str(row[1]).encode(), tuple(row[2:])) for row in conn.execute(query)]

    def _reading(self) -> Any:
        return _Reading(self._engine, self.description, self.is_postgres)


class _Reading:
    """One read-only transaction; a failure is a `StoreError` naming the store."""

    def __init__(self, engine: Engine, description: str, is_postgres: bool) -> None:
        self._engine, self._description, self._is_postgres = engine, description, is_postgres

    def __enter__(self) -> Any:
        try:
            self._conn = self._engine.connect()
            if self._is_postgres:
                self._conn = self._conn.execution_options(postgresql_readonly=True)
            self._conn.begin()
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot read the audit store {self._description}: {_reason(exc)}") from exc
        return self._conn

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        try:
            self._conn.rollback()  # read-only: nothing to commit
            self._conn.close()
        except SQLAlchemyError:
            pass
        if isinstance(exc, SQLAlchemyError):
            raise StoreError(f"cannot read the audit store {self._description}: {_reason(exc)}") from exc


def _rows() -> Any:
    r = records_table.c
    return select(r.pos, r.record, *(r[name] for name in RECORD_INDEX_COLUMNS))


def _engine_for(target: str | Path) -> Engine:
    if is_postgres_url(target):
        return create_engine(engine_url_for(str(target)), pool_size=2, max_overflow=4, pool_pre_ping=True)
    text = str(target).removeprefix("sqlite:///").partition("?")[0]
    path = Path(text).expanduser().resolve()
    if not path.is_file():
        raise StoreError(f"audit database {path} does not exist")
    # Read-only: the view never writes, and never takes a lock the gateway's writer could wait on.
    engine = create_engine(f"sqlite+pysqlite:///file:{path}?mode=ro&uri=true", pool_size=2, max_overflow=4)

    @event.listens_for(engine, "connect")
    def _busy_timeout(dbapi_connection: Any, _: Any) -> None:
        dbapi_connection.execute("PRAGMA busy_timeout = 5000")

    return engine


def _describe(target: str | Path) -> str:
    if is_postgres_url(target):
        return make_url(str(target)).render_as_string()  # password hidden
    return str(target)


def _reason(exc: SQLAlchemyError) -> str:
    """The driver's own message, on one line."""
    return " ".join(str(getattr(exc, "orig", None) or exc).split())


def rows_in(rows: Sequence[Row], call_id: str | None) -> list[Row]:
    return [row for row in rows if row.call_id == call_id]
