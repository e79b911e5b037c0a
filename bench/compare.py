"""`tools/call` cost side by side: direct, our gateway, FastMCP's proxy and mcp-proxy, in one run.

    python bench/compare.py OUT_DIR                     # full run (about 15 minutes on 2 cores)
    python bench/compare.py OUT_DIR --quick             # fewer calls and repeats, for a smoke test
    python bench/compare.py OUT_DIR --variants direct gateway --topologies stdio   # a subset
    python bench/compare.py OUT_DIR --footprint         # also cold start, idle sessions, memory growth

Every cell drives the same echo upstream (`gateway_overhead.py serve-echo`, a low-level mcp `Server`)
with the same lean JSON-RPC client (`jsonrpc_load.py`; `--client mcp` uses mcp's `Client` instead):
distinct arguments per call, the session warmed at each concurrency before timing, then `--repeats`
rounds in which every variant runs `--calls` calls in turn (the order rotates each round), so machine
noise hits all variants alike. A cell reports the median over rounds of req/s, p50 and p99, and ratios
to direct as the median of the per-round ratios.

Topologies (the same for every proxy; "direct" is the client talking to the echo server itself over
the client's transport):
  stdio       client -stdio-> proxy -stdio-> echo         (mcp-proxy cannot bridge stdio to stdio)
  http        client -HTTP->  proxy -stdio-> echo         (direct: client -HTTP-> echo)
  stdio>http  client -stdio-> proxy -HTTP->  echo (HTTP)  (direct: client -stdio-> echo)
Variants: our gateway with no guards, with the five guards secrets, pii, tool-policy, schema-guard and
size-limit in-process, and with the same five served out of process (`mcp-interceptors serve` over
stdio as the gateway's interceptor server); FastMCP's proxy with middleware doing the same work
(`peers/fastmcp_proxy.py`); mcp-proxy as a plain transport bridge. FastMCP and mcp-proxy need other
`mcp` versions, so each is pip-installed (pinned) into its own venv, `bench/.venv-<name>/`.

OUT_DIR receives compare.csv (one row per cell), samples.csv (one row per round), inprocess.csv (the
five-guard chain on 10 KB payloads against one direct in-memory `tools/call`), environment.txt, and
throughput.png / latency.png when matplotlib is installed (`pip install -e '.[bench]'`).
The run ends with one line per target of issue 32 (met or MISSED); `--footprint` adds cold start, idle
sessions and the memory-growth check (`footprint.py`).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
from gateway_overhead import GUARDS, Sample, echo_argv, free_port, gateway_argv, http_process
from jsonrpc_load import Session, http_session, measure, median_sample, stdio_session, warm

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FASTMCP_PROXY = HERE / "peers" / "fastmcp_proxy.py"
PEERS = {"fastmcp": "fastmcp==4.1.6", "mcp-proxy": "mcp-proxy==0.13.0"}
TOOL = "echo"

DIRECT = "direct"
GATEWAY = "gateway"
GUARDED = "gateway+5 guards"
SERVED = "gateway+5 guards served"
FASTMCP = "fastmcp+middleware"
MCP_PROXY = "mcp-proxy"
VARIANTS = (DIRECT, GATEWAY, GUARDED, SERVED, FASTMCP, MCP_PROXY)
NEEDS_PEER = {FASTMCP: "fastmcp", MCP_PROXY: "mcp-proxy"}

CSV_COLUMNS = [
    *("topology", "client_transport", "upstream_transport", "concurrency", "variant", "calls", "rounds"),
    *("req_s", "p50_ms", "p99_ms", "throughput_x_direct", "p50_x_direct", "p99_x_direct"),
]
#: Issue 32's targets, each a ratio measured side by side in one run.
TARGET_STDIO_P50 = 1.25  # stdio c=1, gateway+5 guards p50 ÷ direct (median of rounds)
TARGET_STDIO_P50_SPREAD = 1.35  # ... and its worst round
TARGET_HTTP_C8_THROUGHPUT = 0.85  # HTTP c=8, gateway+5 guards req/s ÷ direct
TARGET_HTTP_C8_P99 = 1.5  # ... p99 ÷ direct
TARGET_HTTP_C8_OVER_FASTMCP = 2.0  # ... req/s ÷ FastMCP's proxy with the same middleware
TARGET_CHAIN_SHARE = 0.20  # in process: five guards on 10 KB ÷ one direct in-memory tools/call


@dataclass(frozen=True)
class Topology:
    name: str
    client: str  # transport between the client and the proxy (and of direct)
    upstream: str  # transport between the proxy and the echo server
    variants: tuple[str, ...]


TOPOLOGIES = (
    Topology("stdio", "stdio", "stdio", (DIRECT, GATEWAY, GUARDED, SERVED, FASTMCP)),
    Topology("http", "http", "stdio", (DIRECT, GATEWAY, GUARDED, SERVED, FASTMCP, MCP_PROXY)),
    Topology("stdio>http", "stdio", "http", (DIRECT, GATEWAY, GUARDED, FASTMCP, MCP_PROXY)),
)


# --------------------------------------------------------------------------- peer venvs


def venv_python(peer: str) -> Path:
    return HERE / f".venv-{peer}" / "bin" / "python"


def installed_version(python: Path, distribution: str) -> str | None:
    if not python.exists():
        return None
    code = f"import importlib.metadata as m; print(m.version({distribution!r}))"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def ensure_peer(peer: str) -> Path:
    """The peer's venv, created and pip-installed from PyPI on first use (pinned in PEERS)."""
    requirement = PEERS[peer]
    distribution, version = requirement.split("==")
    python = venv_python(peer)
    if installed_version(python, distribution) != version:
        print(f"installing {requirement} into {python.parent.parent} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(python.parent.parent)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", requirement], check=True)
    return python


def versions(peers: Sequence[str]) -> list[str]:
    lines = [
        f"python {platform.python_version()} ({sys.executable})",
        f"mcp {installed_version(Path(sys.executable), 'mcp')} (client, echo upstream, our gateway)",
        f"mcp-interceptors {_git_revision()}",
    ]
    for peer in peers:
        python = venv_python(peer)
        lines.append(
            f"{PEERS[peer].split('==')[0]} {installed_version(python, PEERS[peer].split('==')[0])} "
            f"with mcp {installed_version(python, 'mcp')} ({python.parent.parent.relative_to(ROOT)})"
        )
    return lines


def _git_revision() -> str:
    done = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown revision"


# --------------------------------------------------------------------------- targets


def gateway_config(folder: Path, variant: str, upstream_url: str | None) -> Path:
    upstream: dict[str, Any] = (
        {"url": upstream_url, "prefix": ""}
        if upstream_url
        else {"command": sys.executable, "args": echo_argv()[1:], "prefix": ""}
    )
    config: dict[str, Any] = {"upstreams": {"echo": upstream}}
    if variant == GUARDED:
        config["interceptors"] = {"guards": [{"name": guard} for guard in GUARDS]}
    elif variant == SERVED:
        serve = ["-m", "mcp_interceptors", "serve", *[arg for guard in GUARDS for arg in ("--guard", guard)]]
        config["interceptors"] = {"servers": [{"name": "guards", "command": sys.executable, "args": serve}]}
    path = folder / f"{variant.replace(' ', '-').replace('+', '-')}-{'http' if upstream_url else 'stdio'}.json"
    path.write_text(json.dumps(config))
    return path


def proxy_argv(variant: str, folder: Path, port: int | None, upstream_url: str | None) -> list[str]:
    """The command serving `variant` on stdio (port None) or HTTP, in front of the echo upstream."""
    if variant == DIRECT:
        return echo_argv() if port is None else echo_argv("--http", str(port))
    http = [] if port is None else ["--http", f"127.0.0.1:{port}"]
    if variant in (GATEWAY, GUARDED, SERVED):
        return gateway_argv(gateway_config(folder, variant, upstream_url), *http)
    if variant == FASTMCP:
        http = [] if port is None else ["--http", str(port)]
        upstream = ["--upstream-url", upstream_url] if upstream_url else ["--", *echo_argv()]
        return [str(venv_python("fastmcp")), str(FASTMCP_PROXY), *http, *upstream]
    proxy = str(venv_python("mcp-proxy").parent / "mcp-proxy")
    quiet = ["--log-level", "WARNING"]
    if upstream_url:  # stdio in front, Streamable HTTP behind
        return [proxy, *quiet, "--transport", "streamablehttp", upstream_url]
    assert port is not None, "mcp-proxy cannot serve stdio in front of a stdio server"
    return [proxy, *quiet, "--port", str(port), "--host", "127.0.0.1", "--pass-environment", "--", *echo_argv()]


class McpClientSession(Session):
    """mcp's own `Client` (handshake era) behind the driver's interface, for `--client mcp`."""

    def __init__(self, client: Any) -> None:
        self.client = client

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method != "tools/list":
            raise ValueError(f"McpClientSession only lists tools and calls echo, not {method}")
        result = await self.client.list_tools()
        return {"tools": [tool.name for tool in result.tools]}

    async def call_echo(self, tool: str, text: str) -> None:
        result = await self.client.call_tool(tool, {"text": text})
        if result.is_error or getattr(result.content[0], "text", None) != text:
            raise RuntimeError(f"unexpected tools/call result: {result}")


@asynccontextmanager
async def open_session(kind: str, argv_or_url: list[str] | str, errlog: IO[bytes]) -> AsyncIterator[Session]:
    if kind == "raw":
        if isinstance(argv_or_url, str):
            async with http_session(argv_or_url) as session:
                yield session
        else:
            async with stdio_session(argv_or_url, errlog) as stdio:
                yield stdio
        return
    from mcp import Client, StdioServerParameters

    target: Any = argv_or_url
    if not isinstance(argv_or_url, str):
        target = StdioServerParameters(command=argv_or_url[0], args=argv_or_url[1:], env=dict(os.environ))
    async with Client(target, mode="legacy") as client:
        yield McpClientSession(client)


# --------------------------------------------------------------------------- cells


@dataclass
class Cell:
    topology: str
    concurrency: int
    variant: str
    samples: list[Sample] = field(default_factory=list)
    ratios: list[tuple[float, float, float]] = field(default_factory=list)  # (throughput, p50, p99) per round

    @property
    def median(self) -> Sample:
        return median_sample(self.samples)

    def ratio(self, index: int) -> float:
        return statistics.median(r[index] for r in self.ratios) if self.ratios else float("nan")


@contextmanager
def servers(topology: Topology, variants: Sequence[str], folder: Path) -> Iterator[dict[str, list[str] | str]]:
    """Start what the topology serves over HTTP; yield per variant the stdio command or the HTTP URL."""
    with ExitStack() as stack:
        upstream_url = None
        if topology.upstream == "http":
            port = free_port()
            upstream_url = stack.enter_context(http_process(echo_argv("--http", str(port)), port, "echo upstream"))
        targets: dict[str, list[str] | str] = {}
        for variant in variants:
            behind = None if variant == DIRECT else upstream_url
            if topology.client == "stdio":
                targets[variant] = proxy_argv(variant, folder, None, behind)
            else:
                port = free_port()
                argv = proxy_argv(variant, folder, port, behind)
                targets[variant] = stack.enter_context(http_process(argv, port, variant))
        yield targets


async def run_topology(
    topology: Topology, variants: Sequence[str], args: argparse.Namespace, folder: Path, errlog: IO[bytes]
) -> list[Cell]:
    cells: list[Cell] = []
    with servers(topology, variants, folder) as targets:
        async with AsyncExitStack() as stack:
            sessions = {
                variant: await stack.enter_async_context(open_session(args.client, target, errlog))
                for variant, target in targets.items()
            }
            for concurrency in args.concurrency:
                fresh = {v: Cell(topology.name, concurrency, v) for v in variants}
                for session in sessions.values():
                    await warm(session, TOOL, concurrency, args.text_bytes)
                for round_index in range(args.repeats):
                    shift = round_index % len(variants)
                    for variant in [*variants[shift:], *variants[:shift]]:
                        # Untimed: reopens keep-alive connections a server closed while other variants ran.
                        await measure(sessions[variant], TOOL, concurrency, concurrency, args.text_bytes)
                        sample = await measure(sessions[variant], TOOL, args.calls, concurrency, args.text_bytes)
                        fresh[variant].samples.append(sample)
                    base = fresh[DIRECT].samples[-1]
                    for cell in fresh.values():
                        s = cell.samples[-1]
                        cell.ratios.append((s.rate / base.rate, s.p50_ms / base.p50_ms, s.p99_ms / base.p99_ms))
                cells += fresh.values()
                print(table(list(fresh.values()), header=not cells[: -len(fresh)]), flush=True)
    return cells


def table(cells: Sequence[Cell], header: bool = True) -> str:
    lines = []
    if header:
        lines.append(
            f"{'topology':10} {'c':>3} {'variant':24} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
            f"{'thr x':>6} {'p50 x':>6} {'p99 x':>6}"
        )
    for cell in cells:
        m = cell.median
        lines.append(
            f"{cell.topology:10} {cell.concurrency:>3} {cell.variant:24} {m.rate:8.0f} {m.p50_ms:8.2f} "
            f"{m.p99_ms:8.2f} {cell.ratio(0):6.2f} {cell.ratio(1):6.2f} {cell.ratio(2):6.2f}"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- in-process chain


async def inprocess_chain(quick: bool) -> list[tuple[str, float, float]]:
    """The five guards as an in-process chain on 10 KB payloads, against one direct in-memory call."""
    from chain_overhead import big_payload
    from chain_overhead import echo_server as memory_echo
    from chain_overhead import measure as measure_ratio
    from guard_latency import payloads
    from mcp import Client

    from mcp_interceptors import Chain, guards

    calls, repeats, warmup = (60, 3, 20) if quick else (300, 9, 100)
    tools_list = {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]}
    chain = Chain(role="server")
    for name in GUARDS:
        chain.add_local(guards.load(name))
    await chain.execute("tools/list", "response", tools_list)  # schema-guard learns the schema
    cases = {"10 KB rows (chain_overhead.big_payload)": ("tools/call", "request", big_payload())}
    cases.update({f"10 KB {label}": case for label, case in payloads().items()})
    rows = []
    async with Client(memory_echo()) as client:

        async def direct() -> Any:
            return await client.call_tool("echo", {"text": "hello world"})

        base, _ = await measure_ratio(direct, direct, calls, repeats, warmup)
        rows.append(("direct in-memory tools/call", base, 1.0))
        for label, (event, phase, payload) in cases.items():

            async def run(event: str = event, phase: Any = phase, payload: Any = payload) -> Any:
                return await chain.execute(event, phase, payload)

            value, ratio = await measure_ratio(direct, run, calls, repeats, warmup)
            rows.append((f"chain of 5 guards, {label}", value, ratio))
    return rows


# --------------------------------------------------------------------------- output


def verdicts(cells: Sequence[Cell], chain_rows: Sequence[tuple[str, float, float]]) -> list[str]:
    by_key = {(c.topology, c.concurrency, c.variant): c for c in cells}
    out = []
    guarded = by_key.get(("stdio", 1, GUARDED))
    if guarded:
        ratio = guarded.ratio(1)
        ok = "met" if ratio <= TARGET_STDIO_P50 else "MISSED"
        out.append(f"stdio c=1: gateway+5 guards p50 {ratio:.2f}x direct (target <= {TARGET_STDIO_P50}x): {ok}")
        worst = max(r[1] for r in guarded.ratios)
        ok = "met" if worst <= TARGET_STDIO_P50_SPREAD else "MISSED"
        out.append(
            f"stdio c=1: gateway+5 guards p50, worst round {worst:.2f}x direct "
            f"(target <= {TARGET_STDIO_P50_SPREAD}x): {ok}"
        )
    guarded8, fastmcp8 = by_key.get(("http", 8, GUARDED)), by_key.get(("http", 8, FASTMCP))
    if guarded8:
        ratio = guarded8.ratio(0)
        ok = "met" if ratio >= TARGET_HTTP_C8_THROUGHPUT else "MISSED"
        out.append(
            f"HTTP c=8: gateway+5 guards throughput {ratio:.2f}x direct (target >= {TARGET_HTTP_C8_THROUGHPUT}x): {ok}"
        )
        ratio = guarded8.ratio(2)
        ok = "met" if ratio <= TARGET_HTTP_C8_P99 else "MISSED"
        out.append(f"HTTP c=8: gateway+5 guards p99 {ratio:.2f}x direct (target <= {TARGET_HTTP_C8_P99}x): {ok}")
        if fastmcp8:
            over = guarded8.ratio(0) / fastmcp8.ratio(0)
            ok = "met" if over >= TARGET_HTTP_C8_OVER_FASTMCP else "MISSED"
            out.append(
                f"HTTP c=8: gateway+5 guards throughput {over:.2f}x FastMCP proxy with middleware "
                f"(target >= {TARGET_HTTP_C8_OVER_FASTMCP}x): {ok}"
            )
    for label, _, ratio in chain_rows[1:]:
        ok = "met" if ratio <= TARGET_CHAIN_SHARE else "MISSED"
        out.append(f"in-process {label}: {ratio:.0%} of a direct call (target <= {TARGET_CHAIN_SHARE:.0%}): {ok}")
    return out


def write_csv(out: Path, cells: Sequence[Cell], args: argparse.Namespace) -> None:
    topologies = {t.name: t for t in TOPOLOGIES}
    with (out / "compare.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        for cell in cells:
            t, m = topologies[cell.topology], cell.median
            writer.writerow(
                [cell.topology, t.client, t.upstream, cell.concurrency, cell.variant, args.calls, args.repeats]
                + [f"{m.rate:.1f}", f"{m.p50_ms:.3f}", f"{m.p99_ms:.3f}"]
                + [f"{cell.ratio(i):.3f}" for i in range(3)]
            )
    with (out / "samples.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["topology", "concurrency", "variant", "round", "req_s", "p50_ms", "p99_ms"])
        for cell in cells:
            for index, s in enumerate(cell.samples):
                row = [cell.topology, cell.concurrency, cell.variant, index, f"{s.rate:.1f}", f"{s.p50_ms:.3f}"]
                writer.writerow([*row, f"{s.p99_ms:.3f}"])


def write_markdown(
    out: Path, cells: Sequence[Cell], chain_rows: Sequence[tuple[str, float, float]], targets: Sequence[str]
) -> None:
    """compare.md: the tables as Markdown, for docs/performance.md."""
    lines = [
        "| topology | c | variant | req/s | p50 ms | p99 ms | req/s ÷ direct | p50 ÷ direct | p99 ÷ direct |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for cell in cells:
        m = cell.median
        name = f"**{cell.variant}**" if cell.variant == GUARDED else cell.variant
        lines.append(
            f"| {cell.topology} | {cell.concurrency} | {name} | {m.rate:.0f} | {m.p50_ms:.2f} | {m.p99_ms:.2f} "
            f"| {cell.ratio(0):.2f} | {cell.ratio(1):.2f} | {cell.ratio(2):.2f} |"
        )
    if chain_rows:
        lines += ["", "| in-process case | µs per call | share of a direct in-memory call |", "|---|---:|---:|"]
        lines += [f"| {label} | {value:.1f} | {ratio:.0%} |" for label, value, ratio in chain_rows]
    if targets:
        lines += ["", "Targets:", "", *(f"- {line}" for line in targets)]
    (out / "compare.md").write_text("\n".join(lines) + "\n")


def write_inprocess_csv(out: Path, rows: Sequence[tuple[str, float, float]]) -> None:
    with (out / "inprocess.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["case", "us_per_call", "x_direct_in_memory_call"])
        for label, value, ratio in rows:
            writer.writerow([label, f"{value:.1f}", f"{ratio:.3f}"])


def plot(out: Path, cells: Sequence[Cell]) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no plots written")
        return []
    names = [t.name for t in TOPOLOGIES if any(c.topology == t.name for c in cells)]
    variants = [v for v in VARIANTS if any(c.variant == v for c in cells)]
    colours = dict(zip(VARIANTS, ["#555555", "#1f77b4", "#2ca02c", "#98df8a", "#d62728", "#ff7f0e"], strict=True))
    written = []
    for metric, ylabel, filename in (
        ("rate", "tools/call per second (higher is better)", "throughput.png"),
        ("p50", "latency, ms: bar p50, tick p99 (lower is better)", "latency.png"),
    ):
        fig, axes = plt.subplots(1, len(names), figsize=(5.2 * len(names), 4.4), squeeze=False)
        for ax, name in zip(axes[0], names, strict=True):
            mine = [c for c in cells if c.topology == name]
            levels = sorted({c.concurrency for c in mine})
            width = 0.8 / len(variants)
            for i, variant in enumerate(variants):
                xs, ys, p99 = [], [], []
                for j, level in enumerate(levels):
                    cell = next((c for c in mine if c.variant == variant and c.concurrency == level), None)
                    if cell is None:
                        continue
                    m = cell.median
                    xs.append(j + (i - (len(variants) - 1) / 2) * width)
                    ys.append(m.rate if metric == "rate" else m.p50_ms)
                    p99.append(m.p99_ms)
                if not xs:
                    continue
                ax.bar(xs, ys, width, label=variant, color=colours[variant])
                if metric == "p50":
                    ax.scatter(xs, p99, marker="_", color="black", s=60, zorder=3)
            ax.set_xticks(range(len(levels)), [f"c={level}" for level in levels])
            ax.set_title(name)
            if metric == "p50":
                ax.set_yscale("log")
            ax.grid(axis="y", alpha=0.3)
        axes[0][0].set_ylabel(ylabel)
        legend: dict[str, Any] = {}
        for ax in axes[0]:
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                legend.setdefault(label, handle)
        ordered = [v for v in variants if v in legend]
        fig.legend([legend[v] for v in ordered], ordered, loc="lower center", ncol=len(ordered), frameon=False)
        fig.tight_layout(rect=(0, 0.08, 1, 1))
        path = out / filename
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def machine() -> str:
    load = os.getloadavg()
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{os.cpu_count()} cores, {mem:.0f} GiB, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"


# --------------------------------------------------------------------------- main


def main(args: argparse.Namespace) -> None:
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    variants = [v for v in VARIANTS if v in args.variants]
    peers = sorted({NEEDS_PEER[v] for v in variants if v in NEEDS_PEER})
    for peer in list(peers):
        try:
            ensure_peer(peer)
        except (subprocess.CalledProcessError, OSError) as error:
            print(f"cannot install {PEERS[peer]} ({error}); skipping it", file=sys.stderr)
            peers.remove(peer)
            variants = [v for v in variants if NEEDS_PEER.get(v) != peer]
    environment = [time.strftime("%Y-%m-%d %H:%M:%S %Z"), "before: " + machine(), *versions(peers)]
    environment.append(
        f"client {args.client}; {args.calls} calls per cell and round, {args.repeats} rounds, "
        f"concurrency {' '.join(map(str, args.concurrency))}, echo text {args.text_bytes or 'short'}"
    )
    print("\n".join(environment), flush=True)
    cells, chain_rows = anyio.run(measure_all, args, variants)
    environment.append("after: " + machine())
    print()
    print(table(cells))
    if chain_rows:
        print()
        for label, value, ratio in chain_rows:
            print(f"{label:58} {value:9.1f} us {ratio:7.1%}")
    lines = verdicts(cells, chain_rows)
    if args.footprint:
        from footprint import measure_footprint
        from footprint import verdicts as footprint_verdicts

        quick = {"runs": 2, "sessions": 100, "calls": 1000} if args.quick else {}
        lines += footprint_verdicts(measure_footprint(["cold-start", "sessions", "leak"], **quick))
    print()
    print("\n".join(lines))
    write_csv(out, cells, args)
    write_markdown(out, cells, chain_rows, lines)
    if chain_rows:
        write_inprocess_csv(out, chain_rows)
    (out / "environment.txt").write_text("\n".join([*environment, *lines]) + "\n")
    for path in plot(out, cells):
        print(f"wrote {path}")
    print(f"wrote {out / 'compare.csv'}, {out / 'samples.csv'}, {out / 'environment.txt'}")


async def measure_all(
    args: argparse.Namespace, variants: list[str]
) -> tuple[list[Cell], list[tuple[str, float, float]]]:
    cells: list[Cell] = []
    with tempfile.TemporaryDirectory(prefix="compare-") as tmp, tempfile.TemporaryFile() as errlog:
        for topology in TOPOLOGIES:
            if topology.name not in args.topologies:
                continue
            chosen = [v for v in topology.variants if v in variants]
            try:
                cells += await run_topology(topology, chosen, args, Path(tmp), errlog)
            except Exception:
                errlog.seek(0)
                sys.stderr.write(errlog.read().decode(errors="replace")[-3000:])
                raise
    chain_rows = [] if args.no_inprocess else await inprocess_chain(args.quick)
    return cells, chain_rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", help="folder for the CSV files, plots and environment.txt")
    parser.add_argument("--quick", action="store_true", help="100 calls per round, 2 rounds")
    parser.add_argument("--calls", type=int, help="timed calls per cell and round (default 400)")
    parser.add_argument("--repeats", type=int, help="rounds per cell, median reported (default 5)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--topologies", nargs="+", default=[t.name for t in TOPOLOGIES])
    parser.add_argument("--client", choices=["raw", "mcp"], default="raw", help="lean driver or mcp's Client")
    parser.add_argument("--text-bytes", type=int, default=0, help="pad each echo argument to this many chars")
    parser.add_argument("--no-inprocess", action="store_true", help="skip the in-process chain measurement")
    parser.add_argument(
        "--footprint", action="store_true", help="also cold start, idle sessions and the leak check (footprint.py)"
    )
    args = parser.parse_args(argv)
    if DIRECT not in args.variants:
        args.variants.insert(0, DIRECT)
    quick = args.quick
    args.calls = args.calls or (100 if quick else 400)
    args.repeats = args.repeats or (2 if quick else 5)
    return args


if __name__ == "__main__":
    main(parse_args())
