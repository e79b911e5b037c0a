"""The 2-minute soak in CI: `bench/soak.py --minutes 2` at c=16 with upstream crashes and hangs injected. It
must end by itself with every echo call answered (or failed by an injected fault), crashes and hangs both
met, the trail verified, and the gateway's memory not running away after warm-up (loosely: a noisy host); its
plot has a line of RSS and one of p99 with a point per sample."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.soak]
ROOT = Path(__file__).resolve().parents[2]


def test_a_two_minute_soak_with_crashes_and_hangs_serves_every_call_and_its_trail_verifies(tmp_path: Path) -> None:
    plot = tmp_path / "soak.svg"
    argv = [sys.executable, "bench/soak.py", "--minutes", "2", "--sample-s", "10", "--json", "--plot", str(plot)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=420, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(next(line for line in reversed(done.stdout.splitlines()) if line.startswith("{")))
    outcomes = report["outcomes"]
    assert outcomes["echo: ok"] > 500, outcomes
    assert any(key.startswith("crash: error") for key in outcomes), outcomes
    assert any(key.startswith("hang: error") for key in outcomes), outcomes
    assert report["audit_verify"].startswith("OK: "), report["audit_verify"]
    assert report["rss_end_mb"] < 1.5 * report["rss_after_warmup_mb"] + 20, report["rss_mb"]
    lines = ET.parse(plot).getroot().findall("{http://www.w3.org/2000/svg}polyline")
    assert [len(line.get("points", "").split()) for line in lines] == [
        len(report["rss_mb"]),
        sum(p99 is not None for p99 in report["p99_ms_by_period"]),
    ]
