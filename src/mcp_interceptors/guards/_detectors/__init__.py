"""Pure, synchronous text scanners shared by the built-in guards; they know nothing about MCP.

`SecretScanner(...).scan(text)` and `PiiScanner(...).scan(text)` return merged, non-overlapping
`Finding(kind, start, end)` spans; `redact(text, findings)` replaces them. Build a scanner once and reuse
it: patterns compile at construction. Guards walk payloads with `guards._walk` and scan each string.
"""

from .findings import Finding, merge_findings, redact
from .pii import DEFAULT_PHONE_REGIONS, PII_KINDS, PiiScanner
from .presidio import PresidioPiiScanner, load_presidio_scanner
from .secrets import SECRET_KINDS, SecretScanner

__all__ = [
    "DEFAULT_PHONE_REGIONS",
    "PII_KINDS",
    "SECRET_KINDS",
    "Finding",
    "PiiScanner",
    "PresidioPiiScanner",
    "SecretScanner",
    "load_presidio_scanner",
    "merge_findings",
    "redact",
]
