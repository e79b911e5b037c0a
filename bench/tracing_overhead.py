"""Tracing overhead: gateway `tools/call` p50/p99 and throughput before tracing existed, with tracing off, on.

python bench/tracing_overhead.py                     # full run (a few minutes on 2 cores)
python bench/tracing_overhead.py --quick             # fewer calls and repeats, for a smoke test
python bench/tracing_overhead.py --baseline-rev REV  # the gateway before tracing (default: cf8e662^)
python bench/tracing_overhead.py --compare-rev REV --variants "tracing off" "tracing on" --transports http
                                                     # also REV's `tracing off` and `tracing on`, side by side

Three real CLI gateways per transport, each with the five built-in guards (so a call makes up to fourteen spans:
the call's, two chains', five guards' and the upstream request's): `before tracing`, the gateway's source
at `--baseline-rev` (extracted with `git archive`, run from it with PYTHONPATH); `tracing off` (no
`telemetry:` and no `OTEL_*` variable); `tracing on` (`telemetry: {exporter: none}`: every span is built,
queued and batched by the SDK's BatchSpanProcessor, then dropped, as an in-memory exporter would keep it).
`--compare-rev REV` adds
`off @REV` and `on @REV`: the same two from REV's source (`git archive`, as the baseline), to measure a change.
Cells: stdio with one call in flight and Streamable HTTP with 8. As in `audit_overhead.py`, the client is
the lean JSON-RPC driver of `compare.py` (`jsonrpc_load.py`, handshake era) and the upstream
`peers/raw_echo.py` (stdio), so the gateway is what bounds the rate. Every call has distinct arguments,
sessions are warmed, repeats are interleaved across variants, each cell is the median over repeats, and
ratios are to the other variants of the same run. `cpu µs` is the gateway process's own CPU time (utime +
stime of all its threads, from /proc/PID/stat) per call, read around each repeat: steadier than a rate on a
shared machine; `cpu x off` is the median of the per-repeat ratios to `tracing off` (or to `off @REV`).
Targets (issue 28): stdio c=1 tracing off within noise of before tracing; HTTP c=8 tracing on costs
<= 10 % throughput against tracing off.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path
from typing import Any

import anyio
import jsonrpc_load as lean
from gateway_overhead import GATEWAY_OPTIONS, Cell, free_port, gateway_argv, http_process
from profile_layers import cpu_seconds

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent
RAW_ECHO = HERE.parent / "peers" / "raw_echo.py"
GUARDS = ["secrets", "pii", "tool-policy", "schema-guard", "size-limit"]
VARIANTS = ("before tracing", "tracing off", "tracing on")
#: The parent of the commit that added tracing to the gateway.
BASELINE_REV = "cf8e662^"
TARGET_TRACING_ON_COST = 0.10


def write_configs(folder: Path) -> dict[str, Path]:
    base: dict[str, Any] = {
        "upstreams": {"echo": {"command": sys.executable, "args": [str(RAW_ECHO)]}},
        "interceptors": {"guards": [{"name": guard} for guard in GUARDS]},
    }
    on = {**base, "telemetry": {"exporter": "none"}}
    configs = {"before tracing": base, "tracing off": base, "tracing on": on, "off @rev": base, "on @rev": on}
    paths = {}
    for variant, config in configs.items():
        path = folder / (variant.replace(" ", "-") + ".yaml")
        path.write_text(json.dumps(config))
        paths[variant] = path
    return paths


def extract_baseline(rev: str, folder: Path) -> Path | None:
    """The package's source at `rev`, in `folder`/src; None when git cannot give it (a shallow clone, no git)."""
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return folder / "src"


def variant_argv(variant: str, config: Path, sources: dict[str, Path | None], *extra: str) -> list[str]:
    """The gateway of `variant`; one of an older source (`sources`) runs it through PYTHONPATH, which comes
    before the editable install's path entry (`env` execs the gateway, so the pid is the gateway's)."""
    argv = gateway_argv(config, *extra)
    source = sources.get(variant)
    return ["env", f"PYTHONPATH={source}", *argv] if source is not None else argv


def gateway_pid(port: int) -> int:
    found = subprocess.run(["pgrep", "-f", f"127.0.0.1:{port}"], capture_output=True, text=True, check=False)
    return int(found.stdout.split()[0])


def untraced_environment() -> None:
    """No `OTEL_*` variable reaches the gateways: `tracing off` must be off."""
    for key in [key for key in os.environ if key.startswith("OTEL_")]:
        del os.environ[key]


#: The gateway's CPU µs per call of each repeat, by (transport, concurrency, variant).
CPU_US: dict[tuple[str, int, str], list[float]] = {}


async def run_cells(
    transport: str, sessions: dict[str, Any], pids: dict[str, int], concurrency: int, calls: int, repeats: int
) -> list[Cell]:
    cells = {variant: Cell(transport, concurrency, variant, []) for variant in sessions}
    for session in sessions.values():
        await lean.warm(session, "echo", concurrency)
    for _ in range(repeats):  # interleaved, so drift on a noisy machine hits every variant alike
        for variant, session in sessions.items():
            before = cpu_seconds(pids[variant])
            cells[variant].samples.append(await lean.measure(session, "echo", calls, concurrency))
            spent_us = (cpu_seconds(pids[variant]) - before) / calls * 1e6
            CPU_US.setdefault((transport, concurrency, variant), []).append(spent_us)
    return list(cells.values())


def reference_of(variant: str) -> str:
    return "off @rev" if variant.endswith("@rev") else "tracing off"


def cpu_ratio(cell: Cell, reference: str) -> float:
    """The median of the per-repeat ratios of `cell`'s CPU per call to `reference`'s (same repeat)."""
    mine = CPU_US.get((cell.transport, cell.concurrency, cell.variant), [])
    theirs = CPU_US.get((cell.transport, cell.concurrency, reference), [])
    ratios = [a / b for a, b in zip(mine, theirs, strict=False) if b > 0]
    return statistics.median(ratios) if ratios else float("nan")


def report(cells: list[Cell]) -> str:
    columns = ("p50 ms", "p99 ms", "calls/s", "p50 x b", "thr x b", "p50 x off", "thr x off", "cpu µs", "cpu x off")
    lines = [f"{'transport':9} {'c':>3} {'variant':15} " + " ".join(f"{name:>9}" for name in columns)]
    by_key = {(c.transport, c.concurrency, c.variant): c for c in cells}
    for cell in cells:
        before = by_key.get((cell.transport, cell.concurrency, "before tracing"), cell)
        off = by_key.get((cell.transport, cell.concurrency, reference_of(cell.variant)), cell)
        cpu = statistics.median(CPU_US.get((cell.transport, cell.concurrency, cell.variant), [float("nan")]))
        figures = (
            cell.p50,
            cell.p99,
            cell.rate,
            cell.p50 / before.p50,
            cell.rate / before.rate,
            cell.p50 / off.p50,
            cell.rate / off.rate,
            cpu,
            cpu_ratio(cell, reference_of(cell.variant)),
        )
        lines.append(
            f"{cell.transport:9} {cell.concurrency:>3} {cell.variant:15} {figures[0]:9.2f} {figures[1]:9.2f} "
            f"{figures[2]:9.0f} "
            + " ".join(f"{value:9.2f}" for value in figures[3:7])
            + f" {figures[7]:9.0f} {figures[8]:9.2f}"
        )
    return "\n".join(lines)


def spread(cell: Cell) -> float:
    """How far a variant's own repeats of p50 stray from their median (the noise of the cell), as a share."""
    values = [s.p50_ms for s in cell.samples]
    middle = statistics.median(values)
    return max(abs(v - middle) for v in values) / middle


def verdicts(cells: list[Cell]) -> list[str]:
    by_key = {(c.transport, c.concurrency, c.variant): c for c in cells}
    out = []
    before, off = by_key.get(("stdio", 1, "before tracing")), by_key.get(("stdio", 1, "tracing off"))
    if before is not None and off is not None:
        ratio, noise = off.p50 / before.p50, max(spread(before), spread(off))
        ok = "met" if abs(ratio - 1) <= noise else "MISSED"
        out.append(
            f"target stdio c=1 tracing off within noise of before tracing: p50 {ratio:.2f}x, throughput "
            f"{off.rate / before.rate:.2f}x; repeats stray up to {noise * 100:.0f} % from their median ({ok})"
        )
    off8, on8 = by_key.get(("http", 8, "tracing off")), by_key.get(("http", 8, "tracing on"))
    if off8 is not None and on8 is not None:
        ratio, cpu = on8.rate / off8.rate, cpu_ratio(on8, "tracing off")
        ok = "met" if 1 - ratio <= TARGET_TRACING_ON_COST else "MISSED"
        by_cpu = "met" if 1 - 1 / cpu <= TARGET_TRACING_ON_COST else "MISSED"
        out.append(
            f"target HTTP c=8 tracing on costs <= 10 % throughput: {(1 - ratio) * 100:.1f} % "
            f"({ratio:.2f}x tracing off, {ok}); by the gateway's CPU per call {cpu:.2f}x, "
            f"{(1 - 1 / cpu) * 100:.1f} % ({by_cpu})"
        )
    return out


async def main(args: argparse.Namespace) -> None:
    untraced_environment()
    cells: list[Cell] = []
    with tempfile.TemporaryDirectory(prefix="tracing-bench-") as tmp:
        folder = Path(tmp)
        configs = write_configs(folder)
        variants = [v for v in VARIANTS if v in args.variants]
        sources: dict[str, Path | None] = {}
        if "before tracing" in variants:
            (folder / "baseline").mkdir()
            sources["before tracing"] = extract_baseline(args.baseline_rev, folder / "baseline")
            if sources["before tracing"] is None:
                print(f"before tracing skipped: git cannot give the source at {args.baseline_rev}", flush=True)
                variants.remove("before tracing")
        if args.compare_rev is not None:
            (folder / "compare").mkdir()
            compared = extract_baseline(args.compare_rev, folder / "compare")
            if compared is None:
                raise SystemExit(f"git cannot give the source at {args.compare_rev}")
            sources["off @rev"] = sources["on @rev"] = compared
            variants += ["off @rev", "on @rev"]
        if "stdio" in args.transports:
            with tempfile.TemporaryFile() as errlog:  # the gateways' stderr
                async with AsyncExitStack() as stack:
                    sessions = {
                        variant: await stack.enter_async_context(
                            lean.stdio_session(variant_argv(variant, configs[variant], sources), errlog)
                        )
                        for variant in variants
                    }
                    pids = {variant: session.pid for variant, session in sessions.items()}
                    cells += await run_cells("stdio", sessions, pids, 1, args.calls, args.repeats)
            print(report(cells), flush=True)  # progress: a full run takes minutes
        if "http" in args.transports:
            with ExitStack() as gateways:
                urls, pids = {}, {}
                for variant in variants:
                    port = free_port()
                    argv = variant_argv(variant, configs[variant], sources, "--http", f"127.0.0.1:{port}")
                    urls[variant] = gateways.enter_context(http_process(argv, port, variant))
                    pids[variant] = gateway_pid(port)
                async with AsyncExitStack() as stack:
                    sessions = {v: await stack.enter_async_context(lean.http_session(u)) for v, u in urls.items()}
                    fresh = await run_cells("http", sessions, pids, 8, args.calls, args.repeats)
            print("\n".join(report(fresh).splitlines()[0 if not cells else 1 :]), flush=True)
            cells += fresh
    print()
    print(
        f"{args.calls} calls per cell, median of {args.repeats} repeats, lean driver (handshake era), raw echo "
        f"upstream, five guards; before tracing = {args.baseline_rev}"
        + (f"; @rev = {args.compare_rev}" if args.compare_rev else "")
        + f"; load average {os.getloadavg()[0]:.1f}"
    )
    print(report(cells))
    for line in verdicts(cells):
        print(line)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="tracing overhead benchmark")
    parser.add_argument("--calls", type=int, default=1000, help="timed calls per cell and repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--transports", nargs="+", default=["stdio", "http"], choices=["stdio", "http"])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--baseline-rev", default=BASELINE_REV, help="the revision of `before tracing`")
    parser.add_argument("--compare-rev", help="also run this revision's `tracing off` and `tracing on`")
    parser.add_argument("--quick", action="store_true", help="200 calls, 2 repeats")
    parser.add_argument("--loop", choices=["auto", "uvloop", "asyncio"], default="auto", help="the gateways' --loop")
    args = parser.parse_args(argv)
    GATEWAY_OPTIONS[:] = ["--loop", args.loop]
    if args.quick:
        args.calls, args.repeats = 200, 2
    return args


if __name__ == "__main__":
    anyio.run(main, parse_args())
