"""Audit overhead: gateway `tools/call` throughput and p50/p99 with the audit trail off, on SQLite, on PostgreSQL.

python bench/audit_overhead.py                 # full run (a few minutes on 2 cores)
python bench/audit_overhead.py --quick         # fewer calls and repeats, for a smoke test
python bench/audit_overhead.py --concurrency 1 8 --variants sqlite
python bench/audit_overhead.py --mcp-client    # the whole stack: mcp's Client and an mcp echo server

One real CLI gateway process per variant, serving Streamable HTTP, with no interceptors, so the audit
trail is all the gateway adds: `audit off`; `sqlite` (the default store, WAL, synchronous=NORMAL, and the
default `audit.writer: auto`); `sqlite+in-process` and `sqlite+process` (the same with the writer named);
`sqlite+receipts` (plus each call's receipt in the reply's `_meta`); `postgresql` (a server this bench
starts from the Debian package, via tests/postgres_server.py; skipped with a note when the binary is
missing). Each variant gets its own store and key. Every call has distinct arguments, sessions are warmed,
repeats are interleaved across variants, and each cell is the median over repeats; ratios are to
`audit off` in the same run. Afterwards `audit verify` runs over every store the bench wrote.

What is measured is the gateway's throughput, so by default the gateway is what bounds the rate: the
client is the lean JSON-RPC driver of `compare.py` (`jsonrpc_load.py`, handshake era) and the upstream
`peers/raw_echo.py` (stdio), as on a host of its own with its clients and servers elsewhere. Target:
SQLite audit costs <= 10 % throughput at c=8 (ratio >= 0.90). `--mcp-client` swaps in mcp's `Client` and
the `mcp` echo server of `gateway_overhead.py`: on a 2-core machine those two use most of the CPU, and
the writer process competes with them for it, so its ratios are those of the whole machine (reported,
not held to the target).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path
from typing import Any

import anyio
import jsonrpc_load as lean
from gateway_overhead import GATEWAY_OPTIONS, Cell, free_port, gateway_argv, http_process, measure, warm
from mcp import Client

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent
ECHO = HERE.parent / "gateway_overhead.py"
VARIANTS = ("audit off", "sqlite", "sqlite+in-process", "sqlite+process", "sqlite+receipts", "postgresql")
RAW_ECHO = HERE.parent / "peers" / "raw_echo.py"
TARGET_SQLITE_THROUGHPUT = 0.90


def write_configs(
    folder: Path, variants: list[str], postgres_url: str | None, *, raw_upstream: bool = False
) -> dict[str, Path]:
    """One gateway config per variant, each with its own store and key file."""
    echo = [str(RAW_ECHO)] if raw_upstream else [str(ECHO), "serve-echo"]
    upstream = {"echo": {"command": sys.executable, "args": echo}}
    paths = {}
    for variant in variants:
        slug = variant.replace("+", "-").replace(" ", "-")
        config: dict[str, Any] = {"upstreams": upstream}
        if variant != "audit off":
            store = postgres_url if variant == "postgresql" else str(folder / slug / "audit.db")
            config["audit"] = {
                "enabled": True,
                "store": store,
                "key_file": str(folder / slug / "audit-key"),
                "receipts": variant.endswith("+receipts"),
            }
            for writer in ("process", "in-process"):
                if variant.endswith(f"+{writer}"):
                    config["audit"]["writer"] = writer
        path = folder / f"{slug}.yaml"
        path.write_text(json.dumps(config))
        paths[variant] = path
    return paths


def start_postgres() -> tuple[str | None, Any, str]:
    """A fresh database on a PostgreSQL server started here: (url, stop, note); url None when unavailable."""
    sys.path.insert(0, str(ROOT / "tests"))
    from postgres_server import PostgresUnavailableError, create_database
    from postgres_server import start_postgres as start

    try:
        base, stop = start()
    except PostgresUnavailableError as exc:
        return None, lambda: None, f"postgresql skipped: {exc}"
    return create_database(base, "bench"), stop, f"postgresql: {base} (started by the bench)"


async def run_cells(clients: dict[str, Any], concurrency: int, calls: int, repeats: int) -> list[Cell]:
    """`clients` are mcp `Client`s, or lean driver sessions (`jsonrpc_load.Session`)."""
    cells = {variant: Cell("http", concurrency, variant, []) for variant in clients}
    for client in clients.values():
        await (warm(client, concurrency) if isinstance(client, Client) else lean.warm(client, "echo", concurrency))
    for _ in range(repeats):  # interleaved, so drift on a noisy machine hits every variant alike
        for variant, client in clients.items():
            if isinstance(client, Client):
                sample = await measure(client, calls, concurrency)
            else:
                sample = await lean.measure(client, "echo", calls, concurrency)
            cells[variant].samples.append(sample)
    return list(cells.values())


def report(cells: list[Cell]) -> str:
    columns = ("p50 ms", "p99 ms", "calls/s", "p50 x", "p99 x", "thr x")
    lines = [f"{'c':>3} {'variant':16} " + " ".join(f"{name:>8}" for name in columns)]
    base = {c.concurrency: c for c in cells if c.variant == "audit off"}
    for cell in cells:
        off = base[cell.concurrency]
        lines.append(
            f"{cell.concurrency:>3} {cell.variant:16} {cell.p50:8.2f} {cell.p99:8.2f} {cell.rate:8.0f} "
            f"{cell.p50 / off.p50:8.2f} {cell.p99 / off.p99:8.2f} {cell.rate / off.rate:8.2f}"
        )
    return "\n".join(lines)


def verdicts(cells: list[Cell], *, gateway_bound: bool) -> list[str]:
    by_key = {(c.concurrency, c.variant): c for c in cells}
    off, sqlite = by_key.get((8, "audit off")), by_key.get((8, "sqlite"))
    if off is None or sqlite is None:
        return []
    ratio = sqlite.rate / off.rate
    cost = (1 - ratio) * 100
    if not gateway_bound:
        whole = "whole machine (mcp Client and server beside the gateway), c=8"
        return [f"{whole}: SQLite audit costs {cost:.1f} % ({ratio:.2f}x audit off; the target is gateway-bound)"]
    ok = "met" if ratio >= TARGET_SQLITE_THROUGHPUT else "MISSED"
    return [f"target SQLite audit costs <= 10 % throughput at c=8: {cost:.1f} % ({ratio:.2f}x audit off, {ok})"]


def verify_stores(configs: dict[str, Path]) -> list[str]:
    """`audit verify` over each store the bench wrote: the records it timed are sound."""
    lines = []
    for variant, config in configs.items():
        if variant == "audit off":
            continue
        argv = [sys.executable, "-m", "mcp_interceptors", "audit", "verify", "--config", str(config)]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        lines.append(f"audit verify ({variant}): {(done.stdout or done.stderr).strip()}")
    return lines


async def main(args: argparse.Namespace) -> None:
    cells: list[Cell] = []
    variants = [v for v in VARIANTS if v in args.variants]
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="audit-bench-") as tmp, ExitStack() as services:
        postgres_url = None
        if "postgresql" in variants:
            postgres_url, stop_postgres, note = start_postgres()
            services.callback(stop_postgres)
            notes.append(note)
            if postgres_url is None:
                variants.remove("postgresql")
        configs = write_configs(Path(tmp), variants, postgres_url, raw_upstream=args.lean)
        with ExitStack() as gateways:  # leaving it stops the gateways (SIGTERM flushes their writers)
            urls = {}
            for variant in variants:
                port = free_port()
                argv = gateway_argv(configs[variant], "--http", f"127.0.0.1:{port}")
                urls[variant] = gateways.enter_context(http_process(argv, port, variant))
            for concurrency in args.concurrency:
                async with AsyncExitStack() as stack:
                    clients = {
                        variant: await stack.enter_async_context(
                            lean.http_session(url) if args.lean else Client(url, mode=args.mode)  # type: ignore[arg-type]
                        )
                        for variant, url in urls.items()
                    }
                    fresh = await run_cells(clients, concurrency, args.calls, args.repeats)
                lines = report(fresh).splitlines()
                print("\n".join(lines if not cells else lines[1:]), flush=True)  # progress: the header once
                cells += fresh
        checks = verify_stores(configs)
    print()
    driver = "lean driver (handshake era), raw echo upstream" if args.lean else f"mcp Client, mode {args.mode}"
    print(f"{args.calls} calls per cell, median of {args.repeats} repeats, {driver}, HTTP, no interceptors")
    for note in notes:
        print(note)
    print(report(cells))
    for line in [*verdicts(cells, gateway_bound=args.lean), *checks]:
        print(line)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="audit overhead benchmark")
    parser.add_argument("--calls", type=int, default=1000, help="timed calls per cell and repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--mode", choices=["2026-07-28", "legacy"], default="2026-07-28", help="with --mcp-client")
    parser.add_argument("--concurrency", nargs="+", type=int, default=[8])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--quick", action="store_true", help="200 calls, 2 repeats")
    parser.add_argument("--loop", choices=["auto", "uvloop", "asyncio"], default="auto", help="the gateways' --loop")
    setup = parser.add_mutually_exclusive_group()
    setup.add_argument(
        "--mcp-client",
        dest="lean",
        action="store_false",
        help="mcp's Client and an mcp echo server instead of the lean driver and raw echo (the whole machine)",
    )
    setup.add_argument("--lean", dest="lean", action="store_true", help="the default (kept for older command lines)")
    parser.set_defaults(lean=True)
    args = parser.parse_args(argv)
    GATEWAY_OPTIONS[:] = ["--loop", args.loop]
    if "audit off" not in args.variants:
        args.variants.insert(0, "audit off")
    if args.quick:
        args.calls, args.repeats = 200, 2
    return args


if __name__ == "__main__":
    anyio.run(main, parse_args())
