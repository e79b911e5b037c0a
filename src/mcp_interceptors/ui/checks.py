"""The signature and chain status of one call's records, from `audit verify`'s own walk over an excerpt.

`check_call` reads what that walk needs to judge these records (each record's neighbours, every segment
header of the key lineage up to a trusted key, the call's receipts) through index lookups, and hands it to
`audit.verify.verify_excerpt`: the checks are `audit verify`'s, only the trail is cut down to the call.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

import orjson

from mcp_interceptors.audit.records import record_id_for
from mcp_interceptors.audit.signing import PublicKey
from mcp_interceptors.audit.store import (
    RECEIPT_INDEX_COLUMNS,
    RECORD_INDEX_COLUMNS,
    ItemKind,
    index_item,
    split_record_id,
)
from mcp_interceptors.audit.verify import Finding, verify_excerpt
from mcp_interceptors.ui.reader import AuditReader, Row

#: How many segments back the key lineage is followed to reach a trusted key (one per gateway start).
MAX_LINEAGE: Final = 64


@dataclass(frozen=True)
class CallCheck:
    """What verification found: per record of the call, and elsewhere in the excerpt (headers, neighbours)."""

    by_record: Mapping[str, tuple[Finding, ...]]
    receipts: Mapping[str, tuple[Finding, ...]]
    around: tuple[Finding, ...]
    notes: tuple[str, ...]
    records_read: int

    @property
    def ok(self) -> bool:
        return not self.around and not any(self.by_record.values()) and not any(self.receipts.values())

    def of(self, record_id: str) -> tuple[Finding, ...]:
        """What was found on this record, and on its segment's header (its key, its link): a record whose
        segment is signed by an untrusted key has a signature that proves nothing."""
        place = split_record_id(record_id)
        header = None if place is None or place[1] == 0 else record_id_for(place[0], 0)
        found = self.by_record.get(record_id, ())
        return found + tuple(f for f in self.around if f.record_id == header)


def check_call(reader: AuditReader, rows: Sequence[Row], trusted: Mapping[str, PublicKey] | None) -> CallCheck:
    """Verify the records `rows` (one call's, or one record) as `audit verify` would, reading only around them."""
    excerpt = _Excerpt(reader)
    for row in rows:
        excerpt.add(row)
        segment, seq = _place(row)
        if segment is not None:
            for neighbour in (seq - 1, seq + 1):
                excerpt.look_up(segment, neighbour)
    notes = excerpt.follow_lineage(trusted)
    call_ids = {row.call_id for row in rows if row.call_id is not None}
    wanted = {record_id_of(row) for row in rows}
    # every receipt of these records (one that no longer reads as a record may have closed its call)
    receipts = reader.receipts(wanted | {str(row.columns[0]) for row in rows})
    report = verify_excerpt(excerpt.items(receipts), trusted, runs=excerpt.runs(), calls=call_ids)
    by_record: dict[str, list[Finding]] = {record_id: [] for record_id in wanted}
    by_receipt: dict[str, list[Finding]] = {str(columns[0]): [] for _, columns in receipts}
    around: list[Finding] = []
    loose = excerpt.loose_names()
    for finding in report.findings:
        name = loose.get(finding.record_id, finding.record_id)
        finding = replace(finding, record_id=name)
        if name in by_record:
            by_record[name].append(finding)
        elif name.startswith("receipt:") and name.removeprefix("receipt:") in by_receipt:
            by_receipt[name.removeprefix("receipt:")].append(finding)
        else:
            around.append(finding)
    return CallCheck(
        by_record={k: tuple(v) for k, v in by_record.items()},
        receipts={k: tuple(v) for k, v in by_receipt.items()},
        around=tuple(around),
        notes=(*report.notes, *notes),
        records_read=report.records,
    )


class _Excerpt:
    """The records read so far, by segment and seq; every segment's header is looked up once."""

    def __init__(self, reader: AuditReader) -> None:
        self._reader = reader
        self._segments: dict[str, dict[int, Row]] = {}
        self._loose: list[Row] = []  # not well-formed records: fed first, verification names them
        self._looked: set[tuple[str, int]] = set()

    def loose_names(self) -> dict[str, str]:
        """What the walk calls the records that are not well-formed (`#1`, `#2`: they are fed first), by their
        index column's id."""
        return {f"#{index}": str(row.columns[0]) for index, row in enumerate(self._loose, start=1)}

    def add(self, row: Row) -> None:
        segment, seq = _place(row)
        if segment is None:
            self._loose.append(row)
            return
        self._looked.add((segment, seq))
        rows = self._segments.setdefault(segment, {})
        rows[seq] = row
        if seq != 0:
            self.look_up(segment, 0)

    def look_up(self, segment: str, seq: int) -> Row | None:
        if seq < 0 or (segment, seq) in self._looked:
            return self._segments.get(segment, {}).get(seq)
        self._looked.add((segment, seq))
        row = self._reader.at(segment, seq)
        if row is not None:
            self.add(row)
        return row

    def follow_lineage(self, trusted: Mapping[str, PublicKey] | None) -> list[str]:
        """Read the record each header links to, and that segment's header, back to genesis or to a segment
        signed by a trusted key (the segments of the call always get their link read, to check it)."""
        frontier = list(self._segments)
        for depth in range(MAX_LINEAGE):
            found: list[str] = []
            for segment in frontier:
                header = self._segments[segment].get(0)
                linked = _prev_record(header)
                target, _, seq = (linked or "").rpartition("-")
                if header is None or not target or not seq.isdigit():
                    continue
                if depth > 0 and _trusted_without_endorsement(header, trusted):
                    continue
                before = set(self._segments)
                self.look_up(target, int(seq))
                found.extend(s for s in self._segments if s not in before)
            if not found:
                return []
            frontier = found
        return [f"the key lineage was followed {MAX_LINEAGE} segments back; `audit verify` checks all of it"]

    def runs(self) -> dict[str, list[int]]:
        """Where each run of looked-up records starts: a record looked for and not found inside a run is then
        missing to verification, as it is to `audit verify`."""
        looked: dict[str, set[int]] = {}
        for segment, seq in self._looked:
            looked.setdefault(segment, {0}).add(seq)
        return {segment: sorted(s for s in seqs if s > 0 and s - 1 not in seqs) for segment, seqs in looked.items()}

    def items(self, receipts: Sequence[tuple[bytes, tuple[object, ...]]]) -> Iterator[tuple[ItemKind, bytes]]:
        for row in self._loose:
            yield "record", row.raw
        for rows in self._segments.values():
            for seq in sorted(rows):
                yield "record", rows[seq].raw
                yield index_item(RECORD_INDEX_COLUMNS, rows[seq].columns)
        for raw, columns in receipts:
            yield "receipt", raw
            yield index_item(RECEIPT_INDEX_COLUMNS, columns)


def _place(row: Row) -> tuple[str | None, int]:
    """Where the record's JSON says it stands (verification trusts the JSON, not the index columns)."""
    record = _json(row.raw)
    segment, seq = record.get("segment_id"), record.get("seq")
    if isinstance(segment, str) and isinstance(seq, int):
        return segment, seq
    return None, 0


def record_id_of(row: Row) -> str:
    """The id the record's JSON states (the one verification names), else its index column's."""
    stated = _json(row.raw).get("id")
    return stated if isinstance(stated, str) else str(row.columns[0])


def _trusted_without_endorsement(header: Row, trusted: Mapping[str, PublicKey] | None) -> bool:
    record = _json(header.raw)
    body = record.get("body")
    endorsed = isinstance(body, dict) and body.get("endorsement") is not None
    return trusted is not None and record.get("key_id") in trusted and not endorsed


def _prev_record(header: Row | None) -> str | None:
    if header is None:
        return None
    body = _json(header.raw).get("body")
    linked = body.get("prev_record") if isinstance(body, dict) else None
    return linked if isinstance(linked, str) else None


def _json(raw: bytes) -> dict[str, object]:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}
