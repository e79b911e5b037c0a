"""The campaign loop `bench/fuzz_gateway.py` and `bench/fuzz_guards.py` share (`bench/fuzz_campaign.py`): it
stops at its budget of inputs or seconds, and records a failing input as one finding with its seed."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import fuzz_campaign


def test_a_hypothesis_campaign_runs_exactly_its_budget_of_inputs() -> None:
    seen: list[int] = []
    campaign = fuzz_campaign.Campaign("count", "hypothesis", runs=450, seconds=0)
    fuzz_campaign.run_hypothesis(campaign, lambda value: seen.append(value), value=st.integers())
    assert campaign.count == len(seen) == 450 and not campaign.findings


def test_a_hypothesis_campaign_stops_drawing_when_its_seconds_are_spent() -> None:
    campaign = fuzz_campaign.Campaign("slow", "hypothesis", runs=10**9, seconds=0.5)
    started = time.monotonic()
    fuzz_campaign.run_hypothesis(campaign, lambda value: time.sleep(0.01), value=st.integers())
    assert time.monotonic() - started < 5 and 0 < campaign.count < 100 and not campaign.findings


def test_a_failing_input_is_one_finding_with_the_seed_that_finds_it_again(capsys: object) -> None:
    def target(value: int) -> None:
        assert value < 1000, f"too big: {value}"

    campaign = fuzz_campaign.Campaign("big", "hypothesis", runs=10**6, seconds=30)
    fuzz_campaign.run_hypothesis(campaign, target, value=st.integers())
    (finding,) = campaign.findings
    assert finding.startswith("AssertionError: too big: 1000") and "(seed " in finding, finding
    campaign.report()
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert out.startswith("big         hypothesis ") and "findings: 1\n    AssertionError: too big" in out, out
