"""Scores a scanner against the labelled corpus: per-kind recall over planted items, precision over findings.

A planted item is recalled when some finding of the same kind overlaps it. A finding is a true positive
when it overlaps a planted item of its kind; any other finding is a false positive (the corpus plants
every real item, so a finding on a clean look-alike or on filler counts against precision).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class KindScore:
    planted: int = 0
    recalled: int = 0
    found: int = 0
    correct: int = 0
    missed: list[str] = field(default_factory=list)
    spurious: list[str] = field(default_factory=list)

    @property
    def recall(self) -> float:
        return self.recalled / self.planted if self.planted else 1.0

    @property
    def precision(self) -> float:
        return self.correct / self.found if self.found else 1.0


def _overlaps(spans: Sequence[tuple[int, int]], starts: Sequence[int], start: int, end: int) -> bool:
    # spans are sorted and non-overlapping enough for a local check around the insertion point
    i = bisect.bisect_left(starts, end)
    for j in range(max(0, i - 8), min(len(spans), i + 1)):
        s, e = spans[j]
        if s < end and start < e:
            return True
    return False


def score(
    docs: Iterable[dict[str, Any]],
    scan: Callable[[str], Iterable[Any]],
    kinds: Sequence[str],
    *,
    keep_examples: int = 5,
) -> dict[str, KindScore]:
    """Run `scan(text)` (returning objects with kind/start/end) over `docs` and score each of `kinds`."""
    scores = {kind: KindScore() for kind in kinds}
    for doc in docs:
        text: str = doc["text"]
        findings = [f for f in scan(text) if f.kind in scores]
        for kind in kinds:
            labels = sorted((lab["start"], lab["end"]) for lab in doc["labels"] if lab["kind"] == kind)
            found = sorted((f.start, f.end) for f in findings if f.kind == kind)
            label_starts = [s for s, _ in labels]
            found_starts = [s for s, _ in found]
            entry = scores[kind]
            entry.planted += len(labels)
            entry.found += len(found)
            for s, e in labels:
                if _overlaps(found, found_starts, s, e):
                    entry.recalled += 1
                elif len(entry.missed) < keep_examples:
                    entry.missed.append(f"{doc['id']}: {text[max(0, s - 30) : e + 10]!r}")
            for s, e in found:
                if _overlaps(labels, label_starts, s, e):
                    entry.correct += 1
                elif len(entry.spurious) < keep_examples:
                    entry.spurious.append(f"{doc['id']}: {text[max(0, s - 30) : e + 10]!r}")
    return scores
