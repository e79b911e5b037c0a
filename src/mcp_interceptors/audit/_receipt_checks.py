"""Verification, receipts: each compound receipt against the records it names (hash, format, signature of a
format-1 receipt, every field derived from its records), and the closing records whose receipt is missing.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import orjson

from mcp_interceptors.audit._chain_walk import ChainWalk, duplicate_key, signature_ok
from mcp_interceptors.audit._findings import Problem
from mcp_interceptors.audit.records import RECEIPT_FORMAT_VERSION, SIGNED_RECEIPT_VERSION, hash_of
from mcp_interceptors.audit.store import RECEIPT_INDEX_COLUMNS


def check_receipt(walk: ChainWalk, position: int, raw: bytes, seen: set[str]) -> None:
    """Check one stored receipt (read after every record) and note its id in `seen`."""
    try:
        receipt = orjson.loads(raw)
        receipt_id, claimed = str(receipt["id"]), str(receipt["hash"])
    except (orjson.JSONDecodeError, KeyError, TypeError):
        walk.flag(position, f"receipt#{position - walk.count + 1}", Problem.EDITED, "not a well-formed receipt")
        return
    name = f"receipt:{receipt_id}"
    seen.add(receipt_id)
    walk.indexed = (position, name, {column: receipt.get(column) for column in RECEIPT_INDEX_COLUMNS})
    duplicate = duplicate_key(raw, receipt)
    if duplicate is not None:
        walk.flag(position, name, Problem.EDITED, duplicate)
        return
    if hash_of(receipt) != claimed:
        walk.flag(position, name, Problem.EDITED, "content does not match its hash")
        return
    version = receipt.get("v")
    if version == SIGNED_RECEIPT_VERSION:
        key = walk.known_keys().get(str(receipt.get("key_id")))
        if key is None:
            walk.flag(position, name, Problem.FORGED, f"signed by unknown key id {receipt.get('key_id')}")
            return
        if not signature_ok(key, receipt):
            walk.flag(position, name, Problem.FORGED, "signature does not verify")
            return
    elif version != RECEIPT_FORMAT_VERSION:
        walk.flag(position, name, Problem.EDITED, f"unknown receipt format version {version!r}")
        return
    for side in ("request", "response"):
        end = receipt.get(side)
        if not isinstance(end, dict):
            continue
        stored = walk.hashes.get(str(end.get("id")))
        if stored is None:
            walk.flag(position, name, Problem.DELETED, f"its {side} record {end.get('id')} is missing")
        elif stored != end.get("hash"):
            walk.flag(position, name, Problem.EDITED, f"its {side} record {end.get('id')} has another hash")
    if version == RECEIPT_FORMAT_VERSION and (wrong := _underived(walk, receipt_id, receipt)) is not None:
        walk.flag(position, name, Problem.EDITED, wrong)


def _underived(walk: ChainWalk, receipt_id: str, receipt: Mapping[str, Any]) -> str | None:
    """Why an unsigned receipt is not what its records make of it, if it is not: only its signed records
    vouch for it, so every field must be theirs (the hashes of its sides are checked already)."""
    closing = walk.call_sides.get(receipt_id)
    if receipt_id not in walk.closing or closing is None:
        return f"record {receipt_id} closes no call"
    if receipt.get("call_id") != closing.call_id or receipt.get("key_id") != closing.key_id:
        return f"its call_id or key_id is not its closing record's ({closing.call_id}, {closing.key_id})"
    closed_by_response = closing.phase == "response"
    if receipt.get("response") != (_side(walk, receipt_id) if closed_by_response else None):
        return f"its response side is not {'its closing record' if closed_by_response else 'null'}"
    request = receipt.get("request")
    wanted: dict[str, Any] | None
    if not closed_by_response:
        wanted = _side(walk, receipt_id)
    elif request is None:  # only for the response of a call whose request record was never written
        written = walk.requests.get(closing.call_id)
        return None if written is None else f"its request side is null, but request record {written} is its call's"
    else:
        request_id = str(request.get("id")) if isinstance(request, dict) else ""
        side = walk.call_sides.get(request_id)
        matches = side is not None and side.phase == "request" and side.call_id == closing.call_id
        wanted = _side(walk, request_id) if matches else None
    return None if request == wanted else "its request side is not a request record of its call"


def _side(walk: ChainWalk, record_id: str) -> dict[str, Any]:
    return {"id": record_id, "hash": walk.hashes.get(record_id), "time": walk.call_sides[record_id].time}


def missing_receipts(walk: ChainWalk, seen: set[str], calls: Collection[str] | None = None) -> None:
    """Closing records without their receipt (of `calls` only, when given: an excerpt reads the receipts of
    those calls, not of every call whose records it read as neighbours)."""
    for record_id, (position, call_id) in walk.closing.items():
        if record_id not in seen and (calls is None or call_id in calls):
            walk.flag(position, record_id, Problem.DELETED, f"the compound receipt of call {call_id} is missing")
