"""The campaign loop that `fuzz_gateway.py` and `fuzz_guards.py` share: a budget of inputs and seconds per
target, hypothesis in batches of fresh random inputs or atheris steering by coverage, and one summary line
per target (`NAME ENGINE N inputs in S s  findings: K`, then the findings)."""

from __future__ import annotations

import os
import random
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

_BATCH = 200


class Campaign:
    """One target's budget (`runs` inputs at most, `seconds` at most when not 0), its count and findings."""

    def __init__(self, target: str, engine: str, runs: int, seconds: float, width: int = 11) -> None:
        self.target, self.engine, self.runs, self.seconds, self.width = target, engine, runs, seconds, width
        self.count = 0
        self.findings: list[str] = []
        self.started = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def spent(self) -> bool:
        return self.count >= self.runs or (bool(self.seconds) and self.elapsed() > self.seconds)

    def report(self) -> None:
        print(
            f"{self.target:{self.width}} {self.engine:10} {self.count:>9,} inputs in {self.elapsed():7.1f} s"
            f"  findings: {len(self.findings)}"
        )
        for finding in self.findings:
            print(f"    {finding}")
        sys.stdout.flush()


class _Spent(BaseException):
    """Raised in a hypothesis test once the budget is spent: hypothesis re-raises what is no `Exception` at once,
    so the run ends there instead of drawing the rest of its `max_examples`."""


def run_hypothesis(campaign: Campaign, test: Callable[..., None], **strategies: Any) -> None:
    """Run `test` on keyword arguments drawn from `strategies` until the budget is spent or an input fails
    (shrunk, then recorded as the finding, with the seed that finds it again). Each batch has a fresh seed."""
    from hypothesis import HealthCheck, given, seed, settings

    campaign.started = time.monotonic()  # set-up and imports are not the target's time
    failing = [False]

    def body(**kwargs: Any) -> None:
        if campaign.spent() and not failing[0]:  # a failing input is shrunk to the end, whatever the budget
            raise _Spent
        campaign.count += 1
        try:
            test(**kwargs)
        except Exception:
            failing[0] = True
            raise

    while not campaign.spent() and not campaign.findings:
        options = settings(
            max_examples=min(_BATCH, campaign.runs - campaign.count),
            deadline=None,
            database=None,
            derandomize=False,
            suppress_health_check=list(HealthCheck),
        )
        batch_seed = random.getrandbits(64)  # a seed of our own: hypothesis then prints none on a stop
        check = seed(batch_seed)(options(given(**strategies)(body)))
        try:
            check()
        except _Spent:
            break
        except Exception as error:
            campaign.findings.append(f"{type(error).__name__}: {str(error)[:600]} (seed {batch_seed})")


def run_atheris(campaign: Campaign, one_input: Callable[[bytes], None]) -> NoReturn:
    """Fuzz `one_input` with atheris in this process until the budget is spent, then report and exit (1 on a
    finding). libFuzzer never returns and would end the process at its own limits with no summary, so the
    budget is checked before each input. Instrument the modules before calling this."""
    import atheris

    campaign.started = time.monotonic()

    def checked(raw: bytes) -> None:
        if campaign.spent():
            campaign.report()
            os._exit(1 if campaign.findings else 0)
        campaign.count += 1
        try:
            one_input(raw)
        except Exception as error:  # recorded, and the campaign goes on
            if len(campaign.findings) < 10:
                campaign.findings.append(f"{type(error).__name__}: {str(error)[:300]} (input {raw[:256].hex()})")

    atheris.Setup([sys.argv[0], "-runs=-1", "-max_len=4096", "-rss_limit_mb=4096"], checked)
    atheris.Fuzz()
    raise SystemExit(1)  # not reached: atheris.Fuzz() does not return
