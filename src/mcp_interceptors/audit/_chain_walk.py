"""Verification, the walk over records in storage order: each record's hash, envelope, index columns,
signature and place in its segment's sequence, and the calls its records open and close.

`ChainWalk` keeps what later checks need (each segment's header and key, every record's hash, the calls and
their sides): `_lineage` checks segment headers from it, `_receipt_checks` the receipts.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

from mcp_interceptors.audit._findings import Finding, Gap, Problem, resolve
from mcp_interceptors.audit.anchors import Anchor
from mcp_interceptors.audit.records import FORMAT_VERSION, hash_of, record_id_for
from mcp_interceptors.audit.signing import PublicKey
from mcp_interceptors.audit.store import split_record_id

#: How many open calls the note on them names (the oldest first).
_OPEN_CALLS_NAMED = 5


class CallSide(NamedTuple):
    """What a receipt may say of a decision record of a call: its call, phase, time and key."""

    call_id: str
    phase: object
    time: object
    key_id: object


@dataclass
class SegmentState:
    segment_id: str
    key: PublicKey | None = None
    header: dict[str, Any] | None = None
    header_position: int = 0
    expected_seq: int = 0
    last_hash: str | None = None
    gaps: list[Gap] = field(default_factory=list)


class ChainWalk:
    def __init__(
        self, trusted: Mapping[str, PublicKey] | None, runs: Mapping[str, Collection[int]] | None = None
    ) -> None:
        self.trusted = trusted
        #: An excerpt: segment id -> the first seq of each run of records read after its header (the records
        #: between runs were left out, not deleted). None for a whole trail.
        self.runs = runs
        self.segments: dict[str, SegmentState] = {}
        self.hashes: dict[str, str] = {}
        self.findings: list[tuple[int, Finding | Gap]] = []
        self.flagged: set[int] = set()
        self.closing: dict[str, tuple[int, str]] = {}
        #: call id -> the id of its request record, until a record closing the call is read
        self.open_calls: dict[str, str] = {}
        #: record id -> what a receipt naming it must say, for every decision record of a call
        self.call_sides: dict[str, CallSide] = {}
        #: call id -> the id of its allowed request record, once read (the call may be closed since)
        self.requests: dict[str, str] = {}
        self.count = 0
        self.last_id: str | None = None  # the last record read that had an id
        # the row just read, for the store's "index" item after it: (position, name, what its JSON says)
        self.indexed: tuple[int, str, dict[str, object]] | None = None
        self._keys: dict[str, PublicKey] | None = None

    def flag(self, position: int, record_id: str, problem: Problem, detail: str) -> None:
        if position not in self.flagged:
            self.flagged.add(position)
            self.findings.append((position, Finding(record_id, problem, detail, position)))

    def record(self, position: int, raw: bytes) -> None:
        self.count += 1
        try:
            record = orjson.loads(raw)
            record_id, segment_id, seq = (str(record["id"]), str(record["segment_id"]), int(record["seq"]))
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
        segment = self.segments.setdefault(segment_id, SegmentState(segment_id))
        if seq == 0 and record.get("kind") == "segment":
            self._header(position, record, segment)
        self._sequence(position, record, segment, seq)
        self._signature(position, record, segment)
        self._note_call(position, record)

    def _header(self, position: int, record: dict[str, Any], segment: SegmentState) -> None:
        try:
            key = PublicKey.from_b64(str(record["body"]["public_key"]))
        except (KeyError, TypeError, ValueError):
            self.flag(position, record["id"], Problem.EDITED, "segment header has no valid public key")
            return
        if key.key_id != record.get("key_id"):
            self.flag(position, record["id"], Problem.FORGED, "header key id does not match its public key")
            return
        segment.key, segment.header, segment.header_position = key, record, position

    def _sequence(self, position: int, record: dict[str, Any], segment: SegmentState, seq: int) -> None:
        record_id, prev_hash = record["id"], record.get("prev_hash")
        starts = (self.runs or {}).get(segment.segment_id, ())
        start = max((run for run in starts if segment.expected_seq < run <= seq), default=None)
        if start is not None:
            # an excerpt left the records before this run out on purpose (no gap, no hash to link to); but its
            # header is always read, so a segment that has none lost it
            if segment.expected_seq == 0:
                self._gap(position, record_id, segment, range(1))
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

    def _gap(self, position: int, record_id: str, segment: SegmentState, missing: range) -> None:
        gap = Gap(position, record_id, [missing])
        segment.gaps.append(gap)
        self.flagged.add(position)
        self.findings.append((position, gap))

    def _signature(self, position: int, record: dict[str, Any], segment: SegmentState) -> None:
        key_id = record.get("key_id")
        key = segment.key
        if key is None:
            key = (self.trusted or {}).get(str(key_id))
        if key is None:
            self.flag(position, record["id"], Problem.FORGED, f"signed by unknown key id {key_id}")
        elif key.key_id != key_id:
            self.flag(position, record["id"], Problem.FORGED, f"key id {key_id} is not its segment's key {key.key_id}")
        elif not signature_ok(key, record):
            self.flag(position, record["id"], Problem.FORGED, "signature does not verify")

    def _note_call(self, position: int, record: dict[str, Any]) -> None:
        body = record.get("body")
        if record.get("kind") != "decision" or not isinstance(body, dict) or body.get("call_id") is None:
            return
        call_id = str(body["call_id"])
        self.call_sides[record["id"]] = CallSide(call_id, body.get("phase"), body.get("time"), record.get("key_id"))
        if body.get("phase") == "response" or body.get("decision") != "allow":
            self.closing[record["id"]] = (position, call_id)
            self.open_calls.pop(call_id, None)
        elif position not in self.flagged:  # a record found bad says nothing about its call
            self.open_calls[call_id] = self.requests[call_id] = str(record["id"])

    # -- after the pass -------------------------------------------------------------------------------

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
        return resolve(self.findings)


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


def signature_ok(key: PublicKey, sealed: Mapping[str, Any]) -> bool:
    try:
        digest = bytes.fromhex(str(sealed["hash"]))
    except (KeyError, ValueError):
        return False
    return key.verify(str(sealed.get("signature", "")), digest)
