"""The functions behind `audit tail/show/head/verify/export/keys`: open a store, print, return an exit code.

`cli.py` parses arguments and calls these; nothing here parses argv. Exit codes: 0 fine, 1 the audit
trail failed verification, 2 the store, record or key could not be read.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TextIO

import orjson

from mcp_interceptors.audit.anchors import Anchor, HeldReceipt, read_anchors
from mcp_interceptors.audit.records import AuditError
from mcp_interceptors.audit.signing import (
    DEFAULT_KEY_PATH,
    PublicKey,
    load_key,
    read_public_keys,
    rotate_key,
)
from mcp_interceptors.audit.store import RecordSource, Store
from mcp_interceptors.audit.targets import open_source, open_store
from mcp_interceptors.audit.verify import verify_source

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_ERROR: Final = 2

Target = str | Path


def tail(
    target: Target,
    out: TextIO,
    *,
    limit: int = 20,
    follow: bool = False,
    as_json: bool = False,
    poll_interval: float = 1.0,
    should_stop: Callable[[], bool] = lambda: False,
    err: TextIO = sys.stderr,
) -> int:
    """Print the last `limit` records; with `follow`, keep printing new ones until `should_stop()`."""
    try:
        store = open_store(target, create=False)
    except AuditError as exc:
        return _fail(err, exc)
    readable = True
    try:
        recent = store.tail(limit)
        follower = Follower(recent[0][0] - 1 if recent else 0)
        follower.saw(recent)
        for pos, raw in recent:
            readable = _print_record(out, pos, raw, as_json) and readable
        while follow and not should_stop():
            for pos, raw in follower.poll(store):
                readable = _print_record(out, pos, raw, as_json) and readable
            out.flush()
            # Polling is the interface here: readers must not hold locks the writer needs.
            time.sleep(poll_interval)
    except AuditError as exc:
        return _fail(err, exc)
    finally:
        store.close()
    if not readable:
        return _fail(err, "some records are not well-formed JSON objects; `audit verify` names them")
    return EXIT_OK


#: How long `tail --follow` keeps looking for a record at a position it skipped. PostgreSQL numbers a
#: row when it is inserted and shows it when its transaction commits, so a replica's slower commit
#: appears after rows numbered later; a position still empty after this long was a rolled-back insert.
GAP_WAIT_S: Final = 60.0
#: At most this many skipped positions are watched (the newest): a sequence jump is not a late commit.
_MAX_GAPS: Final = 10_000


class Follower:
    """New records since the last poll: those past the highest position seen, and any that appeared
    at a position skipped within `GAP_WAIT_S`."""

    def __init__(self, last_pos: int) -> None:
        self.last_pos = last_pos
        self.gaps: dict[int, float] = {}  # skipped position -> when it was first missed

    def poll(self, store: Store) -> list[tuple[int, bytes]]:
        now = time.monotonic()
        self.gaps = {pos: since for pos, since in self.gaps.items() if now - since < GAP_WAIT_S}
        late = store.records_at(self.gaps) if self.gaps else []
        for pos, _ in late:
            del self.gaps[pos]
        new = list(store.iter_records(after_pos=self.last_pos))
        self.saw(new, now)
        return late + new

    def saw(self, rows: Sequence[tuple[int, bytes]], now: float | None = None) -> None:
        """Note the positions `rows` (in storage order, past `last_pos`) skipped, and move past them."""
        if not rows:
            return
        now = time.monotonic() if now is None else now
        expected = self.last_pos + 1
        for pos, _ in rows:
            for missing in range(max(expected, pos - _MAX_GAPS), pos):
                self.gaps[missing] = now
            expected = pos + 1
        self.last_pos = rows[-1][0]
        if len(self.gaps) > _MAX_GAPS:
            self.gaps = {pos: self.gaps[pos] for pos in sorted(self.gaps)[-_MAX_GAPS:]}


def show(target: Target, record_id: str, out: TextIO, *, err: TextIO = sys.stderr) -> int:
    """Print one record, and its compound receipt when the record closed a call."""
    try:
        store = open_store(target, create=False)
    except AuditError as exc:
        return _fail(err, exc)
    try:
        raw = store.get_record(record_id)
        if raw is None:
            return _fail(err, f"no audit record with id {record_id}")
        record = _json_object(raw)
        if record is None:
            return _fail(err, f"audit record {record_id} is not a well-formed JSON object; run `audit verify`")
        if record.get("id") != record_id:
            # The store finds a record by its index columns, which verification does not cover: never
            # show another record under the id asked for.
            return _fail(err, f"the row indexed as {record_id} holds record {record.get('id')!r}; run `audit verify`")
        document: dict[str, Any] = {"record": record}
        receipt_raw = store.get_receipt(record_id)
        if receipt_raw is not None:
            receipt = _json_object(receipt_raw)
            if receipt is None:
                return _fail(err, f"the receipt of {record_id} is not a well-formed JSON object; run `audit verify`")
            if receipt.get("id") != record_id:
                detail = f"the receipt indexed as {record_id} is the receipt of {receipt.get('id')!r}"
                return _fail(err, f"{detail}; run `audit verify`")
            document["receipt"] = receipt
        out.write(orjson.dumps(document, option=orjson.OPT_INDENT_2).decode() + "\n")
    except AuditError as exc:
        return _fail(err, exc)
    finally:
        store.close()
    return EXIT_OK


def verify(
    target: Target,
    out: TextIO,
    *,
    trusted_keys: Sequence[Path] = (),
    key_path: Path | None = DEFAULT_KEY_PATH,
    anchor_files: Sequence[Path] = (),
    max_findings: int = 20,
    err: TextIO = sys.stderr,
) -> int:
    """Check every hash link, signature and receipt, and that every record the `anchor_files` name is
    there with its hash; name the first bad record and why (exit 1)."""
    anchors: list[Anchor] = []
    held: list[HeldReceipt] = []
    try:
        for path in anchor_files:
            found, receipts = read_anchors(path)
            anchors.extend(found)
            held.extend(receipts)
        trusted = trust_anchors(trusted_keys, key_path)
        source: RecordSource = open_source(target)
    except (AuditError, OSError) as exc:
        return _fail(err, exc)
    try:
        report = verify_source(source, trusted, anchors, held)
    except AuditError as exc:  # the store could not be read to the end: nothing was verified
        return _fail(err, exc)
    finally:
        source.close()
    for note in report.notes:
        out.write(f"note: {note}\n")
    counts = f"{report.records} records in {report.segments} segments, {report.receipts} receipts"
    if anchors:
        counts += f", {len(anchors)} anchored records"
    first = report.first
    if first is None:
        out.write(f"OK: {counts}\n")
        return EXIT_OK
    out.write(f"FAILED: {counts}\nfirst bad record: {first.record_id}: {first.problem.value}: {first.detail}\n")
    for finding in report.findings[1:max_findings]:
        out.write(f"  also: {finding}\n")
    if len(report.findings) > max_findings:
        out.write(f"  … and {len(report.findings) - max_findings} more\n")
    return EXIT_FAILED


def head(target: Target, out: TextIO, *, err: TextIO = sys.stderr) -> int:
    """Print each segment's newest record as a JSON line `{id, hash, signature, keyId, time}`: kept
    elsewhere, these lines are anchors for `verify --anchor`, which then detects a trail cut after them."""
    try:
        source = open_source(target)
    except AuditError as exc:
        return _fail(err, exc)
    heads: dict[str, tuple[int, dict[str, Any]]] = {}
    try:
        for kind, raw in source.iter_snapshot():
            record = _json_object(raw) if kind == "record" else None
            seq = record.get("seq") if record is not None else None
            if record is None or not isinstance(seq, int) or not isinstance(record.get("segment_id"), str):
                continue  # not a record `verify` accepts; it names it
            newest = heads.get(record["segment_id"])
            if newest is None or seq > newest[0]:
                heads[record["segment_id"]] = (seq, record)
    except AuditError as exc:
        return _fail(err, exc)
    finally:
        source.close()
    for _, record in heads.values():
        body = record.get("body")
        line = {
            "id": record.get("id"),
            "hash": record.get("hash"),
            "signature": record.get("signature"),
            "keyId": record.get("key_id"),
            "time": body.get("time") if isinstance(body, dict) else None,
        }
        out.write(orjson.dumps(line).decode() + "\n")
    return EXIT_OK


def export_jsonl(target: Target, out: TextIO, *, err: TextIO = sys.stderr) -> int:
    """Write every record (storage order) and then every receipt, one JSON object per line."""
    try:
        source = open_source(target)
    except AuditError as exc:
        return _fail(err, exc)
    try:
        for _, raw in source.iter_snapshot():
            # Text that is not UTF-8 is not a record; it is exported replaced, and fails verification.
            out.write(raw.decode(errors="replace") + "\n")
    except AuditError as exc:
        return _fail(err, exc)
    finally:
        source.close()
    return EXIT_OK


def keys(
    target: Target | None,
    out: TextIO,
    *,
    key_path: Path = DEFAULT_KEY_PATH,
    rotate: bool = False,
    export: bool = False,
    err: TextIO = sys.stderr,
) -> int:
    """Show the local key (and rotate it), export trust anchors as JSON lines, or list the store's keys."""
    try:
        key = rotate_key(key_path) if rotate else load_key(key_path)
    except AuditError as exc:
        return _fail(err, exc)
    if export:
        for anchor in key.trusted().values():
            out.write(orjson.dumps({"key_id": anchor.key_id, "public_key": anchor.public_key}).decode() + "\n")
        return EXIT_OK
    out.write(f"key file: {key_path.expanduser()}\n")
    out.write(f"current key: {key.key_id} {key.public.public_key} (created {key.created_at})\n")
    if key.endorsement is not None:
        out.write(f"endorsed by: {key.endorsement.get('key_id')} at {key.endorsement.get('rotated_at')}\n")
    for retired in key.retired:
        out.write(f"retired key: {retired.key_id} {retired.public_key}\n")
    if target is None:
        return EXIT_OK
    try:
        store: Store = open_store(target, create=False)
    except AuditError as exc:
        return _fail(err, exc)
    try:
        seen, unreadable = _store_keys(store)
    except AuditError as exc:
        return _fail(err, exc)
    finally:
        store.close()
    trusted = key.trusted()
    for key_id, (public_key, segments) in seen.items():
        status = "trusted" if trusted.get(key_id) == public_key else "not in the local key file"
        out.write(f"store key: {key_id} {public_key.public_key} segments={segments} ({status})\n")
    if unreadable:
        return _fail(err, f"{unreadable} records have no readable key; `audit verify` names them")
    return EXIT_OK


def _store_keys(source: RecordSource) -> tuple[dict[str, tuple[PublicKey, int]], int]:
    """The keys of the store's segment headers, with how many segments each signed; and how many
    records could not be read as a record or a header's key."""
    seen: dict[str, tuple[PublicKey, int]] = {}
    unreadable = 0
    for _, raw in source.iter_records():
        record = _json_object(raw)
        if record is None:
            unreadable += 1
            continue
        if record.get("kind") != "segment":
            continue
        try:
            public = PublicKey.from_b64(str(record["body"]["public_key"]))
        except (KeyError, TypeError, ValueError):
            unreadable += 1
            continue
        _, count = seen.get(public.key_id, (public, 0))
        seen[public.key_id] = (public, count + 1)
    return seen, unreadable


def trust_anchors(trusted_keys: Sequence[Path], key_path: Path | None) -> dict[str, PublicKey] | None:
    """The keys `audit verify` trusts: those in `trusted_keys` files, else the key file's (current and retired),
    else None (genesis keys trusted on first use)."""
    if trusted_keys:
        anchors: dict[str, PublicKey] = {}
        for path in trusted_keys:
            try:
                anchors.update(read_public_keys(path))
            except OSError as exc:
                raise AuditError(f"cannot read trust file {path}: {exc.strerror or exc}") from None
        return anchors
    if key_path is not None and key_path.expanduser().exists():
        return load_key(key_path).trusted()
    return None


def _json_object(raw: bytes) -> dict[str, Any] | None:
    """A stored record or receipt as a dict; None when it is not a JSON object (verify says why)."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _print_record(out: TextIO, pos: int, raw: bytes, as_json: bool) -> bool:
    """One line per record; False (after a placeholder line) when the record cannot be read."""
    record = _json_object(raw)
    if record is None:
        if not as_json:
            out.write(f"?  #{pos}  not a well-formed record\n")
        return False
    if as_json:
        out.write(raw.decode(errors="replace") + "\n")
        return True
    body = record.get("body")
    body = body if isinstance(body, dict) else {}
    if record.get("kind") == "segment":
        line = f"segment start  key={record.get('key_id')} prev={body.get('prev_record') or 'genesis'}"
    else:
        line = (
            f"{body.get('event')} {body.get('phase')} {body.get('direction')}  "
            f"{body.get('decision')}/{body.get('status')}  {_target_part(body)}server={body.get('server')} "
            f"session={body.get('session_id')} call={body.get('call_id')}"
        )
        if body.get("drift"):
            line += "  DRIFT"
        if (why := decided_by(body)) is not None:
            line += f"  {why}"
    out.write(f"{body.get('time')}  {record.get('id')}  {line}\n")
    return True


def _target_part(body: Mapping[str, Any]) -> str:
    """`target=NAME ` for a record naming its tool, uri or prompt (records before `target` have none)."""
    target = body.get("target")
    return f"target={_printable(str(target))} " if target is not None else ""


#: At most this many reasons on one `tail` line (`audit show ID` has them all).
_TAIL_REASONS = 3


def decided_by(body: Mapping[str, Any]) -> str | None:
    """What `tail` says decided a decision record: the interceptors that denied it and why (`by NAME: reason
    at PATH`), the gateway's or upstream's error, or which interceptors changed an allowed payload."""
    entries = [e for e in body.get("interceptors") or () if isinstance(e, Mapping) and e.get("mode") != "audit"]
    if body.get("decision") != "allow":
        reasons: list[str] = []
        for entry in entries:
            name = entry.get("name")
            error = entry.get("error")
            if entry.get("valid") is False:
                messages = [m for m in entry.get("messages") or () if isinstance(m, Mapping)]
                reasons.extend(f"{name}: {_said(m)}" for m in messages)
                if not messages:
                    reasons.append(f"{name}: invalid ({entry.get('severity') or 'error'})")
            elif isinstance(error, Mapping) and not entry.get("fail_open"):
                reasons.append(f"{name}: {error.get('reason') or 'failed'}")
        error = body.get("error")
        if not reasons and isinstance(error, Mapping):
            reasons.append(" ".join(str(error[k]) for k in ("message", "reason") if error.get(k) is not None))
        if not reasons:
            return None
        more = f" (and {len(reasons) - _TAIL_REASONS} more)" if len(reasons) > _TAIL_REASONS else ""
        return _printable("by " + "; ".join(reasons[:_TAIL_REASONS]) + more)
    changed = [
        str(e.get("name")) for e in entries if e.get("type") == "mutation" and (e.get("modified") or e.get("diff"))
    ]
    return _printable("changed by " + ", ".join(changed)) if changed else None


def _said(message: Mapping[str, Any]) -> str:
    path = message.get("path")
    return f"{message.get('message')}" + (f" at {path}" if path else "")


def _printable(text: str) -> str:
    """`text` with control characters escaped: a record's strings must not drive the reader's terminal."""
    return "".join(char if char.isprintable() else f"\\x{ord(char):02x}" for char in text)


def _fail(err: TextIO, problem: object) -> int:
    err.write(f"error: {problem}\n")
    return EXIT_ERROR
