"""Runs a text scanner over every string of a payload (through `_walk`): findings with their JSON paths,
or a redacted copy that shares every untouched subtree with the input.

Shared by `secrets`, `pii` and `exfiltration-guard`. Strings shorter than anything the scanner can find
are skipped, which spares the regexes most keys, method names and short labels. A string that is wholly
base64 of UTF-8 text (a resource's `blob`, an encoded file in a result, on one line or wrapped in lines) is
also read decoded: its findings carry the string's path, and redaction re-encodes the redacted text as the
original was laid out. With `across_blocks`, consecutive text content blocks are also read joined around
their seams, as a model reads them: a value cut across two blocks is found (at the block where it starts)
and redacted in each block it spans.
"""

from __future__ import annotations

import base64
import binascii
import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Protocol

from mcp_interceptors.guards._detectors import Finding, redact
from mcp_interceptors.guards._walk import (
    Path,
    PathMark,
    format_path,
    replace_strings,
    string_values,
    text_block_runs,
    walk_strings,
)
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
#: Wholly base64 (padded, as MCP's `blob` and every encoder writes it), long enough to hold a finding.
_BASE64_TEXT = re.compile(r"[A-Za-z0-9+/]+={0,2}")
#: The same wrapped in lines (76 wide from MIME and the `base64` tool, 64 in PEM), ended by `\n` or `\r\n`.
_BASE64_LINES = re.compile(r"(?:[A-Za-z0-9+/]+\r?\n)+[A-Za-z0-9+/]*={0,2}(?:\r?\n)?")
_MIN_BASE64_LENGTH = 16
#: The kind of a piece of a value cut across text blocks that is removed (the placeholder goes where it starts).
_ERASED = ""
#: How much text either side of a seam between two text blocks is read joined: a value cut across blocks is
#: found when neither side of the cut holds more than this of it (so any value up to 65 characters is).
_SEAM_REACH = 64


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
    #: Read integer values too, as their digits (a card number in a JSON number); redaction makes them strings.
    integers: bool = False
    #: Read consecutive text content blocks joined around their seams too (`scan_across_blocks`).
    across_blocks: bool = False

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
        for index, found in self.findings_by_index(texts).items():
            result[index] = found
        return result

    def findings_by_index(self, texts: Sequence[str]) -> dict[int, list[Finding]]:
        """`{i: findings(texts[i])}` for the texts with findings, from one scan of the long enough texts
        joined; their indices and offsets are only worked out when the joined scan found something."""
        if not self.batchable:
            return {i: found for i, text in enumerate(texts) if (found := self.findings(text))}
        minimum = self.min_length
        # A loop, not two comprehensions: each of those costs a function call, more than the loop does.
        picked: list[int] = []
        picked_texts: list[str] = []
        for i, text in enumerate(texts):
            if len(text) >= minimum:
                picked.append(i)
                picked_texts.append(text)
        if len(picked) < 2:  # one string or none: nothing to join
            if not picked or not (found := self.findings(picked_texts[0])):
                return {}
            return {picked[0]: found}
        found_all = self.scanner.scan(SEPARATOR.join(picked_texts))
        if not found_all:
            return {}
        starts = list(accumulate((len(text) + len(SEPARATOR) for text in picked_texts[:-1]), initial=0))
        result: dict[int, list[Finding]] = {}
        rescan: set[int] = set()
        for finding in found_all:
            k = bisect_right(starts, finding.start) - 1
            text = picked_texts[k]
            local = Finding(finding.kind, finding.start - starts[k], finding.end - starts[k])
            if local.end > len(text):  # cannot happen with our scanners; if it does, scan those strings alone
                rescan.update(range(k, bisect_right(starts, finding.end - 1)))
            elif self._keeps(local, text):
                result.setdefault(picked[k], []).append(local)
        for k in rescan:
            result.pop(picked[k], None)
            if found := self.findings(picked_texts[k]):
                result[picked[k]] = found
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


def decoded_base64(text: str) -> str | None:
    """`text` decoded, when it is wholly base64 of UTF-8 text, on one line or wrapped in lines (as MIME and
    the `base64` tool write it); else None (binary data, or not base64)."""
    if len(text) < _MIN_BASE64_LENGTH or " " in text:  # no space in either layout: prose is spared the regex
        return None
    if len(text) % 4 or not _BASE64_TEXT.fullmatch(text):
        if "\n" not in text or not _BASE64_LINES.fullmatch(text):
            return None
        text = text.replace("\r", "").replace("\n", "")
        if len(text) % 4:
            return None
    try:
        return base64.b64decode(text, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def encoded_like(original: str, text: str) -> str:
    """`text` base64-encoded as `original` was: on one line, or in lines as wide as its first, with its
    line ending (and its final line break, if it had one)."""
    encoded = base64.b64encode(text.encode()).decode("ascii")
    first_break = original.find("\n")
    if first_break < 0:
        return encoded
    crlf = original[first_break - 1 : first_break] == "\r"
    width = first_break - crlf
    newline = "\r\n" if crlf else "\n"
    wrapped = newline.join(encoded[i : i + width] for i in range(0, len(encoded), width))
    return wrapped + newline if original.endswith("\n") else wrapped


def _findings_of(scanner: TextScanner, texts: list[str]) -> dict[int, tuple[str, list[Finding], bool]]:
    """`{i: (text read, findings, decoded?)}` for the strings with findings, read as they are or, failing
    that, base64-decoded."""
    by_index = scanner.findings_by_index(texts)
    found = {index: (texts[index], findings, False) for index, findings in by_index.items()} if by_index else {}
    for index, text in enumerate(texts):
        # The length test spares most strings (keys, names, short values) the call.
        if len(text) < _MIN_BASE64_LENGTH or index in found:
            continue
        decoded = decoded_base64(text)
        if decoded is not None and (findings := scanner.findings(decoded)):
            found[index] = (decoded, findings, True)
    return found


@dataclass(frozen=True, slots=True)
class _Crossing:
    """A finding in a run of text blocks read joined that no single block holds: its kind, the value, and
    `(path, block text, start, end)` of the piece in each block it spans."""

    kind: str
    value: str
    pieces: list[tuple[Path, str, int, int]]


def _crossings(scanner: TextScanner, payload: Any, texts: list[str]) -> list[_Crossing]:
    """The findings that span two or more consecutive text content blocks of `payload`.

    Only the text around each seam is read joined (`_SEAM_REACH` either side, overlapping reaches merged,
    every window in one batched scan), so the blocks are not scanned twice. A crossing finding that touches
    its window's inner edge may be cut short there: its run is then read joined whole.
    """
    if not scanner.across_blocks or texts.count("text") < 2:  # `text`: each text block's `type`
        return []
    runs: list[tuple[list[tuple[Path, str]], list[int], str]] = []  # blocks, where each starts, joined text
    windows: list[tuple[int, int, int]] = []  # (run, start, end) in the run's joined text
    for number, run in enumerate(text_block_runs(payload)):
        starts = list(accumulate((len(text) for _, text in run[:-1]), initial=0))
        joined = "".join(text for _, text in run)
        runs.append((run, starts, joined))
        spans: list[list[int]] = []
        for seam in starts[1:]:
            low, high = max(0, seam - _SEAM_REACH), min(len(joined), seam + _SEAM_REACH)
            if spans and low <= spans[-1][1]:
                spans[-1][1] = high
            else:
                spans.append([low, high])
        windows.extend((number, low, high) for low, high in spans)
    found = scanner.findings_many([runs[number][2][low:high] for number, low, high in windows])
    crossing: dict[int, list[Finding]] = {}
    whole: set[int] = set()
    for (number, low, high), findings in zip(windows, found, strict=True):
        _, starts, joined = runs[number]
        for finding in findings:
            if _blocks_spanned(starts, finding.start + low, finding.end + low) == 1:
                continue  # inside one block: found there (cut short by the window, perhaps, but no crossing)
            if (finding.start == 0 and low > 0) or (finding.end == high - low and high < len(joined)):
                whole.add(number)
            crossing.setdefault(number, []).append(Finding(finding.kind, finding.start + low, finding.end + low))
    for number in whole:
        starts, joined = runs[number][1], runs[number][2]
        crossing[number] = [f for f in scanner.findings(joined) if _blocks_spanned(starts, f.start, f.end) > 1]
    out: list[_Crossing] = []
    for number, findings in crossing.items():
        run, starts, joined = runs[number]
        for finding in findings:
            first = bisect_right(starts, finding.start) - 1
            last = bisect_right(starts, finding.end - 1) - 1
            pieces = [
                (path, text, max(finding.start - starts[k], 0), min(finding.end - starts[k], len(text)))
                for k, (path, text) in enumerate(run[first : last + 1], start=first)
                if text
            ]
            out.append(_Crossing(finding.kind, joined[finding.start : finding.end], pieces))
    return out


def _blocks_spanned(starts: list[int], start: int, end: int) -> int:
    """How many of the blocks starting at `starts` the span `start:end` of their joined text touches."""
    return bisect_right(starts, end - 1) - bisect_right(starts, start) + 1


def find_in_payload(payload: Any, scanner: TextScanner, *, include_keys: bool = False) -> Iterator[Hit]:
    integers = scanner.integers
    texts = string_values(payload, include_keys=include_keys, include_integers=integers)
    found = _findings_of(scanner, texts)
    if found:
        for index, (path, _) in enumerate(walk_strings(payload, include_keys=include_keys, include_integers=integers)):
            if index in found:
                text, findings, _ = found[index]
                for finding in findings:
                    yield Hit(path, finding.kind, text[finding.start : finding.end])
    for crossing in _crossings(scanner, payload, texts):
        yield Hit(crossing.pieces[0][0], crossing.kind, crossing.value)


def redact_payload(payload: Any, scanner: TextScanner, placeholder: str) -> tuple[Any, dict[str, int], list[str]]:
    """`(new_payload, counts by kind, paths)`; the payload is returned as is when nothing was found.

    Strings are read without their paths; the paths of the strings with findings come from a second
    walk, which only a payload that needs redacting pays for.
    """
    integers = scanner.integers
    texts = string_values(payload, include_integers=integers)
    found = _findings_of(scanner, texts)
    crossings = _crossings(scanner, payload, texts) if scanner.across_blocks else ()
    if not found and not crossings:
        return payload, {}, []
    counts: Counter[str] = Counter()

    def fill(finding: Finding) -> str:
        return "" if finding.kind == _ERASED else placeholder.replace("{kind}", finding.kind)

    # path: (the string as sent, the text read, findings in it, read base64-decoded?)
    entries: dict[Path, tuple[str, str, list[Finding], bool]] = {}
    if found:
        for index, (path, _) in enumerate(walk_strings(payload, include_integers=integers)):
            if index in found:
                text, findings, decoded = found[index]
                counts.update(f.kind for f in findings)
                entries[path] = (texts[index], text, list(findings), decoded)
    # A value cut across text blocks: the placeholder where it starts, the rest of it removed.
    for crossing in crossings:
        counts[crossing.kind] += 1
        for k, (path, text, start, end) in enumerate(crossing.pieces):
            entry = entries.setdefault(path, (text, text, [], False))
            if not entry[3]:
                entry[2].append(Finding(crossing.kind if k == 0 else _ERASED, start, end))
    replacements: dict[Path, str] = {}
    for path, (original, text, findings, decoded) in entries.items():
        redacted = redact(text, findings, fill)
        replacements[path] = encoded_like(original, redacted) if decoded else redacted
    new, _ = replace_strings(payload, lambda path, _text: replacements.get(path), include_integers=integers)
    return new, counts, [format_path(path) for path in replacements]


def deny_result(hits: Sequence[Hit], what: str) -> ValidationResult:
    """A blocking result naming each hit's kind and path; values never appear in it."""
    # A key that is itself a finding is shown as a placeholder wherever a path passes through it.
    hidden = {hit.path[:-1]: f"[REDACTED:{hit.kind}]" for hit in hits if hit.path and hit.path[-1] is PathMark.KEY}
    messages = tuple(
        ValidationMessage(message=f"{what} found: {hit.kind}", severity="error", path=format_path(hit.path, hidden))
        for hit in hits[:_MAX_MESSAGES]
    )
    return ValidationResult(
        valid=False, severity="error", messages=messages, info={"kinds": dict(Counter(h.kind for h in hits))}
    )
