"""Verification: walk every record and receipt, check hashes, signatures, sequence and links, and name
the first bad record with why (edited, deleted, reordered, forged, broken link).

Works on any `RecordSource` (a live store or a JSONL export); needs the trusted public keys, nothing else.
`verify_excerpt` runs the same walk over a few records read on purpose (one call, its neighbours and segment
headers), for views that show the status of single records without reading the whole trail.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

import orjson

from mcp_interceptors.audit.anchors import Anchor, HeldReceipt, check_signatures
from mcp_interceptors.audit.records import (
    FORMAT_VERSION,
    GENESIS_HASH,
    RECEIPT_FORMAT_VERSION,
    SIGNED_RECEIPT_VERSION,
    hash_of,
    record_id_for,
)
from mcp_interceptors.audit.signing import PublicKey, is_endorsed_by
from mcp_interceptors.audit.store import RECEIPT_INDEX_COLUMNS, ItemKind, RecordSource, split_record_id


class Problem(StrEnum):
    EDITED = "edited"  # content no longer matches its hash
    DELETED = "deleted"  # a sequence number, a linked record or a receipt is missing
    REORDERED = "reordered"  # a record is stored out of sequence, or appears twice
    FORGED = "forged"  # bad signature, unknown key, or a key change nobody endorsed
    BROKEN_LINK = "broken_link"  # validly signed but prev_hash does not match what it follows


#: How many open calls the note on them names (the oldest first).
_OPEN_CALLS_NAMED = 5


@dataclass(frozen=True)
class Finding:
    record_id: str
    problem: Problem
    detail: str
    position: int

    def __str__(self) -> str:
        return f"{self.record_id}: {self.problem.value}: {self.detail}"


@dataclass(frozen=True)
class VerifyReport:
    records: int
    segments: int
    receipts: int
    findings: tuple[Finding, ...]
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def first(self) -> Finding | None:
        return self.findings[0] if self.findings else None


@dataclass
class _Gap:
    """Sequence numbers skipped before a record: deleted, unless they turn up later (reordered).

    `missing` holds half-open ranges, not numbers: a record can claim any `seq` (one of 10**12 is
    a gap of 10**12), and verification must report it, not run out of memory listing it."""

    position: int
    record_id: str
    missing: list[range]
    reordered: bool = False

    def take(self, seq: int) -> bool:
        """Remove `seq` from the gap if it is in it (a record stored late); True when it was."""
        for index, span in enumerate(self.missing):
            if seq in span:
                rest = [part for part in (range(span.start, seq), range(seq + 1, span.stop)) if part]
                self.missing[index : index + 1] = rest
                return True
        return False

    def describe(self) -> str:
        return ", ".join(str(s.start) if len(s) == 1 else f"{s.start}-{s.stop - 1}" for s in self.missing)


class _CallSide(NamedTuple):
    """What a receipt may say of a decision record of a call: its call, phase, time and key."""

    call_id: str
    phase: object
    time: object
    key_id: object


@dataclass
class _Segment:
    segment_id: str
    key: PublicKey | None = None
    header: dict[str, Any] | None = None
    header_position: int = 0
    expected_seq: int = 0
    last_hash: str | None = None
    gaps: list[_Gap] = field(default_factory=list)


class _Walk:
    """One pass over the records in storage order; link and trust checks run when the pass ends."""

    def __init__(
        self, trusted: Mapping[str, PublicKey] | None, runs: Mapping[str, Collection[int]] | None = None
    ) -> None:
        self.trusted = trusted
        #: An excerpt: segment id -> the first seq of each run of records read after its header (the records
        #: between runs were left out, not deleted). None for a whole trail.
        self.runs = runs
        self.segments: dict[str, _Segment] = {}
        self.hashes: dict[str, str] = {}
        self.findings: list[tuple[int, Finding | _Gap]] = []
        self.flagged: set[int] = set()
        self.closing: dict[str, tuple[int, str]] = {}
        #: call id -> the id of its request record, until a record closing the call is read
        self.open_calls: dict[str, str] = {}
        #: record id -> what a receipt naming it must say, for every decision record of a call
        self.call_sides: dict[str, _CallSide] = {}
        #: call id -> the id of its allowed request record, once read (the call may be closed since)
        self.requests: dict[str, str] = {}
        self.count = 0
        self.last_id: str | None = None  # the last record read that had an id
        # the row just read, for the store's "index" item after it: (position, name, what its JSON says)
        self.indexed: tuple[int, str, dict[str, object]] | None = None
        self._trust_memo: dict[str, bool] = {}
        self._keys: dict[str, PublicKey] | None = None

    def flag(self, position: int, record_id: str, problem: Problem, detail: str) -> None:
        if position not in self.flagged:
            self.flagged.add(position)
            self.findings.append((position, Finding(record_id, problem, detail, position)))

    def record(self, position: int, raw: bytes) -> None:
        self.count += 1
        try:
            record = orjson.loads(raw)
            record_id, segment_id, seq = str(record["id"]), str(record["segment_id"]), int(record["seq"])
            claimed = str(record["hash"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            # named by its 1-based place among the records, which is the `#<pos>` `audit tail` prints for
            # it only while no row before it is missing: the record stored before it locates it anyway
            after = "it is the first record" if self.last_id is None else f"stored after {self.last_id}"
            self.flag(position, f"#{self.count}", Problem.EDITED, f"not a well-formed audit record ({after})")
            return
        self.last_id = record_id
        body = record.get("body")
        body = body if isinstance(body, dict) else {}
        stated = {name: record.get(name) for name in ("id", "segment_id", "seq", "kind", "key_id", "hash")}
        stated.update(time=body.get("time"), call_id=body.get("call_id"), phase=body.get("phase"))
        self.indexed = (position, record_id, stated)
        duplicate = duplicate_key(raw, record)
        if duplicate is not None:
            self.flag(position, record_id, Problem.EDITED, duplicate)
        elif record.get("v") != FORMAT_VERSION or record_id != record_id_for(segment_id, seq):
            self.flag(position, record_id, Problem.EDITED, "envelope fields are inconsistent")
        elif hash_of(record) != claimed:
            self.flag(position, record_id, Problem.EDITED, "content does not match its hash")
        self.hashes.setdefault(record_id, claimed)
        segment = self.segments.setdefault(segment_id, _Segment(segment_id))
        if seq == 0 and record.get("kind") == "segment":
            self._header(position, record, segment)
        self._sequence(position, record, segment, seq)
        self._signature(position, record, segment)
        self._note_call(position, record)

    def _header(self, position: int, record: dict[str, Any], segment: _Segment) -> None:
        try:
            key = PublicKey.from_b64(str(record["body"]["public_key"]))
        except (KeyError, TypeError, ValueError):
            self.flag(position, record["id"], Problem.EDITED, "segment header has no valid public key")
            return
        if key.key_id != record.get("key_id"):
            self.flag(position, record["id"], Problem.FORGED, "header key id does not match its public key")
            return
        segment.key, segment.header, segment.header_position = key, record, position

    def _sequence(self, position: int, record: dict[str, Any], segment: _Segment, seq: int) -> None:
        record_id, prev_hash = record["id"], record.get("prev_hash")
        starts = (self.runs or {}).get(segment.segment_id, ())
        start = max((run for run in starts if segment.expected_seq < run <= seq), default=None)
        if start is not None:
            # an excerpt left the records before this run out on purpose (no gap, no hash to link to); but its
            # header is always read, so a segment that has none lost it
            if segment.expected_seq == 0:
                self._gap(position, record_id, segment, range(0, 1))
            segment.expected_seq, segment.last_hash = start, None
        if seq == segment.expected_seq:
            if seq > 0 and segment.last_hash is not None and prev_hash != segment.last_hash:
                detail = f"prev_hash does not match record {record_id_for(segment.segment_id, seq - 1)}"
                self.flag(position, record_id, Problem.BROKEN_LINK, detail)
        elif seq > segment.expected_seq:
            self._gap(position, record_id, segment, range(segment.expected_seq, seq))
        else:
            for gap in segment.gaps:
                if gap.take(seq):
                    gap.reordered = True
                    return
            self.flag(position, record_id, Problem.REORDERED, f"seq {seq} appears twice in its segment")
            return
        segment.expected_seq, segment.last_hash = seq + 1, str(record["hash"])

    def _gap(self, position: int, record_id: str, segment: _Segment, missing: range) -> None:
        gap = _Gap(position, record_id, [missing])
        segment.gaps.append(gap)
        self.flagged.add(position)
        self.findings.append((position, gap))

    def _signature(self, position: int, record: dict[str, Any], segment: _Segment) -> None:
        key_id = record.get("key_id")
        key = segment.key
        if key is None:
            key = (self.trusted or {}).get(str(key_id))
        if key is None:
            self.flag(position, record["id"], Problem.FORGED, f"signed by unknown key id {key_id}")
        elif key.key_id != key_id:
            self.flag(position, record["id"], Problem.FORGED, f"key id {key_id} is not its segment's key {key.key_id}")
        elif not _signature_ok(key, record):
            self.flag(position, record["id"], Problem.FORGED, "signature does not verify")

    def _note_call(self, position: int, record: dict[str, Any]) -> None:
        body = record.get("body")
        if record.get("kind") != "decision" or not isinstance(body, dict) or body.get("call_id") is None:
            return
        call_id = str(body["call_id"])
        self.call_sides[record["id"]] = _CallSide(call_id, body.get("phase"), body.get("time"), record.get("key_id"))
        if body.get("phase") == "response" or body.get("decision") != "allow":
            self.closing[record["id"]] = (position, call_id)
            self.open_calls.pop(call_id, None)
        elif position not in self.flagged:  # a record found bad says nothing about its call
            self.open_calls[call_id] = self.requests[call_id] = str(record["id"])

    # -- after the pass -------------------------------------------------------------------------------

    def finish_segments(self) -> None:
        for segment in self.segments.values():
            if segment.header is None:
                continue
            self._link(segment)
            self._endorsement(segment)
            if segment.key is not None and not self._is_trusted(segment, set()):
                header = segment.header
                self.flag(
                    segment.header_position,
                    header["id"],
                    Problem.FORGED,
                    f"key {segment.key.key_id} is neither trusted nor endorsed by the key it rotates from",
                )

    def _link(self, segment: _Segment) -> None:
        header = segment.header
        assert header is not None
        prev_record = (header.get("body") or {}).get("prev_record")
        position, record_id = segment.header_position, header["id"]
        if prev_record is not None and not isinstance(prev_record, str):
            self.flag(position, record_id, Problem.EDITED, "segment header's prev_record is not a record id")
        elif prev_record is None:
            if header.get("prev_hash") != GENESIS_HASH:
                self.flag(position, record_id, Problem.BROKEN_LINK, "first segment does not start at genesis")
        elif prev_record not in self.hashes:
            if self.runs is not None and prev_record.rsplit("-", 1)[0] not in self.segments:
                return  # an excerpt that read nothing of the segment it continues: not checked here
            self.flag(position, record_id, Problem.DELETED, f"links to record {prev_record}, which is missing")
        elif self.hashes[prev_record] != header.get("prev_hash"):
            self.flag(position, record_id, Problem.BROKEN_LINK, f"prev_hash does not match record {prev_record}")

    def _endorsement(self, segment: _Segment) -> None:
        header = segment.header
        assert header is not None
        endorsement = (header.get("body") or {}).get("endorsement")
        previous = self._predecessor(segment)
        if endorsement is None or segment.key is None or previous is None or previous.key is None:
            return
        if not isinstance(endorsement, dict) or not is_endorsed_by(endorsement, segment.key, previous.key):
            detail = f"rotation endorsement by key {previous.key.key_id} does not verify"
            self.flag(segment.header_position, header["id"], Problem.FORGED, detail)

    def _predecessor(self, segment: _Segment) -> _Segment | None:
        prev_record = ((segment.header or {}).get("body") or {}).get("prev_record")
        if not isinstance(prev_record, str):
            return None
        return self.segments.get(prev_record.rsplit("-", 1)[0])

    def _is_trusted(self, segment: _Segment, visiting: set[str]) -> bool:
        key = segment.key
        if key is None or segment.segment_id in visiting:
            return False
        if segment.segment_id in self._trust_memo:
            return self._trust_memo[segment.segment_id]
        visiting.add(segment.segment_id)
        previous = self._predecessor(segment)
        endorsement = ((segment.header or {}).get("body") or {}).get("endorsement")
        if self.trusted is not None and key.key_id in self.trusted:
            trusted = self.trusted[key.key_id] == key
        elif previous is None or previous.key is None:
            trusted = self.trusted is None and previous is None  # trust on first use, genesis only
        elif previous.key == key:
            trusted = self._is_trusted(previous, visiting)
        else:
            trusted = (
                isinstance(endorsement, dict)
                and is_endorsed_by(endorsement, key, previous.key)
                and self._is_trusted(previous, visiting)
            )
        self._trust_memo[segment.segment_id] = trusted
        return trusted

    def receipt(self, position: int, raw: bytes, seen: set[str]) -> None:
        try:
            receipt = orjson.loads(raw)
            receipt_id, claimed = str(receipt["id"]), str(receipt["hash"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            self.flag(position, f"receipt#{position - self.count + 1}", Problem.EDITED, "not a well-formed receipt")
            return
        name = f"receipt:{receipt_id}"
        seen.add(receipt_id)
        self.indexed = (position, name, {column: receipt.get(column) for column in RECEIPT_INDEX_COLUMNS})
        duplicate = duplicate_key(raw, receipt)
        if duplicate is not None:
            self.flag(position, name, Problem.EDITED, duplicate)
            return
        if hash_of(receipt) != claimed:
            self.flag(position, name, Problem.EDITED, "content does not match its hash")
            return
        version = receipt.get("v")
        if version == SIGNED_RECEIPT_VERSION:
            key = self.known_keys().get(str(receipt.get("key_id")))
            if key is None:
                self.flag(position, name, Problem.FORGED, f"signed by unknown key id {receipt.get('key_id')}")
                return
            if not _signature_ok(key, receipt):
                self.flag(position, name, Problem.FORGED, "signature does not verify")
                return
        elif version != RECEIPT_FORMAT_VERSION:
            self.flag(position, name, Problem.EDITED, f"unknown receipt format version {version!r}")
            return
        for side in ("request", "response"):
            end = receipt.get(side)
            if not isinstance(end, dict):
                continue
            stored = self.hashes.get(str(end.get("id")))
            if stored is None:
                self.flag(position, name, Problem.DELETED, f"its {side} record {end.get('id')} is missing")
            elif stored != end.get("hash"):
                self.flag(position, name, Problem.EDITED, f"its {side} record {end.get('id')} has another hash")
        if version == RECEIPT_FORMAT_VERSION and (wrong := self._underived(receipt_id, receipt)) is not None:
            self.flag(position, name, Problem.EDITED, wrong)

    def _underived(self, receipt_id: str, receipt: Mapping[str, Any]) -> str | None:
        """Why an unsigned receipt is not what its records make of it, if it is not: only its signed records
        vouch for it, so every field must be theirs (the hashes of its sides are checked already)."""
        closing = self.call_sides.get(receipt_id)
        if receipt_id not in self.closing or closing is None:
            return f"record {receipt_id} closes no call"
        if receipt.get("call_id") != closing.call_id or receipt.get("key_id") != closing.key_id:
            return f"its call_id or key_id is not its closing record's ({closing.call_id}, {closing.key_id})"
        closed_by_response = closing.phase == "response"
        if receipt.get("response") != (self._side(receipt_id) if closed_by_response else None):
            return f"its response side is not {'its closing record' if closed_by_response else 'null'}"
        request = receipt.get("request")
        wanted: dict[str, Any] | None
        if not closed_by_response:
            wanted = self._side(receipt_id)
        elif request is None:  # only for the response of a call whose request record was never written
            written = self.requests.get(closing.call_id)
            return None if written is None else f"its request side is null, but request record {written} is its call's"
        else:
            request_id = str(request.get("id")) if isinstance(request, dict) else ""
            side = self.call_sides.get(request_id)
            matches = side is not None and side.phase == "request" and side.call_id == closing.call_id
            wanted = self._side(request_id) if matches else None
        return None if request == wanted else "its request side is not a request record of its call"

    def _side(self, record_id: str) -> dict[str, Any]:
        return {"id": record_id, "hash": self.hashes.get(record_id), "time": self.call_sides[record_id].time}

    def index(self, raw: bytes) -> None:
        """The store's index columns of the row just read: they must say what its JSON says, or a lookup
        by them (`audit show`, a query on `call_id`) finds something else than the trail holds."""
        indexed, self.indexed = self.indexed, None
        if indexed is None:  # the row was not well-formed; it is named already
            return
        position, name, stated = indexed
        columns = orjson.loads(raw)
        differ = [column for column in columns if columns[column] != stated.get(column)]
        if differ:
            named = f"columns {', '.join(differ)} differ" if len(differ) > 1 else f"column {differ[0]} differs"
            detail = f"its index {named} from its JSON"
            self.flag(position, name, Problem.EDITED, detail)

    def known_keys(self) -> dict[str, PublicKey]:
        if self._keys is None:
            self._keys = dict(self.trusted or {})
            self._keys.update({s.key.key_id: s.key for s in self.segments.values() if s.key is not None})
        return self._keys

    def missing_receipts(self, seen: set[str], calls: Collection[str] | None = None) -> None:
        """Closing records without their receipt (of `calls` only, when given: an excerpt reads the receipts of
        those calls, not of every call whose records it read as neighbours)."""
        for record_id, (position, call_id) in self.closing.items():
            if record_id not in seen and (calls is None or call_id in calls):
                self.flag(position, record_id, Problem.DELETED, f"the compound receipt of call {call_id} is missing")

    def open_calls_note(self) -> str | None:
        """A note, not a finding: a call is open while it is in flight, and a live trail always has some."""
        if not self.open_calls:
            return None
        named = ", ".join(
            f"{call_id} (request {record_id})"
            for call_id, record_id in list(self.open_calls.items())[:_OPEN_CALLS_NAMED]
        )
        more = len(self.open_calls) - _OPEN_CALLS_NAMED
        return (
            f"open calls, with a request record and no record closing them: {len(self.open_calls)} (in flight as "
            f"the trail was read, or left open by a gateway that ended without closing them, killed say): "
            f"{named}{f', and {more} more' if more > 0 else ''}"
        )

    def check_anchors(self, anchors: Iterable[Anchor], position: int) -> None:
        """Each anchored record must be in the trail with the anchored hash; `position` orders these
        findings after every stored item."""
        for anchor in anchors:
            stored = self.hashes.get(anchor.record_id)
            if stored is None:
                segment_id, _ = split_record_id(anchor.record_id) or (anchor.record_id, 0)
                segment = self.segments.get(segment_id)
                ends = (
                    f"its segment ends at seq {segment.expected_seq - 1}"
                    if segment is not None
                    else "no record of its segment is left"
                )
                detail = (
                    f"{anchor.origin} names it, but it is missing ({ends}): the trail was cut or the record deleted"
                )
                self.flag(position, anchor.record_id, Problem.DELETED, detail)
            elif stored != anchor.hash:
                self.flag(
                    position, anchor.record_id, Problem.EDITED, f"its hash differs from the one {anchor.origin} holds"
                )
            position += 1

    def result(self) -> tuple[Finding, ...]:
        resolved: list[Finding] = []
        for position, item in sorted(self.findings, key=lambda pair: pair[0]):
            if isinstance(item, Finding):
                resolved.append(item)
            elif item.missing or not item.reordered:
                resolved.append(
                    Finding(item.record_id, Problem.DELETED, f"seq {item.describe()} missing before it", position)
                )
            else:
                detail = "stored before records that precede it in its segment"
                resolved.append(Finding(item.record_id, Problem.REORDERED, detail, position))
        return tuple(resolved)


def duplicate_key(raw: bytes, parsed: Any) -> str | None:
    """Why `raw` is not I-JSON, if an object in it has a key twice; else None.

    Parsers disagree on which value such a key has (orjson keeps the last, others the first), so a
    record could verify with one value and be read with another. RFC 8785 takes I-JSON as input.
    The writer's own text is what orjson writes for the parsed value, which proves it has no duplicate:
    only other text (edited, or stored by another tool) is parsed a second time, to look.
    """
    if orjson.dumps(parsed) == raw:
        return None
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for name, _ in items:
            if name in seen and not found:
                found.append(name)
            seen.add(name)
        return dict(items)

    try:
        json.loads(raw, object_pairs_hook=pairs)
    except ValueError:  # orjson read it; a text json cannot read has no duplicate json could find
        return None
    return f"the key {found[0]!r} appears twice in one object" if found else None


def _signature_ok(key: PublicKey, sealed: Mapping[str, Any]) -> bool:
    try:
        digest = bytes.fromhex(str(sealed["hash"]))
    except (KeyError, ValueError):
        return False
    return key.verify(str(sealed.get("signature", "")), digest)


def verify_records(
    items: Iterable[tuple[ItemKind, bytes]],
    trusted: Mapping[str, PublicKey] | None = None,
    anchors: Sequence[Anchor] = (),
    held_receipts: Sequence[HeldReceipt] = (),
) -> VerifyReport:
    """Check every record (in storage order), then every receipt, as `RecordSource.iter_snapshot` yields
    them, then that every anchor is in the trail (see `anchors.read_anchors`). `trusted=None` trusts the
    keys of genesis segments on first use. Raises `AnchorError` for an anchor whose signature is not the
    trail's."""
    walk = _Walk(trusted)
    seen: set[str] = set()
    position, receipt_count = _walk_items(walk, items, seen)
    walk.missing_receipts(seen)
    check_signatures(anchors, held_receipts, walk.known_keys())
    walk.check_anchors(anchors, position + 1)
    notes = _trust_notes(trusted)
    if (open_calls := walk.open_calls_note()) is not None:
        notes.append(open_calls)
    return VerifyReport(walk.count, len(walk.segments), receipt_count, walk.result(), tuple(notes))


def verify_excerpt(
    items: Iterable[tuple[ItemKind, bytes]],
    trusted: Mapping[str, PublicKey] | None = None,
    *,
    runs: Mapping[str, Collection[int]],
    calls: Collection[str],
) -> VerifyReport:
    """The checks of `verify_records` on an excerpt of a trail: per segment, its header (seq 0) and runs of
    consecutive records, in seq order, each run starting at one of `runs[segment_id]`; then the receipts of
    `calls`, whose every record the excerpt holds.

    Each record read is checked as `audit verify` checks it: hash, signature, trusted key, index columns, and
    its link to the record before it when that one is in its run (a record missing inside a run, or a
    missing header, is `deleted`); so are the headers' links (when the excerpt read some of the segment a
    header continues), endorsements and trust, and the receipts of `calls`. Nothing outside the excerpt is."""
    walk = _Walk(trusted, runs)
    seen: set[str] = set()
    _, receipt_count = _walk_items(walk, items, seen)
    walk.missing_receipts(seen, calls)
    return VerifyReport(walk.count, len(walk.segments), receipt_count, walk.result(), tuple(_trust_notes(trusted)))


def _walk_items(walk: _Walk, items: Iterable[tuple[ItemKind, bytes]], seen: set[str]) -> tuple[int, int]:
    """Feed records, then receipts, to `walk`; the last position used and the number of receipts."""
    receipt_count = 0
    segments_done = False
    position = -1
    for kind, raw in items:
        if kind == "index":
            walk.index(raw)
            continue
        position += 1
        if kind == "record":
            walk.record(position, raw)
            continue
        if not segments_done:
            walk.finish_segments()
            segments_done = True
        walk.receipt(position, raw, seen)
        receipt_count += 1
    if not segments_done:
        walk.finish_segments()
    return position, receipt_count


def _trust_notes(trusted: Mapping[str, PublicKey] | None) -> list[str]:
    return [] if trusted is not None else ["no trusted keys given: genesis segment keys were trusted on first use"]


def verify_source(
    source: RecordSource,
    trusted: Mapping[str, PublicKey] | None = None,
    anchors: Sequence[Anchor] = (),
    held_receipts: Sequence[HeldReceipt] = (),
) -> VerifyReport:
    """Verify a store or an export from one consistent snapshot."""
    return verify_records(source.iter_snapshot(index=True), trusted, anchors, held_receipts)
