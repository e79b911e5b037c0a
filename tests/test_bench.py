"""`bench/chain_overhead.py --quick` still runs and prints every case (figures are not asserted: noisy host)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_chain_overhead_bench_runs() -> None:
    done = subprocess.run(
        [sys.executable, "bench/chain_overhead.py", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["case", "µs/call", "x", "direct"]
    assert len(lines) == 13
    assert sum("in-process chain" in line for line in lines) == 5
    assert sum("in-memory MCP host chain" in line for line in lines) == 5
    assert lines[-1].startswith("target: 5 in-process interceptors <= 20% of a direct call: ")
