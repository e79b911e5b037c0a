"""Gateway overhead: `tools/call` latency (p50/p99) and throughput, direct vs through the gateway.

python bench/gateway_overhead.py                  # full run (several minutes on 2 cores)
python bench/gateway_overhead.py --quick          # fewer calls and repeats, for a smoke test
python bench/gateway_overhead.py --mode legacy    # handshake-era clients instead of 2026-07-28

The upstream is a minimal low-level `Server` with one `echo` tool (`serve-echo`). Variants, each
measured against the direct server in the same run: the real CLI gateway with no interceptors,
with the five in-process built-in guards (secrets, pii, tool-policy, schema-guard, size-limit) and
with one out-of-process interceptor server (`examples/validator_server.py`, two validators, stdio).
The gateway's own upstream is always the echo server over stdio. Cells: stdio with one call in
flight, Streamable HTTP with 1, 8 and 32 in flight (one client session, that many workers). Every
call has distinct arguments; sessions are warmed before timing; each cell reports the median over
repeats of p50, p99 and calls/s, and the ratio to direct.
Targets (issue 32): stdio p50 <= 1.25x direct with 5 guards; HTTP c=8 throughput >= 0.85x direct.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.server import Server, ServerRequestContext

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent
VALIDATOR_SERVER = ROOT / "examples" / "validator_server.py"
GUARDS = ["secrets", "pii", "tool-policy", "schema-guard", "size-limit"]
VARIANTS = ("direct", "gateway", "gateway+5 guards", "gateway+remote")
TARGET_STDIO_P50 = 1.25
TARGET_HTTP_C8_THROUGHPUT = 0.85


# --------------------------------------------------------------------------- the upstream


def echo_server() -> Server[Any]:
    async def list_tools(ctx: ServerRequestContext[Any], params: Any) -> types.ListToolsResult:
        schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
        return types.ListToolsResult(tools=[types.Tool(name="echo", description="Echo.", input_schema=schema)])

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        text = str((params.arguments or {}).get("text"))
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    return Server("bench-echo", version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_echo(port: int | None) -> None:
    server = echo_server()
    if port is None:
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        return
    import uvicorn

    app = server.streamable_http_app(host="127.0.0.1")
    await uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")).serve()


# --------------------------------------------------------------------------- processes and clients


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def echo_argv(*extra: str) -> list[str]:
    return [sys.executable, str(HERE), "serve-echo", *extra]


def write_configs(folder: Path) -> dict[str, Path]:
    upstream = {"echo": {"command": sys.executable, "args": [str(HERE), "serve-echo"]}}
    configs = {
        "gateway": {"upstreams": upstream},
        "gateway+5 guards": {"upstreams": upstream, "interceptors": {"guards": [{"name": g} for g in GUARDS]}},
        "gateway+remote": {
            "upstreams": upstream,
            "interceptors": {
                "servers": [{"name": "validators", "command": sys.executable, "args": [str(VALIDATOR_SERVER)]}]
            },
        },
    }
    paths = {}
    for name, config in configs.items():
        path = folder / (name.replace("+", "-").replace(" ", "-") + ".yaml")
        path.write_text(json.dumps(config))
        paths[name] = path
    return paths


#: Options every gateway of the run gets (`--loop`, from the bench's own `--loop`).
GATEWAY_OPTIONS: list[str] = []


def gateway_argv(config: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "mcp_interceptors", "gateway", "--config", str(config), *GATEWAY_OPTIONS, *extra]


def wait_listening(port: int, proc: subprocess.Popen[bytes], label: str, limit_s: float = 60, err: Any = None) -> None:
    """Poll until `proc` listens on `port`; raise (with its stderr from `err`, if given) if it exits or times out."""
    deadline = time.monotonic() + limit_s
    while True:
        if proc.poll() is not None:
            tail = ""
            if err is not None:
                err.seek(0)
                tail = err.read().decode()[-2000:]
            raise RuntimeError(f"{label} exited ({proc.returncode}): {tail}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{label} is not listening on {port}") from None
            time.sleep(0.1)  # readiness poll


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, up to 15 s, then SIGKILL of the process group."""
    proc.send_signal(signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(15)
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@contextmanager
def http_process(argv: list[str], port: int, label: str) -> Iterator[str]:
    """A process serving HTTP on `port` until the block ends (SIGTERM, then SIGKILL of its group)."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        try:
            wait_listening(port, proc, label, err=err)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            stop_group(proc)


@asynccontextmanager
async def stdio_client_for(argv: list[str], mode: str) -> AsyncIterator[Client]:
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
    async with Client(params, mode=mode) as client:  # type: ignore[arg-type]
        yield client


# --------------------------------------------------------------------------- measuring


@dataclass
class Sample:
    p50_ms: float
    p99_ms: float
    rate: float


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def measure(client: Client, calls: int, concurrency: int) -> Sample:
    """`calls` echo calls with `concurrency` workers, each call with its own arguments."""
    latencies: list[float] = []
    prefix = uuid.uuid4().hex[:8]
    counter = iter(range(calls))

    async def worker() -> None:
        for index in counter:
            text = f"{prefix}-{index} payload for call number {index}"
            started = time.perf_counter()
            result = await client.call_tool("echo", {"text": text})
            latencies.append(time.perf_counter() - started)
            content = result.content[0]
            if not isinstance(content, types.TextContent) or content.text != text:
                raise AssertionError(f"unexpected result {result}")

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)
    wall = time.perf_counter() - started
    return Sample(percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000, calls / wall)


async def warm(client: Client, concurrency: int) -> None:
    await client.list_tools()
    await measure(client, max(50, 4 * concurrency), concurrency)


@dataclass
class Cell:
    transport: str
    concurrency: int
    variant: str
    samples: list[Sample]

    @property
    def p50(self) -> float:
        return statistics.median(s.p50_ms for s in self.samples)

    @property
    def p99(self) -> float:
        return statistics.median(s.p99_ms for s in self.samples)

    @property
    def rate(self) -> float:
        return statistics.median(s.rate for s in self.samples)


async def run_cells(
    transport: str, clients: dict[str, Client], concurrency: int, calls: int, repeats: int
) -> list[Cell]:
    cells = {variant: Cell(transport, concurrency, variant, []) for variant in clients}
    for client in clients.values():
        await warm(client, concurrency)
    for _ in range(repeats):  # interleaved, so drift on a noisy machine hits every variant alike
        for variant, client in clients.items():
            cells[variant].samples.append(await measure(client, calls, concurrency))
    return list(cells.values())


def report(cells: list[Cell]) -> str:
    lines = [
        f"{'transport':9} {'c':>3} {'variant':18} {'p50 ms':>8} {'p99 ms':>8} {'calls/s':>8} "
        f"{'p50 x':>7} {'p99 x':>7} {'thr x':>7}",
    ]
    direct = {(c.transport, c.concurrency): c for c in cells if c.variant == "direct"}
    for cell in cells:
        base = direct[(cell.transport, cell.concurrency)]
        lines.append(
            f"{cell.transport:9} {cell.concurrency:>3} {cell.variant:18} {cell.p50:8.2f} {cell.p99:8.2f} "
            f"{cell.rate:8.0f} {cell.p50 / base.p50:7.2f} {cell.p99 / base.p99:7.2f} {cell.rate / base.rate:7.2f}"
        )
    return "\n".join(lines)


def verdicts(cells: list[Cell]) -> list[str]:
    by_key = {(c.transport, c.concurrency, c.variant): c for c in cells}
    out = []
    guards, base = by_key.get(("stdio", 1, "gateway+5 guards")), by_key.get(("stdio", 1, "direct"))
    if guards and base:
        ratio = guards.p50 / base.p50
        ok = "met" if ratio <= TARGET_STDIO_P50 else "MISSED"
        out.append(f"target stdio p50 with 5 guards <= {TARGET_STDIO_P50}x direct: {ratio:.2f}x ({ok})")
    base8 = by_key.get(("http", 8, "direct"))
    for variant in ("gateway", "gateway+5 guards"):
        cell = by_key.get(("http", 8, variant))
        if cell and base8:
            ratio = cell.rate / base8.rate
            ok = "met" if ratio >= TARGET_HTTP_C8_THROUGHPUT else "MISSED"
            out.append(
                f"target HTTP c=8 throughput >= {TARGET_HTTP_C8_THROUGHPUT}x direct ({variant}): {ratio:.2f}x ({ok})"
            )
    return out


async def main(args: argparse.Namespace) -> None:
    cells: list[Cell] = []
    with tempfile.TemporaryDirectory(prefix="gateway-bench-") as tmp:
        configs = write_configs(Path(tmp))
        variants = [v for v in VARIANTS if v in args.variants]
        if "stdio" in args.transports:
            async with AsyncExitStack() as stack:
                clients: dict[str, Client] = {}
                for variant in variants:
                    argv = echo_argv() if variant == "direct" else gateway_argv(configs[variant])
                    clients[variant] = await stack.enter_async_context(stdio_client_for(argv, args.mode))
                cells += await run_cells("stdio", clients, 1, args.calls, args.repeats)
                print(report(cells), flush=True)  # progress: a full run takes minutes
        if "http" in args.transports:
            with ExitStack() as processes:
                urls = {}
                for variant in variants:
                    port = free_port()
                    if variant == "direct":
                        argv = echo_argv("--http", str(port))
                    else:
                        argv = gateway_argv(configs[variant], "--http", f"127.0.0.1:{port}")
                    urls[variant] = processes.enter_context(http_process(argv, port, variant))
                for concurrency in args.concurrency:
                    async with AsyncExitStack() as stack:
                        clients = {
                            variant: await stack.enter_async_context(Client(url, mode=args.mode))  # type: ignore[arg-type]
                            for variant, url in urls.items()
                        }
                        fresh = await run_cells("http", clients, concurrency, args.calls, args.repeats)
                    cells += fresh
                    print("\n".join(report(fresh).splitlines()[1:]), flush=True)
    print()
    print(f"{args.calls} calls per cell, median of {args.repeats} repeats, mode {args.mode}")
    print(report(cells))
    for line in verdicts(cells):
        print(line)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="gateway overhead benchmark")
    parser.add_argument("--calls", type=int, default=400, help="timed calls per cell and repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--mode", choices=["2026-07-28", "legacy"], default="2026-07-28")
    parser.add_argument("--transports", nargs="+", default=["stdio", "http"], choices=["stdio", "http"])
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 8, 32])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--quick", action="store_true", help="100 calls, 2 repeats")
    parser.add_argument("--loop", choices=["auto", "uvloop", "asyncio"], default="auto", help="the gateways' --loop")
    args = parser.parse_args(argv)
    GATEWAY_OPTIONS[:] = ["--loop", args.loop]
    if "direct" not in args.variants:
        args.variants.insert(0, "direct")
    if args.quick:
        args.calls, args.repeats = 100, 2
    return args


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "serve-echo":
        anyio.run(serve_echo, int(sys.argv[3]) if len(sys.argv) == 4 and sys.argv[2] == "--http" else None)
    else:
        anyio.run(main, parse_args())
