"""Gateway footprint: cold start, idle handshake-era HTTP sessions, and memory growth under load.

    python bench/footprint.py                       # all three (about two minutes on 2 cores)
    python bench/footprint.py cold-start --runs 7   # one measurement
    python bench/footprint.py sessions --sessions 1000
    python bench/footprint.py leak --calls 10000 --concurrency 32

Each figure sits beside a baseline measured in the same run: the bench's echo server (a low-level
mcp `Server`, `gateway_overhead.py serve-echo`) doing the same thing.

- cold-start: from spawning `gateway --config` (three stdio echo upstreams, the five in-process
  guards) over stdio to its answer to `initialize` and then to `tools/list`, which need every
  upstream connected and the chain built. Baseline: the echo server spawned and asked the same.
  Runs alternate between the two; medians are reported.
- sessions: the resident memory (VmRSS) an HTTP gateway (no guards) grows by when `--sessions`
  handshake-era clients each open a session (`initialize`, `notifications/initialized`) and then
  go idle, against the same for the echo server's own Streamable HTTP front.
- leak: `--calls` `tools/call` at `--concurrency` over one HTTP session of the gateway with the five
  guards; VmRSS after a warm-up and at each fifth of the calls. A flat tail means no growth.

Targets (issue 32): cold start <= 1.5 s; 1,000 idle sessions <= 50 MB above an idle gateway.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
from gateway_overhead import GUARDS, echo_argv, free_port, gateway_argv, http_process
from jsonrpc_load import HttpSession, http_session, initialize_params, measure, warm

TARGET_COLD_START_S = 1.5
TARGET_SESSIONS_MB = 50.0
TOOL = "echo"
GATEWAY_COLD = "gateway, 3 echo upstreams + 5 guards"
GATEWAY_COLD_RAW = "gateway, 3 raw_echo upstreams + 5 guards"


def rss_mb(pid: int) -> float:
    """Resident memory of `pid` in MiB (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def pid_listening(port: int) -> int:
    """The process holding the listening socket on `port` (the server the bench started)."""
    inode = None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                inode = fields[9]
    if inode is None:
        raise RuntimeError(f"nothing listens on {port}")
    target = f"socket:[{inode}]"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == target for fd in os.listdir(f"/proc/{pid}/fd")):
                return int(pid)
        except OSError:
            continue
    raise RuntimeError(f"no process of ours holds port {port}")


RAW_ECHO = Path(__file__).resolve().parent / "peers" / "raw_echo.py"


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds `pid` has used (its children not counted)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_config(
    folder: Path, name: str, upstreams: int, guards: bool, extra: dict[str, Any] | None = None, raw: bool = False
) -> Path:
    echo = {"command": sys.executable, "args": [str(RAW_ECHO)] if raw else echo_argv()[1:]}
    config: dict[str, Any] = {"upstreams": {f"echo{i}" if upstreams > 1 else "echo": echo for i in range(upstreams)}}
    if guards:
        config["interceptors"] = {"guards": [{"name": guard} for guard in GUARDS]}
    config.update(extra or {})
    path = folder / f"{name}.yaml"
    path.write_text(json.dumps(config))
    return path


# --------------------------------------------------------------------------- cold start


def _exchange(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> dict[str, Any]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the process ended before answering {message['method']}")
        answer: dict[str, Any] = json.loads(line)
        if answer.get("id") == message["id"]:
            if "result" not in answer:
                raise RuntimeError(f"{message['method']}: {answer}")
            return answer


def cold_start_once(argv: list[str]) -> tuple[float, float, float]:
    """Seconds from spawning `argv` to its `initialize` answer and to its `tools/list` answer, and the CPU
    seconds the process itself had used by then."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        _exchange(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize_params()})
        initialized = time.perf_counter() - started
        assert proc.stdin is not None
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        listing = _exchange(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})
        listed = time.perf_counter() - started
        if not listing["result"].get("tools"):
            raise RuntimeError(f"no tools listed: {listing}")
        return initialized, listed, cpu_s(proc.pid)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def cold_start(folder: Path, runs: int) -> dict[str, float]:
    cases = {
        "echo server": echo_argv(),
        GATEWAY_COLD: gateway_argv(write_config(folder, "cold", upstreams=3, guards=True)),
        GATEWAY_COLD_RAW: gateway_argv(write_config(folder, "cold-raw", upstreams=3, guards=True, raw=True)),
    }
    times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in cases}
    for argv in cases.values():  # one untimed run each: the page cache holds the modules after it
        cold_start_once(argv)
    for round_ in range(runs):
        order = list(cases)[round_ % len(cases) :] + list(cases)[: round_ % len(cases)]
        for name in order:
            times[name].append(cold_start_once(cases[name]))
    print(f"cold start, median of {runs} rotating runs (s; CPU: the process itself, not its upstreams):")
    print(f"  {'process':42} {'initialize':>10} {'tools/list':>10} {'CPU':>6} {'x echo':>7}")
    echo = statistics.median(s[1] for s in times["echo server"])
    for name, samples in times.items():
        init, listed, cpu = (statistics.median(s[i] for s in samples) for i in (0, 1, 2))
        print(f"  {name:42} {init:10.3f} {listed:10.3f} {cpu:6.2f} {listed / echo:7.2f}")
    gateway = statistics.median(s[1] for s in times[GATEWAY_COLD])
    raw = statistics.median(s[1] for s in times[GATEWAY_COLD_RAW])
    verdict = "met" if gateway <= TARGET_COLD_START_S else "MISSED"
    print(
        f"  target: gateway with 3 upstreams and 5 guards ready <= {TARGET_COLD_START_S} s: {gateway:.2f} s, {verdict}"
        f" (with raw_echo upstreams: {raw:.2f} s)"
    )
    return {"cold_start_s": gateway, "cold_start_x_echo": gateway / echo, "cold_start_raw_s": raw}


# --------------------------------------------------------------------------- idle sessions


async def open_idle_sessions(url: str, count: int) -> list[str]:
    """`count` handshake-era sessions, each initialized and left idle; their ids."""
    ids: list[str] = []
    limiter = anyio.Semaphore(8)

    async def one() -> None:
        async with limiter:
            session = HttpSession(url)
            try:
                await session.request("initialize", initialize_params())
                await session.notify("notifications/initialized")
                assert session.session_id is not None, "no mcp-session-id"
                ids.append(session.session_id)
            finally:
                await session.aclose()

    async with anyio.create_task_group() as tg:
        for _ in range(count):
            tg.start_soon(one)
    return ids


async def settle(pid: int) -> float:
    """VmRSS once it stops moving (the server finishes what the clients left behind)."""
    previous = rss_mb(pid)
    for _ in range(20):
        await anyio.sleep(0.5)
        now = rss_mb(pid)
        if abs(now - previous) < 0.2:
            return now
        previous = now
    return previous


async def idle_sessions(folder: Path, count: int) -> dict[str, float]:
    config = write_config(
        folder, "sessions", upstreams=1, guards=False, extra={"http": {"max_sessions": max(2 * count, 100)}}
    )
    out: dict[str, float] = {}
    print(f"{count} idle handshake-era HTTP sessions (VmRSS, MiB):")
    print(f"  {'server':20} {'idle':>8} {'with sessions':>14} {'growth':>8} {'KiB/session':>12}")
    for name in ("echo server", "gateway"):
        port = free_port()
        argv = (
            echo_argv("--http", str(port))
            if name == "echo server"
            else gateway_argv(config, "--http", f"127.0.0.1:{port}")
        )
        with http_process(argv, port, name) as url:
            pid = pid_listening(port)
            async with http_session(url) as session:  # one real session warms every code path first
                await warm(session, TOOL, 1)
            idle = await settle(pid)
            await open_idle_sessions(url, count)
            loaded = await settle(pid)
        growth = loaded - idle
        print(f"  {name:20} {idle:8.1f} {loaded:14.1f} {growth:8.1f} {growth * 1024 / count:12.1f}")
        out[name] = growth
    verdict = "met" if out["gateway"] <= TARGET_SESSIONS_MB * count / 1000 else "MISSED"
    print(
        f"  gateway growth {out['gateway'] / max(out['echo server'], 0.1):.2f}x the echo server's; target <= "
        f"{TARGET_SESSIONS_MB:.0f} MB per 1000: {verdict}"
    )
    return {"sessions_mb": out["gateway"], "sessions_echo_mb": out["echo server"]}


# --------------------------------------------------------------------------- growth under load


async def leak(folder: Path, calls: int, concurrency: int) -> dict[str, float]:
    config = write_config(folder, "leak", upstreams=1, guards=True)
    port = free_port()
    points: list[tuple[int, float]] = []
    with http_process(gateway_argv(config, "--http", f"127.0.0.1:{port}"), port, "gateway") as url:
        pid = pid_listening(port)
        async with http_session(url) as session:
            await warm(session, TOOL, concurrency)
            await measure(session, TOOL, 1000, concurrency)
            points.append((0, await settle(pid)))
            step = calls // 5
            for done in range(step, calls + 1, step):
                await measure(session, TOOL, step, concurrency)
                points.append((done, await settle(pid)))
    print(f"VmRSS of the gateway with 5 guards over {calls} calls at c={concurrency} (after 1000 warm-up calls):")
    print("  " + "  ".join(f"{done}: {mb:.1f}" for done, mb in points))
    tail = points[-1][1] - points[1][1]
    print(f"  growth over the last {calls - step} calls: {tail:+.1f} MiB")
    return {"leak_tail_mb": tail, "leak_tail_calls": calls - step, "leak_concurrency": concurrency}


def measure_footprint(
    what: Sequence[str], *, runs: int = 7, sessions: int = 1000, calls: int = 10_000, concurrency: int = 32
) -> dict[str, float]:
    """Run the measurements named in `what`; their figures by name (see `verdicts`)."""
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="footprint-bench-") as tmp:
        folder = Path(tmp)
        if "cold-start" in what:
            figures.update(cold_start(folder, runs))
        if "sessions" in what:
            figures.update(anyio.run(idle_sessions, folder, sessions))
            figures["sessions"] = sessions
        if "leak" in what:
            figures.update(anyio.run(leak, folder, calls, concurrency))
    return figures


def verdicts(figures: dict[str, float]) -> list[str]:
    out = []
    if "cold_start_s" in figures:
        seconds = figures["cold_start_s"]
        ok = "met" if seconds <= TARGET_COLD_START_S else "MISSED"
        out.append(
            f"cold start: gateway with 3 stdio upstreams and 5 guards answers tools/list in {seconds:.2f} s, "
            f"{figures['cold_start_x_echo']:.2f}x the echo server (target <= {TARGET_COLD_START_S} s): {ok}; "
            f"with raw_echo upstreams {figures['cold_start_raw_s']:.2f} s"
        )
    if "sessions_mb" in figures:
        per_1000 = figures["sessions_mb"] * 1000 / figures["sessions"]
        ok = "met" if per_1000 <= TARGET_SESSIONS_MB else "MISSED"
        out.append(
            f"memory: idle handshake-era HTTP sessions cost {per_1000:.1f} MiB per 1000 "
            f"(echo server {figures['sessions_echo_mb'] * 1000 / figures['sessions']:.1f}; "
            f"target <= {TARGET_SESSIONS_MB:.0f} MB): {ok}"
        )
    if "leak_tail_mb" in figures:
        out.append(
            f"memory: over the last {figures['leak_tail_calls']:.0f} calls at c={figures['leak_concurrency']:.0f} "
            f"with 5 guards, VmRSS grew {figures['leak_tail_mb']:+.1f} MiB (target: no growth)"
        )
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="*", choices=["cold-start", "sessions", "leak"], default=[])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args(argv)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    figures = measure_footprint(
        args.what or ["cold-start", "sessions", "leak"],
        runs=args.runs,
        sessions=args.sessions,
        calls=args.calls,
        concurrency=args.concurrency,
    )
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("\n".join(verdicts(figures)))


if __name__ == "__main__":
    main()
