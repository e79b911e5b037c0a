"""Verification's findings: the problems it names, a finding, the report, and sequence gaps resolved into
`deleted` or `reordered` once every record is read."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum


class Problem(StrEnum):
    EDITED = "edited"  # content no longer matches its hash
    DELETED = "deleted"  # a sequence number, a linked record or a receipt is missing
    REORDERED = "reordered"  # a record is stored out of sequence, or appears twice
    FORGED = "forged"  # bad signature, unknown key, or a key change nobody endorsed
    BROKEN_LINK = "broken_link"  # validly signed but prev_hash does not match what it follows


@dataclass(frozen=True)
class Finding:
    record_id: str
    problem: Problem
    detail: str
    position: int

    def __str__(self) -> str:
        return f"{self.record_id}: {self.problem.value}: {self.detail}"


@dataclass(frozen=True)
class VerifyReport:
    records: int
    segments: int
    receipts: int
    findings: tuple[Finding, ...]
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.findings

    @property
    def first(self) -> Finding | None:
        return self.findings[0] if self.findings else None


@dataclass
class Gap:
    """Sequence numbers skipped before a record: deleted, unless they turn up later (reordered).

    `missing` holds half-open ranges, not numbers: a record can claim any `seq` (one of 10**12 is
    a gap of 10**12), and verification must report it, not run out of memory listing it."""

    position: int
    record_id: str
    missing: list[range]
    reordered: bool = False

    def take(self, seq: int) -> bool:
        """Remove `seq` from the gap if it is in it (a record stored late); True when it was."""
        for index, span in enumerate(self.missing):
            if seq in span:
                rest = [part for part in (range(span.start, seq), range(seq + 1, span.stop)) if part]
                self.missing[index : index + 1] = rest
                return True
        return False

    def describe(self) -> str:
        return ", ".join(str(s.start) if len(s) == 1 else f"{s.start}-{s.stop - 1}" for s in self.missing)


def resolve(findings: Iterable[tuple[int, Finding | Gap]]) -> tuple[Finding, ...]:
    """The findings in storage order, each gap named as what it turned out to be."""
    resolved: list[Finding] = []
    for position, item in sorted(findings, key=lambda pair: pair[0]):
        if isinstance(item, Finding):
            resolved.append(item)
        elif item.missing or not item.reordered:
            resolved.append(
                Finding(item.record_id, Problem.DELETED, f"seq {item.describe()} missing before it", position)
            )
        else:
            detail = "stored before records that precede it in its segment"
            resolved.append(Finding(item.record_id, Problem.REORDERED, detail, position))
    return tuple(resolved)
