"""One writer's chain segment: links, signs and stores batches of prepared entries.

Synchronous, and the only code that moves a chain head: the in-process `AuditWriter` drives one from the
event loop (or a worker thread), the writer process (`audit.process`) from its own main loop.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from cachetools import FIFOCache

from mcp_interceptors.audit.records import (
    GENESIS_HASH,
    CallEnd,
    CompoundReceipt,
    PreparedEntry,
    format_time,
    receipt_for,
    seal_record,
    segment_body_for,
)
from mcp_interceptors.audit.signing import SigningKey
from mcp_interceptors.audit.store import ReceiptRow, RecordRow, Store, StoreError
from mcp_interceptors.canonical import canonical_json


@dataclass(frozen=True)
class AuditReceipt:
    """Proof that a record is durable: its id, hash, signature and key id, plus a compound receipt
    when the record closed a call (a response, or a request that was not allowed)."""

    id: str
    hash: str
    signature: str
    key_id: str
    compound: CompoundReceipt | None = None

    def to_wire(self) -> list[Any]:
        """Compact JSON form, as the writer process hands it back."""
        compound = self.compound
        return [self.id, self.hash, self.signature, self.key_id, None if compound is None else compound.to_dict()]

    @classmethod
    def from_wire(cls, value: Sequence[Any]) -> AuditReceipt:
        record_id, record_hash, signature, key_id, compound = value
        return cls(record_id, record_hash, signature, key_id, None if compound is None else compound_from(compound))


def compound_from(data: Mapping[str, Any]) -> CompoundReceipt:
    """A compound receipt from its stored (`to_dict`) form."""

    def end(side: Mapping[str, str] | None) -> CallEnd | None:
        return None if side is None else CallEnd(id=side["id"], hash=side["hash"], time=side["time"])

    return CompoundReceipt(
        id=data["id"],
        call_id=data["call_id"],
        key_id=data["key_id"],
        request=end(data["request"]),
        response=end(data["response"]),
        hash=data["hash"],
    )


class Segment:
    """A chain segment owned by one writer: `open()` once, then `write(entries)` per batch (one transaction)."""

    def __init__(self, store: Store, key: SigningKey, *, open_calls_limit: int = 100_000) -> None:
        self.store = store
        self.key = key
        self.segment_id = uuid.uuid4().hex
        self._seq = -1
        self._prev_hash = GENESIS_HASH
        # Calls whose response never comes must not grow memory forever: past the limit the oldest is dropped
        # (the store still has it, and `find_request` reads it back).
        self._open_calls: FIFOCache[str, CallEnd] = FIFOCache(maxsize=open_calls_limit)
        #: The last record of a batch whose commit failed, until the store says whether it landed anyway.
        self._unsure: RecordRow | None = None

    def open(self) -> None:
        """Write (and make durable) the segment's first record, linked to the tail of this key's lineage."""
        tail = self.store.lineage_tail(self.key.trusted().keys())
        endorsement = self.key.endorsement
        # The endorsement travels in the first segment after a rotation: the one continuing the old key.
        if tail is None or tail.key_id == self.key.key_id or (endorsement or {}).get("key_id") != tail.key_id:
            endorsement = None
        body = segment_body_for(
            time=format_time(datetime.now(UTC)),
            public_key=self.key.public.public_key,
            prev_record=None if tail is None else tail.record_id,
            endorsement=endorsement,
            writer={"host": socket.gethostname(), "pid": os.getpid()},
        )
        prev_hash = GENESIS_HASH if tail is None else tail.hash
        sealed = seal_record(
            kind="segment",
            segment_id=self.segment_id,
            seq=0,
            prev_hash=prev_hash,
            key_id=self.key.key_id,
            body=canonical_json(body),
            sign=self.key.sign,
        )
        row = RecordRow(
            id=sealed.id,
            segment_id=self.segment_id,
            seq=0,
            kind="segment",
            time=body["time"],
            key_id=self.key.key_id,
            call_id=None,
            phase=None,
            hash=sealed.hash,
            json=sealed.json,
        )
        self.store.append([row], [])
        if self.store.needs_sync:
            self.store.sync()
        self._seq, self._prev_hash = 0, sealed.hash

    def write(self, entries: Sequence[PreparedEntry]) -> list[AuditReceipt]:
        """Link, sign and store `entries` in one transaction (not synced: see `Store.sync`)."""
        if self._unsure is not None:
            self._settle_unsure()
        seq, prev_hash = self._seq, self._prev_hash
        key_id = self.key.key_id
        rows: list[RecordRow] = []
        receipt_rows: list[ReceiptRow] = []
        results: list[AuditReceipt] = []
        opened: dict[str, CallEnd] = {}
        closed: list[str] = []
        for entry in entries:
            seq += 1
            sealed = seal_record(
                kind="decision",
                segment_id=self.segment_id,
                seq=seq,
                prev_hash=prev_hash,
                key_id=key_id,
                body=entry.body,
                sign=self.key.sign,
            )
            prev_hash = sealed.hash
            rows.append(
                RecordRow(
                    id=sealed.id,
                    segment_id=self.segment_id,
                    seq=seq,
                    kind="decision",
                    time=entry.time,
                    key_id=key_id,
                    call_id=entry.call_id,
                    phase=entry.phase,
                    hash=sealed.hash,
                    json=sealed.json,
                )
            )
            end = CallEnd(id=sealed.id, hash=sealed.hash, time=entry.time)
            compound = None
            if entry.call_id is not None and entry.opens_call:
                opened[entry.call_id] = end
            elif entry.call_id is not None and entry.closes_call:
                compound = self._compound_for(entry, end, opened)
                closed.append(entry.call_id)
                receipt_rows.append(
                    ReceiptRow(
                        id=compound.id,
                        call_id=compound.call_id,
                        key_id=key_id,
                        hash=compound.hash,
                        json=orjson.dumps(compound.to_dict()),
                    )
                )
            results.append(AuditReceipt(sealed.id, sealed.hash, sealed.signature, key_id, compound))
        try:
            self.store.append(rows, receipt_rows)
        except Exception:
            # Only a committed batch moves the chain head; a failed one is retried from the same place. Unless
            # it was committed after all (the connection broke after the commit went out): then it stands.
            self._unsure = rows[-1] if rows else None
            landed = self._landed()
            if landed is False:
                self._unsure = None  # refused outright: the next batch reuses its sequence numbers
            if landed is not True:
                raise
        self._unsure = None
        self._seq, self._prev_hash = seq, prev_hash
        self._remember_calls(opened, closed)
        return results

    def _settle_unsure(self) -> None:
        """Before writing after a failed batch, learn whether it was committed, and go on from there."""
        unsure = self._unsure
        if unsure is None:
            return
        landed = self._landed()
        if landed is None:
            raise StoreError(f"the store cannot say whether the failed batch ending at {unsure.id} was written")
        if landed:  # its records were reported unwritten but are in the chain: the next batch follows them
            self._seq, self._prev_hash = unsure.seq, unsure.hash
        self._unsure = None

    def _landed(self) -> bool | None:
        """Whether the last record of the batch whose commit failed is in the store, as sealed (None: unknown)."""
        unsure = self._unsure
        if unsure is None:
            return False
        try:
            stored = self.store.get_record(unsure.id)
            return stored is not None and orjson.loads(stored).get("hash") == unsure.hash
        except Exception:  # the store is unreachable still, or that row is unreadable: it cannot say
            return None

    def _compound_for(self, entry: PreparedEntry, end: CallEnd, opened: Mapping[str, CallEnd]) -> CompoundReceipt:
        call_id = entry.call_id
        assert call_id is not None
        request: CallEnd | None = end
        response: CallEnd | None = None
        if entry.phase == "response":
            request = opened.get(call_id) or self._open_calls.get(call_id) or self.store.find_request(call_id)
            response = end
        return receipt_for(
            call_id=call_id, request=request, response=response, closing_id=end.id, key_id=self.key.key_id
        )

    def _remember_calls(self, opened: Mapping[str, CallEnd], closed: Sequence[str]) -> None:
        for call_id in closed:
            self._open_calls.pop(call_id, None)
        for call_id, end in opened.items():
            if call_id not in closed:
                self._open_calls[call_id] = end
