"""Pure, synchronous text scanners shared by the built-in guards; they know nothing about MCP.

`SecretScanner(...).scan(text)` and `PiiScanner(...).scan(text)` return merged, non-overlapping
`Finding(kind, start, end)` spans (str offsets); `redact(text, findings)` replaces them. Build a scanner
once per configuration and reuse it from any task or thread. Guards walk payloads with `guards._walk`:

    scanner = SecretScanner()
    hits = [(format_path(path), f) for path, text in walk_strings(payload) for f in scanner.scan(text)]
    clean, count = replace_strings(payload, lambda path, text: redact(text, scanner.scan(text)))
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
