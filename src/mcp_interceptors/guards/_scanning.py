"""Runs a text scanner over every string of a payload (through `_walk`): findings with their JSON paths,
or a redacted copy that shares every untouched subtree with the input.

Shared by `secrets`, `pii` and `exfiltration-guard`. Strings shorter than anything the scanner can find
are skipped, which spares the regexes most keys, method names and short labels. A string that hides what
it carries (percent-encoded, HTML entities, backslash escapes, invisible or look-alike characters, base64,
base64url or hex of text, see `_readings`) is also read undone: its findings carry the string's path, and
redaction puts the placeholder where the reading maps them (re-encoding a blob as it was written). With
`across_blocks`, consecutive text content blocks are also read joined around their seams, as a model reads
them: a value cut across two blocks is found (at the block where it starts) and redacted in each block it
spans.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate
from typing import Any, Protocol

from mcp_interceptors.guards._detectors import Finding
from mcp_interceptors.guards._readings import (
    Edit,
    Reading,
    apply_edits,
    edits_on_string,
    may_hide,
    readings_of,
    span_on_string,
)
from mcp_interceptors.guards._walk import (
    Path,
    PathMark,
    format_path,
    replace_strings,
    string_values,
    string_values_within,
    text_block_runs,
    walk_strings,
)
from mcp_interceptors.guards._whole_text import rules_out
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
#: Strings shorter than this hold no blob worth decoding (`_readings` decides the rest).
_MIN_BLOB = 16
#: The kind of a piece of a value cut across text blocks that is removed (the placeholder goes where it starts).
_ERASED = ""
#: How much text either side of a seam between two text blocks is read joined: a value cut across blocks is
#: found when neither side of the cut holds more than this of it (so any value up to 65 characters is).
_SEAM_REACH = 64


class Scanner(Protocol):
    def scan(self, text: str) -> list[Finding]: ...


#: Strings in a payload up to which they are read one by one: a few strings cost a joined scan no more
#: than the whole-text test (`_whole_text`) does, unless they hold `_LONG_TEXT` characters or more: then
#: the test's one pass, shared by the scanners of a chain run, costs less than each scanner's own scan.
_FEW_STRINGS = 8
_LONG_TEXT = 2048
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


#: What a string was found to carry: per reading (None: the string as sent), the findings in it.
_Found = list[tuple[Reading | None, list[Finding]]]


def _findings_of(scanner: TextScanner, texts: list[str]) -> dict[int, _Found]:
    """`{i: found}` for the strings with findings: read as sent (all of them in one joined scan), and
    through each of their readings (escapes and blobs undone, see `_readings`; those in one more scan)."""
    by_index = scanner.findings_by_index(texts)
    found: dict[int, _Found] = {index: [(None, findings)] for index, findings in by_index.items()}
    minimum = scanner.min_length
    hide = may_hide(texts[0] if len(texts) == 1 else SEPARATOR.join(texts))
    readings: list[tuple[int, Reading]] = []
    for index, text in enumerate(texts):
        # Cheap tests first: most strings are short, or prose without anything encoded in it.
        if len(text) < minimum:
            continue
        undo = hide and may_hide(text)
        if not undo and (len(text) < _MIN_BLOB or " " in text):
            continue
        if len(text) <= _REMEMBERED_CHARS and type(text) is str:
            readings.extend((index, reading) for reading in _remembered_readings(text, undo))
        else:
            readings.extend((index, reading) for reading in readings_of(text, in_place=undo))
    if readings:
        for (index, reading), findings in zip(
            readings, scanner.findings_many([reading.text for _, reading in readings]), strict=True
        ):
            if findings:
                found.setdefault(index, []).append((reading, findings))
    return found


#: Strings up to this long have their readings remembered (the last `_REMEMBERED` of them): a 2026-07-28
#: request's `_meta` envelope (`clientInfo`...) comes again on every call, and secrets and pii read each
#: payload. Readings are frozen values of the text alone, so a remembered one is the one it would build
#: (a `str` subclass could answer differently: it is read afresh).
_REMEMBERED_CHARS = 128
_REMEMBERED = 1024


@lru_cache(maxsize=_REMEMBERED)
def _remembered_readings(text: str, in_place: bool) -> tuple[Reading, ...]:
    return tuple(readings_of(text, in_place=in_place))


def _values(found: _Found, text: str) -> Iterator[tuple[Finding, str]]:
    """Each finding in string `text` with the value it covers, once per place in the string (a reading may
    find again what the string as sent showed, at the same place)."""
    seen: set[tuple[str, tuple[int, int, tuple[tuple[int, int], ...]]]] = set()
    for reading, findings in found:
        read = reading.text if reading is not None else text
        for finding in findings:
            key = (finding.kind, span_on_string(reading, finding.start, finding.end))
            if key not in seen:
                seen.add(key)
                yield finding, read[finding.start : finding.end]


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


def _nothing_to_find(payload: Any, scanner: TextScanner, include_keys: bool) -> bool:
    """True when `scanner` finds nothing in any string of `payload`, read as sent or through any reading
    (`_whole_text.rules_out`); False means "read the strings"."""
    if not scanner.batchable or scanner.across_blocks:
        return False
    return rules_out(payload, scanner.scanner, keys=include_keys, integers=scanner.integers)


def _strings_to_scan(payload: Any, scanner: TextScanner, include_keys: bool) -> list[str] | None:
    """The strings of `payload` the scan reads (`string_values`), or None when the whole-text test rules
    the payload out: a payload of a few short strings is read without it."""
    integers = scanner.integers
    few = None
    if not include_keys:
        few = string_values_within(payload, _FEW_STRINGS, include_integers=integers)
        if few is not None and sum(map(len, few)) < _LONG_TEXT:
            return few
    if _nothing_to_find(payload, scanner, include_keys):
        return None
    return few if few is not None else string_values(payload, include_keys=include_keys, include_integers=integers)


def find_in_payload(payload: Any, scanner: TextScanner, *, include_keys: bool = False) -> Iterator[Hit]:
    texts = _strings_to_scan(payload, scanner, include_keys)
    if texts is None:
        return
    integers = scanner.integers
    found = _findings_of(scanner, texts)
    if found:
        for index, (path, _) in enumerate(walk_strings(payload, include_keys=include_keys, include_integers=integers)):
            if index in found:
                for finding, value in _values(found[index], texts[index]):
                    yield Hit(path, finding.kind, value)
    for crossing in _crossings(scanner, payload, texts):
        yield Hit(crossing.pieces[0][0], crossing.kind, crossing.value)


def redact_payload(payload: Any, scanner: TextScanner, placeholder: str) -> tuple[Any, dict[str, int], list[str]]:
    """`(new_payload, counts by kind, paths)`; the payload is returned as is when nothing was found.

    Strings are read without their paths; the paths of the strings with findings come from a second
    walk, which only a payload that needs redacting pays for. A finding in a reading is redacted in the
    string where the reading maps it (a blob is written again, encoded as it was, around its placeholder).
    """
    texts = _strings_to_scan(payload, scanner, False)
    if texts is None:
        return payload, {}, []
    integers = scanner.integers
    found = _findings_of(scanner, texts)
    crossings = _crossings(scanner, payload, texts) if scanner.across_blocks else ()
    if not found and not crossings:
        return payload, {}, []
    counts: Counter[str] = Counter()

    def fill(kind: str) -> str:
        return "" if kind == _ERASED else placeholder.replace("{kind}", kind)

    # path: (the string as sent, edits on it)
    entries: dict[Path, tuple[str, list[Edit]]] = {}
    if found:
        for index, (path, _) in enumerate(walk_strings(payload, include_integers=integers)):
            if index in found:
                counts.update(finding.kind for finding, _ in _values(found[index], texts[index]))
                groups: list[tuple[Reading | None, list[Edit]]] = [
                    (reading, [(f.start, f.end, f.kind, None) for f in findings]) for reading, findings in found[index]
                ]
                entries[path] = (texts[index], edits_on_string(groups, fill))
    # A value cut across text blocks: the placeholder where it starts, the rest of it removed.
    for crossing in crossings:
        counts[crossing.kind] += 1
        for k, (path, text, start, end) in enumerate(crossing.pieces):
            entries.setdefault(path, (text, []))[1].append((start, end, crossing.kind if k == 0 else _ERASED, None))
    replacements = {path: apply_edits(text, edits, fill) for path, (text, edits) in entries.items()}
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
