"""Verification: walk every record and receipt, check hashes, signatures, sequence and links, and name
the first bad record with why (edited, deleted, reordered, forged, broken link).

Works on any `RecordSource` (a live store or a JSONL export); needs the trusted public keys, nothing else.
`verify_excerpt` runs the same walk over a few records read on purpose (one call, its neighbours and segment
headers), for views that show the status of single records without reading the whole trail.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from mcp_interceptors.audit._chain_walk import ChainWalk, duplicate_key
from mcp_interceptors.audit._findings import Finding, Problem, VerifyReport
from mcp_interceptors.audit._lineage import finish_segments
from mcp_interceptors.audit._receipt_checks import check_receipt, missing_receipts
from mcp_interceptors.audit.anchors import Anchor, HeldReceipt, check_signatures
from mcp_interceptors.audit.signing import PublicKey
from mcp_interceptors.audit.store import ItemKind, RecordSource

__all__ = ["Finding", "Problem", "VerifyReport", "duplicate_key", "verify_excerpt", "verify_records", "verify_source"]


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
    walk = ChainWalk(trusted)
    seen: set[str] = set()
    position, receipt_count = _walk_items(walk, items, seen)
    missing_receipts(walk, seen)
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
    walk = ChainWalk(trusted, runs)
    seen: set[str] = set()
    _, receipt_count = _walk_items(walk, items, seen)
    missing_receipts(walk, seen, calls)
    return VerifyReport(walk.count, len(walk.segments), receipt_count, walk.result(), tuple(_trust_notes(trusted)))


def _walk_items(walk: ChainWalk, items: Iterable[tuple[ItemKind, bytes]], seen: set[str]) -> tuple[int, int]:
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
            finish_segments(walk)
            segments_done = True
        check_receipt(walk, position, raw, seen)
        receipt_count += 1
    if not segments_done:
        finish_segments(walk)
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
