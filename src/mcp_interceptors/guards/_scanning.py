"""Runs a text scanner over every string of a payload (through `_walk`): findings with their JSON paths,
or a redacted copy that shares every untouched subtree with the input.

Shared by `secrets`, `pii` and `exfiltration-guard`. Strings shorter than anything the scanner can find
are skipped, which spares the regexes most keys, method names and short labels.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from mcp_interceptors.guards._detectors import Finding, redact
from mcp_interceptors.guards._walk import Path, format_path, replace_strings, walk_strings
from mcp_interceptors.protocol.results import ValidationMessage, ValidationResult

__all__ = [
    "CONTENT_EVENTS",
    "REDACTION_PRIORITY",
    "Hit",
    "Scanner",
    "TextScanner",
    "deny_result",
    "find_in_payload",
    "redact_payload",
]

#: Events whose payloads carry content (scanned in both phases by default).
CONTENT_EVENTS = ["tools/call", "prompts/get", "resources/read", "sampling/createMessage", "elicitation/create"]
#: Spec §6 "inverse pair": redact early on requests, late on responses.
REDACTION_PRIORITY = {"request": -50_000, "response": 50_000}
_MAX_MESSAGES = 20


class Scanner(Protocol):
    def scan(self, text: str) -> list[Finding]: ...


@dataclass(frozen=True, slots=True)
class TextScanner:
    """A scanner with what the guard adds around it: a minimum length, allowlisted values, kinds in scope."""

    scanner: Scanner
    min_length: int = 6
    allow: Collection[str] = ()
    kinds: Collection[str] | None = None  # None: every kind the scanner reports

    def findings(self, text: str) -> list[Finding]:
        if len(text) < self.min_length:
            return []
        found = self.scanner.scan(text)
        if found and (self.allow or self.kinds is not None):
            found = [f for f in found if self._keeps(f, text)]
        return found

    def _keeps(self, finding: Finding, text: str) -> bool:
        if self.kinds is not None and finding.kind not in self.kinds:
            return False
        return text[finding.start : finding.end] not in self.allow


@dataclass(frozen=True, slots=True)
class Hit:
    """One finding in a payload: where (path parts), what kind, and the matched value (never reported)."""

    path: Path
    kind: str
    value: str


def find_in_payload(payload: Any, scanner: TextScanner, *, include_keys: bool = False) -> Iterator[Hit]:
    for path, text in walk_strings(payload, include_keys=include_keys):
        for finding in scanner.findings(text):
            yield Hit(path, finding.kind, text[finding.start : finding.end])


def redact_payload(payload: Any, scanner: TextScanner, placeholder: str) -> tuple[Any, Counter[str], list[str]]:
    """`(new_payload, counts by kind, paths)`; the payload is returned as is when nothing was found."""
    counts: Counter[str] = Counter()
    paths: list[str] = []

    def replace(path: Path, text: str) -> str | None:
        found = scanner.findings(text)
        if not found:
            return None
        counts.update(f.kind for f in found)
        paths.append(format_path(path))
        return redact(text, found, lambda f: placeholder.replace("{kind}", f.kind))

    new, _ = replace_strings(payload, replace)
    return new, counts, paths


def deny_result(hits: Sequence[Hit], what: str) -> ValidationResult:
    """A blocking result naming each hit's kind and path; values never appear in it."""
    messages = tuple(
        ValidationMessage(message=f"{what} found: {hit.kind}", severity="error", path=format_path(hit.path))
        for hit in hits[:_MAX_MESSAGES]
    )
    return ValidationResult(
        valid=False, severity="error", messages=messages, info={"kinds": dict(Counter(h.kind for h in hits))}
    )
