"""The benches still run and print every case (figures are not asserted: noisy host)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_bench(*argv: str) -> list[str]:
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()


def test_chain_overhead_bench_runs() -> None:
    lines = run_bench("bench/chain_overhead.py", "--quick")
    assert lines[0].split() == ["case", "µs/call", "x", "direct"]
    assert len(lines) == 13
    assert sum("in-process chain" in line for line in lines) == 5
    assert sum("in-memory MCP host chain" in line for line in lines) == 5
    assert lines[-1].startswith("target: 5 in-process interceptors <= 20% of a direct call: ")


def test_audit_overhead_bench_runs_gateway_bound_and_verifies_what_it_wrote() -> None:
    lines = run_bench("bench/audit_overhead.py", "--calls", "40", "--repeats", "1", "--variants", "sqlite")
    assert any("lean driver (handshake era), raw echo upstream" in line for line in lines)
    assert sum(line.split()[:2] == ["8", "sqlite"] for line in lines) == 2  # progress, then the summary
    assert any(line.startswith("target SQLite audit costs <= 10 % throughput at c=8: ") for line in lines)
    assert lines[-1].startswith("audit verify (sqlite): OK: ")


def test_replica_scaling_bench_runs_every_case_behind_haproxy() -> None:
    """Starts redis-server, PostgreSQL and HAProxy itself (Debian packages), and five gateways."""
    lines = run_bench("bench/replica_scaling.py", "--quick")
    assert lines[1].split()[:3] == ["case", "calls/s", "x"]
    rows = [line for line in lines if line.split()[0] in ("1", "2", "3")]
    assert [" ".join(row.split()[:3]) for row in rows] == [
        "1 replica, memory",
        "1 replica, redis",
        "1 replica, redis+pg",
        "2 replicas, redis+pg",
        "3 replicas, redis+pg",
    ]
    assert rows[0].split()[4] == "1.00"
    assert lines[-3].startswith("Redis state adds ") and "target <= x1.15: " in lines[-3]
    assert lines[-1].startswith("on paper, a core per replica")


def test_tracing_overhead_bench_runs_every_variant_and_ends_with_both_targets() -> None:
    lines = run_bench("bench/tracing_overhead.py", "--calls", "40", "--repeats", "1")
    summary = lines[lines.index("") + 1 :]
    assert summary[0].startswith("40 calls per cell, median of 1 repeats, lean driver")
    rows = [line.split() for line in summary[2:] if line.startswith(("stdio ", "http "))]
    variants = {(row[0], row[1], f"{row[2]} {row[3]}") for row in rows}
    assert {("stdio", "1", "tracing off"), ("stdio", "1", "tracing on"), ("http", "8", "tracing on")} <= variants
    assert summary[-1].startswith("target HTTP c=8 tracing on costs <= 10 % throughput: ")


def test_tracing_work_bench_runs_and_prices_the_tracing_of_a_call() -> None:
    lines = run_bench("bench/tracing_work.py", "--quick")
    assert lines[0].startswith("100 calls a repeat, median of 2 interleaved repeats, five guards, 13 spans a call")
    assert lines[1].startswith("tracing off ") and " µs of CPU per call" in lines[1]
    assert lines[2].startswith("tracing work ")
