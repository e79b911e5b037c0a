"""What a detector reports: `Finding` spans, the merge that makes them non-overlapping, and `redact`.

Both scanners (`secrets`, `pii`) return merged findings, so redaction over them is always well-formed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Finding", "merge_findings", "redact"]


@dataclass(frozen=True, slots=True)
class Finding:
    """A detected item: its kind (e.g. `github_token`, `email`) and the `text[start:end]` it covers."""

    kind: str
    start: int
    end: int


def merge_findings(findings: Iterable[Finding], rank: Mapping[str, int] | None = None) -> list[Finding]:
    """Fuse overlapping findings into one span covering all of them, sorted by start.

    The fused span is named after its longest member; ties go to the lower `rank` (specific kinds
    before generic ones), then to the earliest. Covering the union, not picking a winner, means a
    redaction can never leave part of an overlapping item in clear text.
    """
    ranks = rank or {}
    ordered = sorted(findings, key=lambda f: (f.start, -(f.end - f.start), ranks.get(f.kind, 0)))
    merged: list[Finding] = []
    best: Finding | None = None
    merged_start, end = 0, -1
    for finding in ordered:
        if best is not None and finding.start < end:
            end = max(end, finding.end)
            if _beats(finding, best, ranks):
                best = finding
            continue
        if best is not None:
            merged.append(Finding(best.kind, merged_start, end))
        best, merged_start, end = finding, finding.start, finding.end
    if best is not None:
        merged.append(Finding(best.kind, merged_start, end))
    return merged


def _beats(challenger: Finding, holder: Finding, ranks: Mapping[str, int]) -> bool:
    c_len, h_len = challenger.end - challenger.start, holder.end - holder.start
    if c_len != h_len:
        return c_len > h_len
    return ranks.get(challenger.kind, 0) < ranks.get(holder.kind, 0)


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
