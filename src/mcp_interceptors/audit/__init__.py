"""The audit trail: signed, hash-chained records of every interceptor chain, their storage and checks.

The gateway builds a `DecisionInput` per chain and awaits `AuditWriter.append`; `verify_source` and the
functions in `commands` read a store back.
"""

from mcp_interceptors.audit._diff import apply_json_diff, json_diff
from mcp_interceptors.audit.records import AuditError, CallEnd, CompoundReceipt, DecisionInput, payload_hash
from mcp_interceptors.audit.segment import AuditReceipt
from mcp_interceptors.audit.signing import (
    DEFAULT_KEY_PATH,
    KeyFileError,
    PublicKey,
    SigningKey,
    load_key,
    load_or_create_key,
    read_public_keys,
    rotate_key,
)
from mcp_interceptors.audit.sqlite import SqliteStore
from mcp_interceptors.audit.store import JsonlSource, RecordSource, Store, StoreError
from mcp_interceptors.audit.targets import open_source, open_store
from mcp_interceptors.audit.verify import Finding, Problem, VerifyReport, verify_records, verify_source
from mcp_interceptors.audit.writer import (
    AuditWriteError,
    AuditWriter,
    PendingRecord,
    RecordWriter,
    WriterStats,
    open_audit_writer,
)
from mcp_interceptors.canonical import CanonicalizationError, canonical_json

__all__ = [
    "DEFAULT_KEY_PATH",
    "AuditError",
    "AuditReceipt",
    "AuditWriteError",
    "AuditWriter",
    "CallEnd",
    "CanonicalizationError",
    "CompoundReceipt",
    "DecisionInput",
    "Finding",
    "JsonlSource",
    "KeyFileError",
    "PendingRecord",
    "Problem",
    "PublicKey",
    "RecordSource",
    "RecordWriter",
    "SigningKey",
    "SqliteStore",
    "Store",
    "StoreError",
    "VerifyReport",
    "WriterStats",
    "apply_json_diff",
    "canonical_json",
    "json_diff",
    "load_key",
    "load_or_create_key",
    "open_audit_writer",
    "open_source",
    "open_store",
    "payload_hash",
    "read_public_keys",
    "rotate_key",
    "verify_records",
    "verify_source",
]
