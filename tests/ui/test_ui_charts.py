"""The charts' counting (pure): buckets over the window's time span, the largest series first, the rest as other."""

from __future__ import annotations

import orjson

from mcp_interceptors.ui.calls import CallView, record_view
from mcp_interceptors.ui.charts import guard_chart, guard_counts, upstream_chart


def call(pos: int, second: int, server: str | None, *entries: dict[str, object]) -> CallView:
    body = {"time": f"2026-12-01T09:00:{second:02d}.000000Z", "server": server, "phase": "request"}
    body |= {"decision": "allow", "call_id": f"c{pos}", "interceptors": list(entries)}
    raw = orjson.dumps({"kind": "decision", "id": f"s-{pos}", "body": body})
    return CallView(f"c{pos}", [record_view(pos, f"s-{pos}", raw)])


def test_calls_are_counted_per_upstream_in_time_buckets() -> None:
    calls = [call(1, 0, "a"), call(2, 0, "a"), call(3, 59, "b"), call(4, 30, None)]
    chart = upstream_chart(calls)
    assert [(s.name, s.total) for s in chart.series] == [("a", 2), ("(gateway)", 1), ("b", 1)]
    assert chart.peak == 2 and chart.calls == 4
    first = [point.split(",") for point in chart.series[0].points.split()]
    assert len(first) == 24 and float(first[0][1]) < float(first[1][1])  # two at the start, higher up
    assert chart.start.endswith("09:00:00 UTC") and chart.end.endswith("09:00:59 UTC")


def test_one_moment_and_no_calls_do_not_divide_by_zero() -> None:
    assert upstream_chart([call(1, 5, "a")]).series[0].total == 1
    empty = upstream_chart([])
    assert empty.series == () and empty.calls == 0


def test_beyond_six_series_the_rest_is_other_and_guards_count_what_they_did() -> None:
    calls = [call(i, i, f"s{i}") for i in range(9)]
    names = [s.name for s in upstream_chart(calls).series]
    assert len(names) == 7 and names[-1] == "other"
    blocked = {"name": "policy", "type": "validation", "valid": False}
    changed = {"name": "pii", "type": "mutation", "modified": True, "diff": [{"op": "remove", "path": "/a"}]}
    passed = {"name": "policy", "type": "validation", "valid": True}
    guarded = [call(1, 0, "a", blocked), call(2, 1, "a", changed, passed), call(3, 2, "a", passed)]
    assert [(s.name, s.total) for s in guard_chart(guarded).series] == [("pii", 1), ("policy", 1)]
    counts = {g.name: (g.blocked, g.changed, g.flagged, g.failed) for g in guard_counts(guarded)}
    assert counts == {"policy": (1, 0, 0, 0), "pii": (0, 1, 0, 0)}
