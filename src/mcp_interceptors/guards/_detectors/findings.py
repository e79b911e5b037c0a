"""What a detector reports: `Finding` spans, the merge that makes them non-overlapping, and `redact`.

Both scanners (`secrets`, `pii`) return merged findings, so redaction over them is always well-formed.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import accumulate
from typing import NamedTuple

__all__ = ["Finding", "ends_escape", "inside_any", "merge_findings", "merge_spans", "redact"]


class Finding(NamedTuple):
    """A detected item: its kind (e.g. `github_token`, `email`) and the `text[start:end]` it covers.

    A named tuple rather than a frozen dataclass: scanners make one per reported item, and a tuple is
    made several times faster."""

    kind: str
    start: int
    end: int


_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def ends_escape(text: str, index: int) -> bool:
    """True when the text before `index` ends in an escape (`%3D`, `\\n`, `\\t`, `\\u0020`, `\\x20`): the
    letter or digit before a candidate is then part of the escape, not of the candidate's word, so a
    token after `token%3D`, `Bearer%20` or an escaped newline is not glued to anything."""
    if index >= 3 and text[index - 3] == "%" and text[index - 2] in _HEX_DIGITS and text[index - 1] in _HEX_DIGITS:
        return True
    if index >= 2 and text[index - 2] == "\\" and text[index - 1] in "nrtbfv0":
        return True
    for width in (6, 4):  # \uXXXX, \xXX
        head = index - width
        if (
            head >= 0
            and text[head] == "\\"
            and text[head + 1] == "ux"[width == 4]
            and all(char in _HEX_DIGITS for char in text[head + 2 : index])
        ):
            return True
    return False


# `Finding(...)` runs the named tuple's `__new__`, a Python function; the merge makes one per finding.
_new_finding = tuple.__new__


def merge_findings(findings: Iterable[Finding], rank: Mapping[str, int] | None = None) -> list[Finding]:
    """Fuse overlapping findings into one span covering all of them, sorted by start.

    The fused span is named after its longest member; ties go to the lower `rank` (specific kinds
    before generic ones), then to the earliest, then to the kind name that sorts first. Covering the
    union, not picking a winner, means a redaction can never leave part of an overlapping item in clear
    text. Empty findings cover nothing and are dropped.
    """
    return merge_spans([(f.start, f.end, f.kind) for f in findings if f.end > f.start], rank)


def merge_spans(spans: Sequence[tuple[int, int, str]], rank: Mapping[str, int] | None = None) -> list[Finding]:
    """`merge_findings` over non-empty `(start, end, kind)` triples: scanners collect those, so only the
    merged findings become `Finding` objects."""
    ranks = rank or {}
    # Plain tuple order (start, end, kind) needs no key function; the loop below picks the longest member
    # whatever order spans of one start come in.
    ordered = sorted(spans) if len(spans) > 1 else spans
    merged: list[Finding] = []
    if not ordered:
        return merged
    rest = iter(ordered)
    merged_start, end, best_kind = next(rest)
    best_length = end - merged_start
    for start, stop, kind in rest:
        if start < end:  # overlaps the span being fused
            end = max(end, stop)
            length = stop - start
            if length > best_length or (length == best_length and ranks.get(kind, 0) < ranks.get(best_kind, 0)):
                best_kind, best_length = kind, length
            continue
        merged.append(_new_finding(Finding, (best_kind, merged_start, end)))
        merged_start, end, best_kind, best_length = start, stop, kind, stop - start
    merged.append(_new_finding(Finding, (best_kind, merged_start, end)))
    return merged


# Up to this many spans, `inside_any` compares a candidate with each span: a scan's findings before its
# phone or generic rules are a handful, and sorting them and taking running maxima costs more than the compares.
_FEW_SPANS = 16


def inside_any(spans: Sequence[tuple[int, int, str]]) -> Callable[[int, int], bool]:
    """A test of whether `start:end` lies inside one of `spans` (`(start, end, kind)` triples).

    What it is for: a span inside a finding changes nothing `merge_spans` returns when its kind ranks after
    every other (or is the finding's own kind), since the finding's fused span covers it and the finding is
    longer, or as long and ranked first. So a scanner need not check a candidate of its lowest-ranked kind
    that lies inside a finding it already has, when the check can only answer the candidate or part of it.
    """
    if not spans:
        return _nowhere
    if len(spans) <= _FEW_SPANS:
        snapshot = tuple(spans)

        def inside_few(start: int, end: int) -> bool:
            for span_start, span_end, _ in snapshot:  # noqa: SIM110 - any() over a generator is 2x slower here
                if span_start <= start and end <= span_end:
                    return True
            return False

        return inside_few
    starts, ends, _ = zip(*sorted(spans), strict=False)
    # The furthest end among the spans starting at or before each one: the span that could cover a later one.
    reach = list(accumulate(ends, max))

    def inside(start: int, end: int) -> bool:
        before = bisect_right(starts, start)
        return before > 0 and reach[before - 1] >= end

    return inside


def _nowhere(start: int, end: int) -> bool:
    return False


def _default_placeholder(finding: Finding) -> str:
    return f"[REDACTED:{finding.kind}]"


def redact(
    text: str,
    findings: Sequence[Finding],
    placeholder: Callable[[Finding], str] = _default_placeholder,
) -> str:
    """Return `text` with each finding's span replaced by `placeholder(finding)`.

    Findings are merged first, so overlapping or unsorted input still yields well-formed output.
    """
    if not findings:
        return text
    pieces: list[str] = []
    cursor = 0
    for finding in merge_findings(findings):
        pieces.append(text[cursor : finding.start])
        pieces.append(placeholder(finding))
        cursor = finding.end
    pieces.append(text[cursor:])
    return "".join(pieces)
