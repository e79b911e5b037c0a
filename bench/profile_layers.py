"""Where a `tools/call` spends the gateway's CPU, per layer: a cProfile in CPU time of the real CLI gateway.

    python bench/profile_layers.py                         # stdio, one call in flight, the five guards
    python bench/profile_layers.py --era 2026-07-28        # the same with 2026-07-28 requests (no handshake)
    python bench/profile_layers.py --front http -c 8       # the Streamable HTTP front, eight in flight
    python bench/profile_layers.py --audit                 # with the signed SQLite audit trail on
    python bench/profile_layers.py --guards                # no guards: the bare relay
    python bench/profile_layers.py --telemetry             # with tracing on (spans built and batched, then dropped)
    python bench/profile_layers.py --stats OUT.prof        # also keep the stats (pstats, snakeviz)

The gateway (`mcp-interceptors gateway`, the echo upstream of `gateway_overhead.py`) is driven by the
lean client of `jsonrpc_load.py`. Two timed passes of `--calls` calls: a plain one, which gives the
gateway's CPU per call (its process's utime + stime from /proc), then one under cProfile with a CPU
clock (`time.thread_time`, switched on and dumped by signals), which splits that CPU by layer. Each
function's own time goes to the first layer of `LAYERS` its file or name matches; a function of no layer
(a library's: orjson, anyio, asyncio) hands its time to its callers, so a parse counts for the framing
and a cancel scope for whoever opened it. cProfile's own cost grows with the number of Python calls,
so read the shares as those of Python-level work; syscalls and C code count in their callers.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import shutil
import signal
import sys
import tempfile
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from gateway_overhead import GUARDS, echo_argv, free_port, gateway_argv, http_process
from jsonrpc_load import Session, StdioSession, http_session, measure, stdio_session, warm

EVENT_LOOP = "event loop, anyio, task switches"
#: (layer, what a function's text contains: "name (file:line) file::name"); the first rule it meets names it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("guard secrets", ("guards/secrets.py", "guards/_detectors/secrets", "guards/_whole_text.py")),
    ("guard pii", ("guards/pii.py", "guards/_detectors/pii")),
    ("guard tool-policy", ("guards/policy.py",)),
    ("guard schema-guard", ("guards/schema.py", "guards/_schemas.py", "jsonschema")),
    ("guard size-limit", ("guards/size.py",)),
    ("guards' shared walk and scan", ("guards/",)),
    ("chain: executor, host, invoker", ("mcp_interceptors/executor/", "mcp_interceptors/invoker/", "/host/")),
    ("planning", ("mcp_interceptors/planning/",)),
    (
        "audit (records, hashing, SQLite)",
        (
            "mcp_interceptors/audit/",
            "gateway/auditing.py",
            "gateway/recording.py",
            "gateway/record_entries.py",
            "gateway/audit_process.py",
            "sqlite3",
        ),
    ),
    (
        "telemetry and metrics",
        ("gateway/telemetry", "gateway/metrics.py", "gateway/span_attributes.py", "opentelemetry", "prometheus_client"),
    ),
    (
        "upstream request (send, await, match)",
        (
            "gateway/upstream/",
            "peer.py::send_raw_request",
            "peer.py::settle",
            "peer.py::wait",
            "peer.py::__init__",
            "peer.py::time_out",
        ),
    ),
    ("stdio framing, both pipes (read, parse, check, write)", ("gateway/jsonrpc/", "gateway/fronts/stdio")),
    ("HTTP front (ours)", ("gateway/fronts/",)),
    (
        "uvicorn, starlette, mcp's HTTP",
        ("uvicorn", "starlette", "h11", "httptools", "sse_starlette", "mcp/server/", "mcp/shared/"),
    ),
    (
        EVENT_LOOP,
        (
            "cli/_runtime.py",
            "cli/_gateway.py",
            "anyio/_backends/_asyncio.py:182)",
            "anyio/_backends/_asyncio.py:2590)",
            "anyio/_backends/_asyncio.py:2598)",
            "asyncio/runners.py",
            "asyncio/base_events.py",
            "asyncio/events.py",
        ),
    ),
    ("forwarding: session, routing, context, shaping", ("mcp_interceptors/gateway/", "mcp_interceptors/protocol/")),
    ("other gateway code", ("mcp_interceptors/",)),
]


def cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def gateway_config(folder: Path, audit: bool, guards: list[str], telemetry: bool = False) -> Path:
    config: dict[str, Any] = {
        "upstreams": {"echo": {"command": sys.executable, "args": echo_argv()[1:], "prefix": ""}},
        "interceptors": {"guards": [{"name": guard} for guard in guards]},
    }
    if audit:
        config["audit"] = {"enabled": True, "store": str(folder / "audit.db"), "key_file": str(folder / "key")}
    if telemetry:  # every span built and batched, then dropped (as tracing_overhead.py's `tracing on`)
        config["telemetry"] = {"exporter": "none"}
    path = folder / "gateway.json"
    path.write_text(json.dumps(config))
    return path


class EnvelopeSession(StdioSession):
    """2026-07-28 requests on stdio: each carries the era's `_meta` envelope, with no handshake."""

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        meta = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "mcp-interceptors-bench", "version": "1.0"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        return await super().request(method, {**params, "_meta": meta})


@asynccontextmanager
async def envelope_session(argv: list[str], errlog: Any) -> AsyncIterator[StdioSession]:
    process = await anyio.open_process(argv, stderr=errlog, start_new_session=True)
    try:
        session = EnvelopeSession(process)
        async with anyio.create_task_group() as tg:
            tg.start_soon(session.read_responses)
            yield session
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            if process.stdin is not None:
                await process.stdin.aclose()
            os.killpg(process.pid, signal.SIGTERM)
            await process.wait()


@asynccontextmanager
async def gateway_session(args: argparse.Namespace, folder: Path, stats: Path) -> AsyncIterator[tuple[Session, int]]:
    argv = profiled_argv(gateway_argv(gateway_config(folder, args.audit, args.guards, args.telemetry)), stats)
    errlog = (folder / "gateway.err").open("wb")
    if args.front == "http":
        port = free_port()
        with http_process([*argv, "--http", f"127.0.0.1:{port}"], port, "gateway") as url:
            found = await anyio.run_process(["pgrep", "-f", f"127.0.0.1:{port}"], check=False)
            pid = int(found.stdout.split()[0])
            async with http_session(url) as session:
                yield session, pid
        return
    opener = envelope_session if args.era == "2026-07-28" else stdio_session
    async with opener(argv, errlog) as session:
        yield session, session.pid


PROFILED_GATEWAY = """
import cProfile, signal, sys, time
profile, out = cProfile.Profile(time.thread_time), sys.argv.pop(1)  # CPU time of the loop's thread
signal.signal(signal.SIGUSR1, lambda *_: profile.enable())
signal.signal(signal.SIGUSR2, lambda *_: (profile.disable(), profile.dump_stats(out)))
from mcp_interceptors.cli import main
sys.exit(main())
"""


def profiled_argv(argv: list[str], stats: Path) -> list[str]:
    """`argv` (a `python -m mcp_interceptors ...` line) under cProfile, switched on by SIGUSR1, dumped by SIGUSR2."""
    assert argv[1:3] == ["-m", "mcp_interceptors"], argv
    return [argv[0], "-c", PROFILED_GATEWAY, str(stats), *argv[3:]]


def layers_from_stats(stats_file: Path) -> Counter[str]:
    """Each function's own CPU time put in its layer; a function of no layer (a library's, the loop's) hands
    its time to its callers, in proportion to the time each call site spent in it."""
    stats = pstats.Stats(str(stats_file)).stats  # type: ignore[attr-defined]
    totals = Counter[str]()

    def text(func: tuple[str, int, str]) -> str:
        return f"{func[2]} ({func[0]}:{func[1]}) {func[0]}::{func[2]}"

    def assign(func: tuple[str, int, str], seconds: float, depth: int) -> None:
        for layer, needles in LAYERS:
            if any(needle in text(func) for needle in needles):
                totals[layer] += seconds
                return
        callers = stats[func][4] if func in stats else {}
        weights = {caller: entry[2] + 1e-12 for caller, entry in callers.items() if caller != func}
        if depth > 12 or not weights:
            totals[EVENT_LOOP] += seconds
            return
        whole = sum(weights.values())
        for caller, weight in weights.items():
            assign(caller, seconds * weight / whole, depth + 1)

    for func, (_, _, tottime, _, _) in stats.items():
        assign(func, tottime, 0)
    return totals


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="profile-layers-") as tmp:
        folder = Path(tmp)
        stats = folder / "gateway.prof"
        async with gateway_session(args, folder, stats) as (session, pid):
            await warm(session, "echo", args.concurrency)
            await measure(session, "echo", args.calls, args.concurrency)
            before = cpu_seconds(pid)
            plain = await measure(session, "echo", args.calls, args.concurrency)
            cpu_per_call_us = (cpu_seconds(pid) - before) / args.calls * 1e6
            os.kill(pid, signal.SIGUSR1)
            profiled = await measure(session, "echo", args.calls, args.concurrency)
            os.kill(pid, signal.SIGUSR2)
            with anyio.fail_after(30):
                while not stats.exists():  # noqa: ASYNC110 - another process writes it: nothing to wait on here
                    await anyio.sleep(0.05)
                await anyio.sleep(0.5)
        if args.stats:
            shutil.copy(stats, args.stats)
        seconds = layers_from_stats(stats)
    total = sum(seconds.values())
    print(
        f"front {args.front}, era {args.era}, c={args.concurrency}, guards {' '.join(args.guards) or 'none'}, "
        f"audit {'on' if args.audit else 'off'}, tracing {'on' if args.telemetry else 'off'}"
    )
    print(
        f"{args.calls} calls: p50 {plain.p50_ms:.3f} ms ({profiled.p50_ms:.3f} ms under cProfile), {plain.rate:.0f} "
        f"calls/s; gateway CPU {cpu_per_call_us:.0f} µs per call ({total / args.calls * 1e6:.0f} µs under "
        f"cProfile); load {os.getloadavg()[0]:.1f}"
    )
    print()
    print("| layer | µs per call | share |")
    print("|---|---:|---:|")
    for layer, spent in seconds.most_common():
        share = spent / total
        print(f"| {layer} | {share * cpu_per_call_us:.0f} | {share:.0%} |")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--front", choices=["stdio", "http"], default="stdio")
    parser.add_argument("--era", choices=["legacy", "2026-07-28"], default="legacy", help="stdio only")
    parser.add_argument("-c", "--concurrency", type=int, default=1)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--guards", nargs="*", default=GUARDS, help="in-process guards (none: a bare relay)")
    parser.add_argument("--audit", action="store_true", help="turn the signed SQLite audit trail on")
    parser.add_argument("--telemetry", action="store_true", help="turn tracing on (`telemetry: {exporter: none}`)")
    parser.add_argument("--stats", help="copy the cProfile stats here (for pstats or snakeviz)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    anyio.run(run, parse_args())
