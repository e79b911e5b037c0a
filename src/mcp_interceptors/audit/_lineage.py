"""Verification, segment lineage: each header's link to the record it continues, its rotation endorsement,
and whether its key is trusted (given, the key of the segment it continues, or endorsed by that key).

Runs once the records are read (`finish_segments`), on the state `ChainWalk` gathered.
"""

from __future__ import annotations

from mcp_interceptors.audit._chain_walk import ChainWalk, SegmentState
from mcp_interceptors.audit._findings import Problem
from mcp_interceptors.audit.records import GENESIS_HASH
from mcp_interceptors.audit.signing import is_endorsed_by


def finish_segments(walk: ChainWalk) -> None:
    """Check each segment header read: its link, its endorsement, and that its key is trusted."""
    memo: dict[str, bool] = {}
    for segment in walk.segments.values():
        if segment.header is None:
            continue
        _link(walk, segment)
        _endorsement(walk, segment)
        if segment.key is not None and not _is_trusted(walk, segment, set(), memo):
            header = segment.header
            walk.flag(
                segment.header_position,
                header["id"],
                Problem.FORGED,
                f"key {segment.key.key_id} is neither trusted nor endorsed by the key it rotates from",
            )


def _link(walk: ChainWalk, segment: SegmentState) -> None:
    header = segment.header
    assert header is not None
    prev_record = (header.get("body") or {}).get("prev_record")
    position, record_id = segment.header_position, header["id"]
    if prev_record is not None and not isinstance(prev_record, str):
        walk.flag(position, record_id, Problem.EDITED, "segment header's prev_record is not a record id")
    elif prev_record is None:
        if header.get("prev_hash") != GENESIS_HASH:
            walk.flag(position, record_id, Problem.BROKEN_LINK, "first segment does not start at genesis")
    elif prev_record not in walk.hashes:
        if walk.runs is not None and prev_record.rsplit("-", 1)[0] not in walk.segments:
            return  # an excerpt that read nothing of the segment it continues: not checked here
        walk.flag(position, record_id, Problem.DELETED, f"links to record {prev_record}, which is missing")
    elif walk.hashes[prev_record] != header.get("prev_hash"):
        walk.flag(position, record_id, Problem.BROKEN_LINK, f"prev_hash does not match record {prev_record}")


def _endorsement(walk: ChainWalk, segment: SegmentState) -> None:
    header = segment.header
    assert header is not None
    endorsement = (header.get("body") or {}).get("endorsement")
    previous = _predecessor(walk, segment)
    if endorsement is None or segment.key is None or previous is None or previous.key is None:
        return
    if not isinstance(endorsement, dict) or not is_endorsed_by(endorsement, segment.key, previous.key):
        detail = f"rotation endorsement by key {previous.key.key_id} does not verify"
        walk.flag(segment.header_position, header["id"], Problem.FORGED, detail)


def _predecessor(walk: ChainWalk, segment: SegmentState) -> SegmentState | None:
    prev_record = ((segment.header or {}).get("body") or {}).get("prev_record")
    if not isinstance(prev_record, str):
        return None
    return walk.segments.get(prev_record.rsplit("-", 1)[0])


def _is_trusted(walk: ChainWalk, segment: SegmentState, visiting: set[str], memo: dict[str, bool]) -> bool:
    key = segment.key
    if key is None or segment.segment_id in visiting:
        return False
    if segment.segment_id in memo:
        return memo[segment.segment_id]
    visiting.add(segment.segment_id)
    previous = _predecessor(walk, segment)
    endorsement = ((segment.header or {}).get("body") or {}).get("endorsement")
    if walk.trusted is not None and key.key_id in walk.trusted:
        trusted = walk.trusted[key.key_id] == key
    elif previous is None or previous.key is None:
        trusted = walk.trusted is None and previous is None  # trust on first use, genesis only
    elif previous.key == key:
        trusted = _is_trusted(walk, previous, visiting, memo)
    else:
        trusted = (
            isinstance(endorsement, dict)
            and is_endorsed_by(endorsement, key, previous.key)
            and _is_trusted(walk, previous, visiting, memo)
        )
    memo[segment.segment_id] = trusted
    return trusted
