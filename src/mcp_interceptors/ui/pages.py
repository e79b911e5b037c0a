"""What each page shows, read from the store in bounded steps: a page of recent calls, one call, a chart window.

A page of calls walks the newest records backwards in chunks (the `pos` index) and reads each new call's
records by its `call_id` (that index), so a filter sees whole calls; it stops after `limit` matching calls
or `scan` records, whichever comes first, and says how far back it looked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from mcp_interceptors.ui.calls import CallView, Filters, RecordView, group_calls, record_view
from mcp_interceptors.ui.reader import AuditReader, Row

#: Records read per query while walking back.
CHUNK: Final = 500


@dataclass(frozen=True)
class Limits:
    """How much one request may read. `page`: calls per page; `scan`: records one page may walk over looking
    for matches; `chart`: records the charts count over."""

    page: int = 50
    scan: int = 5000
    chart: int = 2000


@dataclass(frozen=True)
class Page:
    calls: list[CallView]
    #: The position to continue from for older calls (None: the start of the trail was reached).
    older: int | None
    scanned: int
    #: The time of the oldest record looked at, when the scan limit stopped the walk before `limit` matches.
    stopped_at: str | None


def views(rows: Sequence[Row]) -> list[RecordView]:
    return [record_view(row.pos, str(row.columns[0]), row.raw) for row in rows]


def recent_calls(reader: AuditReader, filters: Filters, before: int | None, limits: Limits) -> Page:
    """The newest calls below position `before` that match `filters`, newest activity first.

    A call is listed where its newest record is, so walking page by page lists each call once."""
    found: list[CallView] = []
    seen: set[str] = set()
    scanned, cursor = 0, before
    while scanned < limits.scan:
        rows = reader.before(cursor, min(CHUNK, limits.scan - scanned))
        if not rows:
            return Page(found, None, scanned, None)
        scanned += len(rows)
        new_ids = {row.call_id for row in rows if row.call_id is not None and row.call_id not in seen}
        whole = group_calls(views(reader.of_calls(new_ids)))
        for row in rows:
            key = row.call_id if row.call_id is not None else str(row.columns[0])
            cursor = row.pos
            if key in seen:
                continue
            seen.add(key)
            call = whole.get(key) or group_calls(views([row]))[key]
            if call.first.kind == "segment" or (before is not None and call.newest_pos >= before):
                continue  # a segment header is not a call; a call with newer records was listed on a newer page
            if filters.matches(call):
                found.append(call)
                if len(found) == limits.page:
                    return Page(found, row.pos, scanned, None)
    if cursor is None or not reader.before(cursor, 1):
        return Page(found, None, scanned, None)
    last = reader.before(cursor + 1, 1)
    return Page(found, cursor, scanned, str(views(last)[0].get("time") or "") if last else None)


def one_call(reader: AuditReader, key: str) -> tuple[CallView, list[Row]] | None:
    """A call by its call id, or a lone record by its record id; with the rows it was built from."""
    rows = reader.of_calls([key])
    if not rows:
        row = reader.record(key)
        if row is None:
            return None
        rows = reader.of_calls([row.call_id]) if row.call_id is not None else [row]
    calls = group_calls(views(rows))
    return next(iter(calls.values())), rows


def chart_calls(reader: AuditReader, limits: Limits) -> list[CallView]:
    """The calls of the newest `limits.chart` records (a call cut by the window counts with what is in it)."""
    rows = reader.before(None, limits.chart)
    return [call for call in group_calls(views(rows)).values() if call.first.kind != "segment"]
