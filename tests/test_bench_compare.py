"""`bench/compare.py` in its quickest form, on the cells that need nothing installed (direct and our
gateway, stdio and HTTP): it runs, prints a row per cell, and writes the CSV files. Figures are not
asserted (noisy host), and the peers (FastMCP, mcp-proxy) are left out so the test stays offline."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_compare_bench_runs_our_cells_and_writes_csv(tmp_path: Path) -> None:
    argv = [sys.executable, "bench/compare.py", str(tmp_path), "--quick", "--calls", "20", "--repeats", "1"]
    argv += ["--variants", "direct", "gateway", "--topologies", "stdio", "http", "--concurrency", "1", "4"]
    done = subprocess.run([*argv, "--no-inprocess"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    with (tmp_path / "compare.csv").open() as f:
        rows = list(csv.DictReader(f))
    cells = {(row["topology"], row["concurrency"], row["variant"]) for row in rows}
    assert cells == {(t, c, v) for t in ("stdio", "http") for c in ("1", "4") for v in ("direct", "gateway")}
    for row in rows:
        assert float(row["req_s"]) > 0 and float(row["p50_ms"]) > 0 and float(row["p99_ms"]) >= float(row["p50_ms"])
        if row["variant"] == "direct":
            assert row["throughput_x_direct"] == row["p50_x_direct"] == "1.000"
    with (tmp_path / "samples.csv").open() as f:
        assert len(list(csv.DictReader(f))) == len(rows)
    environment = (tmp_path / "environment.txt").read_text()
    assert "mcp 2." in environment and "client raw" in environment
    assert "stdio        1 gateway" in done.stdout
