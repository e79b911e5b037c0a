"""Anchors: records the verifier is told exist, with their hashes, from outside the trail.

A hash chain cannot show that its newest records were cut off: the records before the cut still link and
verify. An anchor can. It is a chain head an operator wrote down elsewhere (`audit head`), or a receipt a
client kept from a reply's `_meta`. `audit verify --anchor FILE` checks that each anchored record is still
in the trail with the same hash.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from mcp_interceptors.audit.records import SIGNED_RECEIPT_VERSION, AuditError, hash_of
from mcp_interceptors.audit.signing import PublicKey
from mcp_interceptors.audit.store import split_record_id
from mcp_interceptors.canonical import CanonicalizationError

#: Where a reply's `_meta` carries its records and compound receipt (gateway `audit.receipts: true`).
RECEIPT_META_KEY = "io.github.mcp-interceptors/receipt"


class AnchorError(AuditError):
    """An anchor file that cannot be read, or an anchor whose signature is not the trail's."""


@dataclass(frozen=True)
class Anchor:
    """One record said to exist with `hash`; `origin` names where that was said (file and line)."""

    record_id: str
    hash: str
    origin: str
    signature: str | None = None
    key_id: str | None = None


@dataclass(frozen=True)
class HeldReceipt:
    """A compound receipt an anchor line carried: it names records, each of which must be in the trail."""

    receipt: Mapping[str, Any]
    origin: str


def read_anchors(path: Path) -> tuple[list[Anchor], list[HeldReceipt]]:
    """The anchors in `path`: JSON lines (or one JSON document) of `audit head` lines, `_meta` receipts
    (with or without their `_meta` key), compound receipts, or `{"id", "hash"}` references."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise AnchorError(f"cannot read anchor file {path}: {detail}") from None
    anchors: list[Anchor] = []
    receipts: list[HeldReceipt] = []
    for origin, item in _documents(path, text):
        _collect(item, origin, anchors, receipts)
    if not anchors:
        raise AnchorError(f"anchor file {path} names no records")
    return anchors, receipts


def _documents(path: Path, text: str) -> Iterator[tuple[str, Any]]:
    """JSON lines, or else one JSON document spread over lines (a saved `_meta`, `audit show` output)."""
    lines: list[tuple[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            lines.append((f"{path} line {number}", orjson.loads(line)))
        except orjson.JSONDecodeError as exc:
            try:
                whole = orjson.loads(text)
            except orjson.JSONDecodeError:
                raise AnchorError(f"{path} line {number}: not JSON ({exc})") from None
            lines = [(str(path), whole)]
            break
    for origin, item in lines:
        if isinstance(item, list):
            yield from ((f"{origin} item {index}", each) for index, each in enumerate(item, start=1))
        else:
            yield origin, item


def _collect(item: Any, origin: str, anchors: list[Anchor], receipts: list[HeldReceipt]) -> None:
    if not isinstance(item, dict):
        raise AnchorError(f"{origin}: expected a JSON object, got {type(item).__name__}")
    if RECEIPT_META_KEY in item:  # a whole `_meta`
        _collect(item[RECEIPT_META_KEY], origin, anchors, receipts)
        return
    if "records" in item or ("receipt" in item and "kind" not in item):  # a `_meta` receipt, or `audit show`
        records = item.get("records", [])
        if not isinstance(records, list):
            raise AnchorError(f"{origin}: records must be a list")
        for record in records:
            _collect(record, origin, anchors, receipts)
        for name in ("record", "receipt"):
            if isinstance(item.get(name), dict):
                _collect(item[name], origin, anchors, receipts)
        return
    if item.get("kind") == "receipt":
        receipts.append(HeldReceipt(item, origin))
        for side in ("request", "response"):
            end = item.get(side)
            if end is not None:
                anchors.append(_anchor(end, f"{origin} ({side} of call {item.get('call_id')})"))
        return
    anchors.append(_anchor(item, origin))


def _anchor(item: Any, origin: str) -> Anchor:
    record_id = item.get("id") if isinstance(item, dict) else None
    digest = item.get("hash") if isinstance(item, dict) else None
    if not isinstance(record_id, str) or split_record_id(record_id) is None:
        raise AnchorError(f'{origin}: no record id (a string <segment>-<seq> under "id")')
    if not isinstance(digest, str) or not digest:
        raise AnchorError(f"{origin}: record {record_id} has no hash")
    signature = item.get("signature")
    key_id = item.get("keyId", item.get("key_id"))
    return Anchor(
        record_id,
        digest,
        origin,
        signature if isinstance(signature, str) else None,
        key_id if isinstance(key_id, str) else None,
    )


def check_signatures(anchors: Sequence[Anchor], receipts: Sequence[HeldReceipt], keys: Mapping[str, PublicKey]) -> None:
    """Raise `AnchorError` for an anchor signed by a key the trail does not know or that does not verify:
    a record missing from the trail is proof of a cut only if the anchor is the trail's own word."""
    for anchor in anchors:
        if anchor.signature is not None:
            _check(anchor.origin, f"record {anchor.record_id}", anchor.key_id, anchor.signature, anchor.hash, keys)
    for held in receipts:
        receipt = held.receipt
        name = f"the receipt of call {receipt.get('call_id')}"
        try:
            recomputed = hash_of(receipt)
        except (CanonicalizationError, TypeError, ValueError) as exc:  # not canonicalisable: edited
            raise AnchorError(f"{held.origin}: {name} is not a well-formed receipt ({exc})") from None
        if recomputed != receipt.get("hash"):
            raise AnchorError(f"{held.origin}: {name} does not match its hash; it was altered")
        if receipt.get("v") == SIGNED_RECEIPT_VERSION:  # later receipts are derived, unsigned
            _check(held.origin, name, receipt.get("key_id"), receipt.get("signature"), recomputed, keys)


def _check(origin: str, name: str, key_id: Any, signature: Any, digest: str, keys: Mapping[str, PublicKey]) -> None:
    key = keys.get(str(key_id))
    if key is None:
        raise AnchorError(f"{origin}: {name} is signed by key {key_id}, which is neither trusted nor in the trail")
    try:
        valid = isinstance(signature, str) and key.verify(signature, bytes.fromhex(digest))
    except ValueError:
        valid = False
    if not valid:
        raise AnchorError(f"{origin}: the signature of {name} does not verify with key {key_id}")
