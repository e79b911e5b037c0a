"""Open the store or record source a target names: a path or `sqlite:///` URL (SQLite), a `postgresql://` URL,
or, to read only, a `.jsonl` export.

Apart from `store.py` so that the stores (`sqlite.py`, `postgres.py`), which import the `Store` protocol,
are imported by no module they import.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs

from mcp_interceptors.audit.store import JsonlSource, RecordSource, Store, StoreError, is_postgres_url


def open_store(target: str | Path, *, create: bool = True) -> Store:
    """A `postgresql://` URL opens PostgreSQL; a path or `sqlite:///path[?synchronous=full]` opens SQLite."""
    if is_postgres_url(target):
        from mcp_interceptors.audit.postgres import PostgresStore

        return PostgresStore(str(target), create=create)
    from mcp_interceptors.audit.sqlite import SqliteStore

    text = str(target)
    if not text.startswith("sqlite:///"):
        return SqliteStore(Path(text).expanduser(), create=create)
    path, _, query = text.removeprefix("sqlite:///").partition("?")
    synchronous = parse_qs(query).get("synchronous", ["normal"])[-1].upper()
    if synchronous not in ("FULL", "NORMAL"):
        raise StoreError(f"{text}: synchronous must be full or normal, not {synchronous.lower()!r}")
    return SqliteStore(
        Path(path).expanduser(), create=create, synchronous="FULL" if synchronous == "FULL" else "NORMAL"
    )


def open_source(target: str | Path) -> RecordSource:
    """Like `open_store` without creating anything; a `.jsonl` path reads an export."""
    if not is_postgres_url(target) and str(target).endswith(".jsonl"):
        return JsonlSource(Path(target).expanduser())
    return open_store(target, create=False)
