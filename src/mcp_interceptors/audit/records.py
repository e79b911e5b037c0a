"""Pure audit records: a neutral decision input, hashes, JSON diffs and receipts.

No IO, no clock, no keys: the writer above supplies time, segment and a signing function; verify reuses the
same hashing. Canonical bytes come from `mcp_interceptors.canonical` (RFC 8785), shared with the signed
validation results.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal, NamedTuple, get_args

import orjson

from mcp_interceptors.audit._diff import json_diff
from mcp_interceptors.audit._withhold import ABSENT, Masker, removed_by, withhold_diff
from mcp_interceptors.canonical import canonical_json
from mcp_interceptors.protocol.chain import ChainStatus
from mcp_interceptors.protocol.errors import InterceptorsError
from mcp_interceptors.protocol.events import Direction, Phase
from mcp_interceptors.protocol.results import same_json

FORMAT_VERSION: Final = 1
#: Compound receipts are derived from the records they name, unsigned (`audit verify` recomputes them)...
RECEIPT_FORMAT_VERSION: Final = 2
#: ...since format 2; before, each carried an Ed25519 signature of its own.
SIGNED_RECEIPT_VERSION: Final = 1
GENESIS_HASH: Final = "0" * 64

Decision = Literal["allow", "deny", "error"]
#: The chain's status; or, after an allowed request, the upstream failed or the client cancelled the call;
#: or the gateway itself refused the call before dispatching it (no interceptor's verdict).
Status = Literal[ChainStatus, "upstream_error", "cancelled", "refused"]
RecordKind = Literal["segment", "decision"]

# Per-interceptor keys kept in a record; whole payloads never are (mutators keep a diff instead).
_ENTRY_KEYS: Final = (
    "name",
    "type",
    "mode",
    "fail_open",
    "valid",
    "severity",
    "messages",
    "modified",
    "duration_ms",
    "error",
    "approval",
)
_WORDS: Final = tuple(
    (name, frozenset(get_args(kind)))
    for name, kind in (("phase", Phase), ("direction", Direction), ("decision", Decision), ("status", Status))
)
_PHASES, _DIRECTIONS, _DECISIONS, _STATUSES = (allowed for _, allowed in _WORDS)
_UNSIGNED_FIELDS: Final = frozenset({"hash", "signature"})


class AuditError(InterceptorsError):
    """Root of the audit package's errors."""


@dataclass(slots=True)
class DecisionInput:
    """What one interceptor chain decided, in plain values; the gateway fills it from its chain result.

    Writers snapshot it when it is submitted (so changing it afterwards changes nothing recorded). Not frozen:
    the gateway builds one per governed leg, and a frozen dataclass costs three times as much to build.

    `intent_payload` is the payload the chain approved, `executed_payload` the one actually dispatched;
    either may be None (a denial dispatches nothing). `interceptors` holds one mapping per interceptor:
    name, type, mode, valid, severity, messages, modified, duration_ms, error, and for mutators either
    `payload_before` + `payload_after` or a ready `diff` (RFC 6902 operations). `redacted` holds text that
    mutations removed in earlier legs of the same call: the record withholds it wherever it would keep it.
    """

    timestamp: datetime
    event: str
    phase: Phase
    direction: Direction
    decision: Decision
    status: Status
    session_id: str | None = None
    principal: Mapping[str, Any] | None = None
    server: str | None = None
    call_id: str | None = None
    interceptors: Sequence[Mapping[str, Any]] = ()
    intent_payload: Any = None
    executed_payload: Any = None
    error: Mapping[str, Any] | None = None
    redacted: Sequence[str] = ()
    #: The OpenTelemetry trace of the call (32 hex digits), when the gateway traces it.
    trace_id: str | None = None
    #: What the call names: the tool of a `tools/call`, the uri of a `resources/read`, the prompt of a
    #: `prompts/get` (as the client asked for it); None for every other method.
    target: str | None = None

    def __post_init__(self) -> None:
        if self.timestamp.tzinfo is None:
            raise ValueError("DecisionInput.timestamp must be timezone-aware (use datetime.now(UTC))")
        if (
            self.phase in _PHASES
            and self.direction in _DIRECTIONS
            and self.decision in _DECISIONS
            and self.status in _STATUSES
        ):
            return  # the common case, without a loop: one of these is built for every leg the gateway governs
        for name, allowed in _WORDS:
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"DecisionInput.{name}={value!r}; expected one of {sorted(allowed)}")


@dataclass(frozen=True)
class CallEnd:
    """One side of a compound receipt: the record id, its hash and its time."""

    id: str
    hash: str
    time: str

    def to_dict(self) -> dict[str, str]:
        return {"id": self.id, "hash": self.hash, "time": self.time}


class PreparedEntry(NamedTuple):
    """A decision body already in canonical bytes (a snapshot: later mutation of inputs can't change it)."""

    body: bytes
    time: str
    phase: Phase
    call_id: str | None
    opens_call: bool
    closes_call: bool


class SealedRecord(NamedTuple):
    """A linked and signed record: its id, hash, signature and the exact JSON to store."""

    id: str
    hash: str
    signature: str
    json: bytes


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def payload_hash(payload: Any) -> str | None:
    """SHA-256 of the canonical payload, or None when there is no payload."""
    return None if payload is None else sha256_hex(canonical_json(payload))


def format_time(moment: datetime) -> str:
    """RFC 3339 UTC with microseconds, e.g. `2026-09-01T10:00:00.000000Z`."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds").removesuffix("+00:00") + "Z"


# -- decision bodies ------------------------------------------------------------------------------------


def entry_for(interceptor: Mapping[str, Any]) -> dict[str, Any]:
    """One interceptor's result as stored: the whitelisted keys, and a diff instead of payloads."""
    entry = {key: interceptor[key] for key in _ENTRY_KEYS if key in interceptor}
    if "diff" in interceptor:
        entry["diff"] = list(interceptor["diff"])
    elif "payload_before" in interceptor and "payload_after" in interceptor:
        entry["diff"] = json_diff(interceptor["payload_before"], interceptor["payload_after"])
    return entry


def drift_for(intent_hash: str | None, executed_hash: str | None) -> bool | None:
    """True when the dispatched payload differs from the approved one; None when either is unknown."""
    if intent_hash is None or executed_hash is None:
        return None
    return intent_hash != executed_hash


def removed_texts(interceptors: Sequence[Mapping[str, Any]], into: set[str] | None = None) -> set[str]:
    """The text the mutations among `interceptors` (with `payload_before` and `payload_after`, not marked
    `modified: false`) took out of their payloads, active or shadow: what later records of the same call must
    not keep (`DecisionInput.redacted`)."""
    removed: set[str] = set() if into is None else into
    for item in interceptors:
        if item.get("modified", True) and "payload_before" in item and "payload_after" in item:
            before = item["payload_before"]
            removed_by(json_diff(before, item["payload_after"]), before, removed)
    return removed


def kept_entries(decision: DecisionInput) -> tuple[list[dict[str, Any]], Masker]:
    """The interceptor entries as a record keeps them (docs/audit.md, *What a record keeps*): each diff's
    values only where the final payload still holds them, and no text a mutation of the call removed (in
    diffs, paths, messages, errors). Returns the masker too, for the record's other fields."""
    items = decision.interceptors
    entries = [entry_for(item) for item in items]
    if not decision.redacted and not any(entry.get("diff") for entry in entries):
        return entries, Masker(())  # nothing changed: the common case costs one scan
    removed = set(decision.redacted)
    for item, entry in zip(items, entries, strict=True):
        if entry.get("diff") and "payload_before" in item:
            removed_by(entry["diff"], item["payload_before"], removed)
    masker = Masker(removed)
    # A leg that was not allowed went nowhere: its mutations keep their operations, not their values.
    final = decision.intent_payload if decision.decision == "allow" else None
    for item, entry in zip(items, entries, strict=True):
        if entry.get("diff"):
            before = item.get("payload_before", ABSENT)
            shadow = item.get("mode") == "audit"
            entry["diff"] = withhold_diff(entry["diff"], final, masker, before, shadow=shadow)
        if masker:
            for key in ("messages", "error"):
                if key in entry:
                    entry[key] = masker.value(entry[key])
    return entries, masker


def body_for(decision: DecisionInput) -> dict[str, Any]:
    """The decision part of a record (everything the chain envelope does not add)."""
    intent, executed = decision.intent_payload, decision.executed_payload
    intent_hash = payload_hash(intent)
    # The same JSON hashes alike: one canonical form serves both (a copy made on the way out is the common case).
    same = executed is intent or (executed is not None and intent is not None and same_json(executed, intent))
    executed_hash = intent_hash if same else payload_hash(executed)
    entries, masker = kept_entries(decision)
    error = None if decision.error is None else dict(decision.error)
    body = {
        "time": format_time(decision.timestamp),
        "session_id": decision.session_id,
        "principal": None if decision.principal is None else dict(decision.principal),
        "server": decision.server,
        "event": decision.event,
        "phase": decision.phase,
        "direction": decision.direction,
        "decision": decision.decision,
        "status": decision.status,
        "call_id": decision.call_id,
        "target": _kept_target(decision.target, masker),
        "interceptors": entries,
        "intent_hash": intent_hash,
        "executed_hash": executed_hash,
        "drift": drift_for(intent_hash, executed_hash),
        "error": masker.value(error) if masker and error is not None else error,
    }
    if decision.trace_id is not None:  # only a traced call's records have it: the others are as they were
        body["trace_id"] = decision.trace_id
    return body


#: The longest `target` a record keeps whole (a client may name anything; a uri may be long).
MAX_TARGET_CHARS: Final = 1024


def _kept_target(target: str | None, masker: Masker) -> str | None:
    """The target as recorded: without text a mutation of the call removed (a token in a uri), and cut to
    `MAX_TARGET_CHARS` (ending in `…`)."""
    if target is None:
        return None
    kept = masker.text(target)
    return kept if len(kept) <= MAX_TARGET_CHARS else kept[: MAX_TARGET_CHARS - 1] + "…"


def prepare_entry(decision: DecisionInput) -> PreparedEntry:
    """Canonicalise a decision body now, on the caller's side, so the writer only links and signs."""
    body = body_for(decision)
    is_request = decision.phase == "request"
    has_call = decision.call_id is not None
    return PreparedEntry(
        body=canonical_json(body),
        time=body["time"],
        phase=decision.phase,
        call_id=decision.call_id,
        # A call ends with its response record, or at its request when the request was not allowed.
        closes_call=has_call and (not is_request or decision.decision != "allow"),
        opens_call=has_call and is_request and decision.decision == "allow",
    )


def segment_body_for(
    *,
    time: str,
    public_key: str,
    prev_record: str | None,
    endorsement: Mapping[str, Any] | None,
    writer: Mapping[str, Any],
) -> dict[str, Any]:
    """The body of a segment's first record: the key it is signed with and the record it continues."""
    return {
        "time": time,
        "public_key": public_key,
        "prev_record": prev_record,
        "endorsement": None if endorsement is None else dict(endorsement),
        "writer": dict(writer),
    }


# -- the chain envelope ---------------------------------------------------------------------------------


def record_id_for(segment_id: str, seq: int) -> str:
    return f"{segment_id}-{seq}"


def seal_record(
    *,
    kind: RecordKind,
    segment_id: str,
    seq: int,
    prev_hash: str,
    key_id: str,
    body: bytes,
    sign: Callable[[bytes], str],
) -> SealedRecord:
    """Link a canonical body into the chain and sign it."""
    unsigned = {
        "v": FORMAT_VERSION,
        "kind": kind,
        "id": record_id_for(segment_id, seq),
        "segment_id": segment_id,
        "seq": seq,
        "prev_hash": prev_hash,
        "key_id": key_id,
        "body": orjson.Fragment(body),
    }
    # Every envelope key is ASCII and every value an int or a string, so sorted orjson is RFC 8785 here.
    digest = hashlib.sha256(orjson.dumps(unsigned, option=orjson.OPT_SORT_KEYS)).digest()
    record_hash, signature = digest.hex(), sign(digest)
    unsigned["hash"], unsigned["signature"] = record_hash, signature
    return SealedRecord(id=str(unsigned["id"]), hash=record_hash, signature=signature, json=orjson.dumps(unsigned))


def hash_of(sealed: Mapping[str, Any]) -> str:
    """Recompute a sealed record's or receipt's hash from its content (what verify compares)."""
    unsigned = {key: value for key, value in sealed.items() if key not in _UNSIGNED_FIELDS}
    return sha256_hex(canonical_json(unsigned))


@dataclass(frozen=True)
class CompoundReceipt:
    """A receipt binding a call's request and response records; either side may be absent.

    Derived, not signed: every field it holds is in the two signed, chained records it names, so a
    signature of its own would attest nothing they do not (receipts before format 2 carried one)."""

    id: str
    call_id: str
    key_id: str
    request: CallEnd | None
    response: CallEnd | None
    hash: str

    def unhashed_dict(self) -> dict[str, Any]:
        return {
            "v": RECEIPT_FORMAT_VERSION,
            "kind": "receipt",
            "id": self.id,
            "call_id": self.call_id,
            "key_id": self.key_id,
            "request": None if self.request is None else self.request.to_dict(),
            "response": None if self.response is None else self.response.to_dict(),
        }

    def to_dict(self) -> dict[str, Any]:
        """The receipt as stored, exported and handed to clients."""
        return {**self.unhashed_dict(), "hash": self.hash}


def receipt_for(
    *, call_id: str, request: CallEnd | None, response: CallEnd | None, closing_id: str, key_id: str
) -> CompoundReceipt:
    """A call's compound receipt; its id is the id of the record that closed the call."""
    draft = CompoundReceipt(id=closing_id, call_id=call_id, key_id=key_id, request=request, response=response, hash="")
    # As in `seal_record`: ASCII keys, and values that are strings, ints or null, so sorted orjson is RFC 8785.
    digest = hashlib.sha256(orjson.dumps(draft.unhashed_dict(), option=orjson.OPT_SORT_KEYS)).hexdigest()
    return CompoundReceipt(closing_id, call_id, key_id, request, response, digest)
