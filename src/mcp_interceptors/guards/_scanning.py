"""Runs a text scanner over every string of a payload (through `_walk`): findings with their JSON paths,
or a redacted copy that shares every untouched subtree with the input.

Shared by `secrets`, `pii` and `exfiltration-guard`. Strings shorter than anything the scanner can find
are skipped, which spares the regexes most keys, method names and short labels.
"""

from __future__ import annotations

from bisect import bisect_right
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


#: Joins a payload's strings for one scan. No detector pattern crosses a newline next to a NUL, and every
#: boundary check treats these characters like the edge of the text, so findings are the same as per string.
SEPARATOR = "\n\x00\n"


@dataclass(frozen=True, slots=True)
class TextScanner:
    """A scanner with what the guard adds around it: a minimum length, allowlisted values, kinds in scope.

    `batchable` scanners get all of a payload's strings joined by `SEPARATOR` in one `scan` call: the
    fixed cost of a call (a dozen regex passes) dominates the short strings payloads are made of.
    Scanners running user-supplied patterns are not batchable (a pattern could span the separator).
    """

    scanner: Scanner
    min_length: int = 6
    allow: Collection[str] = ()
    kinds: Collection[str] | None = None  # None: every kind the scanner reports
    batchable: bool = True

    def findings(self, text: str) -> list[Finding]:
        if len(text) < self.min_length:
            return []
        found = self.scanner.scan(text)
        if found and (self.allow or self.kinds is not None):
            found = [f for f in found if self._keeps(f, text)]
        return found

    def findings_many(self, texts: Sequence[str]) -> list[list[Finding]]:
        """`[findings(t) for t in texts]`, from one scan of the texts joined when the scanner is batchable."""
        result: list[list[Finding]] = [[] for _ in texts]
        picked = [i for i, text in enumerate(texts) if len(text) >= self.min_length]
        if len(picked) < 2 or not self.batchable:
            for i in picked:
                result[i] = self.findings(texts[i])
            return result
        starts, offset = [], 0
        for i in picked:
            starts.append(offset)
            offset += len(texts[i]) + len(SEPARATOR)
        rescan: set[int] = set()
        for finding in self.scanner.scan(SEPARATOR.join(texts[i] for i in picked)):
            k = bisect_right(starts, finding.start) - 1
            text = texts[picked[k]]
            local = Finding(finding.kind, finding.start - starts[k], finding.end - starts[k])
            if local.end > len(text):  # cannot happen with our scanners; if it does, scan those strings alone
                rescan.update(range(k, bisect_right(starts, finding.end - 1)))
            elif self._keeps(local, text):
                result[picked[k]].append(local)
        for k in rescan:
            result[picked[k]] = self.findings(texts[picked[k]])
        return result

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
    strings = list(walk_strings(payload, include_keys=include_keys))
    found = scanner.findings_many([text for _, text in strings])
    for (path, text), findings in zip(strings, found, strict=True):
        for finding in findings:
            yield Hit(path, finding.kind, text[finding.start : finding.end])


def redact_payload(payload: Any, scanner: TextScanner, placeholder: str) -> tuple[Any, Counter[str], list[str]]:
    """`(new_payload, counts by kind, paths)`; the payload is returned as is when nothing was found."""
    counts: Counter[str] = Counter()
    strings = list(walk_strings(payload))
    replacements: dict[Path, str] = {}
    for (path, text), found in zip(strings, scanner.findings_many([text for _, text in strings]), strict=True):
        if found:
            counts.update(f.kind for f in found)
            replacements[path] = redact(text, found, lambda f: placeholder.replace("{kind}", f.kind))
    if not replacements:
        return payload, counts, []
    new, _ = replace_strings(payload, lambda path, _text: replacements.get(path))
    return new, counts, [format_path(path) for path in replacements]


def deny_result(hits: Sequence[Hit], what: str) -> ValidationResult:
    """A blocking result naming each hit's kind and path; values never appear in it."""
    messages = tuple(
        ValidationMessage(message=f"{what} found: {hit.kind}", severity="error", path=format_path(hit.path))
        for hit in hits[:_MAX_MESSAGES]
    )
    return ValidationResult(
        valid=False, severity="error", messages=messages, info={"kinds": dict(Counter(h.kind for h in hits))}
    )
