"""Pure: counts of calls per upstream and of guard actions per guard over time, as inline-SVG geometry.

The charts cover a window of recent records (`pages.chart_calls`), cut into equal time buckets; the
template draws one polyline per series from the points computed here. No JavaScript library is involved.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from mcp_interceptors.ui.calls import CallView

WIDTH: Final = 460
HEIGHT: Final = 120
_PAD: Final = 6
_BUCKETS: Final = 24
_MAX_SERIES: Final = 6
#: Series colours, in order (the last for "other"); distinguishable for the common colour blindnesses.
_COLOURS: Final = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#7f7f7f")


@dataclass(frozen=True)
class Series:
    name: str
    total: int
    colour: str
    points: str  # "x,y x,y ..." for an SVG polyline


@dataclass(frozen=True)
class Chart:
    title: str
    series: tuple[Series, ...]
    start: str
    end: str
    peak: int
    calls: int
    width: int = WIDTH
    height: int = HEIGHT


@dataclass(frozen=True)
class GuardCount:
    name: str
    blocked: int
    changed: int
    flagged: int
    failed: int


def upstream_chart(calls: Sequence[CallView]) -> Chart:
    return _chart("Calls by upstream", calls, lambda call: [call.server or "(gateway)"])


def guard_chart(calls: Sequence[CallView]) -> Chart:
    def acted(call: CallView) -> list[str]:
        return list(dict.fromkeys(e.name for r in call.records for e in r.entries if e.acted))

    return _chart("Guard actions (blocked, changed, flagged, failed)", calls, acted)


def guard_counts(calls: Iterable[CallView]) -> list[GuardCount]:
    counts: dict[str, Counter[str]] = {}
    for call in calls:
        for record in call.records:
            for entry in record.entries:
                tally = counts.setdefault(entry.name, Counter())
                outcome = entry.outcome
                if outcome.startswith("failed"):
                    tally["failed"] += 1
                elif outcome in ("changed", "would change"):
                    tally["changed"] += 1
                elif outcome in ("blocked", "flagged"):
                    tally[outcome] += 1
    return [
        GuardCount(name, tally["blocked"], tally["changed"], tally["flagged"], tally["failed"])
        for name, tally in sorted(counts.items())
    ]


def _chart(title: str, calls: Sequence[CallView], keys: Callable[[CallView], list[str]]) -> Chart:
    timed = [(moment, call) for call in calls if (moment := _time(call.time)) is not None]
    if not timed:
        return Chart(title, (), "", "", 0, 0)
    first = min(moment for moment, _ in timed)
    last = max(moment for moment, _ in timed)
    span = (last - first).total_seconds()
    buckets: dict[str, list[int]] = {}
    for moment, call in timed:
        index = 0 if span == 0 else min(_BUCKETS - 1, int((moment - first).total_seconds() / span * _BUCKETS))
        for name in keys(call):
            buckets.setdefault(name, [0] * _BUCKETS)[index] += 1
    ranked = sorted(buckets, key=lambda name: (-sum(buckets[name]), name))
    shown = {name: buckets[name] for name in ranked[:_MAX_SERIES]}
    if len(ranked) > _MAX_SERIES:
        shown["other"] = [sum(buckets[name][i] for name in ranked[_MAX_SERIES:]) for i in range(_BUCKETS)]
    peak = max((max(counts) for counts in shown.values()), default=0)
    series = tuple(
        Series(name, sum(counts), _COLOURS[min(i, len(_COLOURS) - 1)], _points(counts, peak))
        for i, (name, counts) in enumerate(shown.items())
    )
    return Chart(title, series, _label(first), _label(last), peak, len(timed))


def _points(counts: Sequence[int], peak: int) -> str:
    step = (WIDTH - 2 * _PAD) / (len(counts) - 1)
    scale = (HEIGHT - 2 * _PAD) / peak if peak else 0
    return " ".join(f"{_PAD + i * step:.1f},{HEIGHT - _PAD - count * scale:.1f}" for i, count in enumerate(counts))


def _time(value: str) -> datetime | None:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _label(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
