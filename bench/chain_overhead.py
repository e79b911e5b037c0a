"""Chain overhead against one direct in-memory `tools/call`.

python bench/chain_overhead.py            # full run (about a minute on 2 cores)
python bench/chain_overhead.py --quick    # fewer calls, for a smoke test

Prints µs per call (median over repeats, after a warm-up) and the ratio to a direct in-memory
`tools/call` round trip (`MCPServer` with an `async def echo` tool, `Client(server)`), for:
the in-process chain (`Chain.add_local`) with 0/1/5/20 interceptors, the same chains through an
in-memory MCP host (`Chain.add_server` on `Client(host.create_server())`), and the 5-interceptor
chain on a 10 KB payload. Target: 5 in-process interceptors cost <= 20 % of one direct call.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp import Client
from mcp.server import MCPServer

from mcp_interceptors import Chain, InterceptorHost, Invocation

Call = Callable[[], Awaitable[Any]]
SIZES = (0, 1, 5, 20)
TARGET = 0.20
SMALL = {"method": "tools/call", "params": {"name": "echo", "arguments": {"text": "hello world"}}}


def big_payload(size: int = 10 * 1024) -> dict[str, Any]:
    rows = [{"id": i, "name": f"row-{i}", "note": "lorem ipsum dolor sit amet"} for i in range(size // 50)]
    payload = {"method": "tools/call", "params": {"name": "echo", "arguments": {"rows": rows}}}
    return payload


def build_host(count: int) -> InterceptorHost:
    """`count` realistic small interceptors: validators checking a key, mutators returning a modified copy."""
    host = InterceptorHost(f"bench-{count}", copy_payloads=True)
    for index in range(count):
        if index % 2 == 0:

            async def check(inv: Invocation) -> bool:
                params = inv.payload.get("params") or {}
                return params.get("name") != "forbidden"

            host.validator(f"validator-{index:02d}", events=["tools/call"], phase="request")(check)
        else:

            async def tag(inv: Invocation, index: int = index) -> Any:
                params = inv.payload["params"]
                return {**inv.payload, "params": {**params, "_meta": {**params.get("_meta", {}), f"m{index}": 1}}}

            host.mutator(f"mutator-{index:02d}", events=["tools/call"], phase="request", priority=index)(tag)
    return host


async def timed(fn: Call, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        await fn()
    return (time.perf_counter() - started) / calls * 1e6


async def measure(direct: Call, case: Call, calls: int, repeats: int, warmup: int) -> tuple[float, float]:
    """Median µs per call of `case`, and the median of its per-repeat ratio to `direct`.

    Each repeat times a batch of direct calls right before the batch of `case` calls, so a ratio
    compares two runs under the same machine load (this machine is shared and noisy).
    """
    for _ in range(warmup):
        await case()
    values, ratios = [], []
    gc.collect()
    for _ in range(repeats):
        baseline = await timed(direct, calls)
        value = await timed(case, calls)
        values.append(value)
        ratios.append(value / baseline)
    return statistics.median(values), statistics.median(ratios)


def echo_server() -> MCPServer[Any]:
    server = MCPServer("echo")

    @server.tool()
    async def echo(text: str) -> str:
        return text

    return server


async def main(quick: bool) -> None:
    calls, repeats, warmup = (100, 3, 50) if quick else (400, 9, 200)
    remote_calls = max(25, calls // 8)
    rows: list[tuple[str, float, float]] = []
    big = big_payload()

    async with Client(echo_server()) as client:

        async def direct() -> Any:
            return await client.call_tool("echo", {"text": "hello world"})

        value, _ = await measure(direct, direct, calls, repeats, warmup)
        rows.append(("direct in-memory tools/call (Client(MCPServer), async echo)", value, 1.0))

        for count in SIZES:
            chain = Chain(role="client")
            chain.add_local(build_host(count))
            value, ratio = await measure(direct, _exec(chain, SMALL), calls, repeats, warmup)
            rows.append((f"in-process chain, {count:2d} interceptors", value, ratio))

        for count in SIZES:
            async with Client(build_host(count).create_server()) as host_client:
                chain = Chain(role="client")
                await chain.add_server(host_client)
                value, ratio = await measure(direct, _exec(chain, SMALL), remote_calls, repeats, warmup // 4)
            rows.append((f"in-memory MCP host chain, {count:2d} interceptors", value, ratio))

        local = Chain(role="client")
        local.add_local(build_host(5))
        value, ratio = await measure(direct, _exec(local, big), calls, repeats, warmup)
        rows.append(("in-process chain,  5 interceptors, 10 KB payload", value, ratio))
        async with Client(build_host(5).create_server()) as host_client:
            remote = Chain(role="client")
            await remote.add_server(host_client)
            value, ratio = await measure(direct, _exec(remote, big), remote_calls, repeats, warmup // 4)
        rows.append(("in-memory MCP host chain,  5 interceptors, 10 KB payload", value, ratio))

    width = max(len(label) for label, _, _ in rows)
    print(f"{'case':<{width}}  {'µs/call':>10}  {'x direct':>9}")
    for label, value, ratio in rows:
        print(f"{label:<{width}}  {value:>10.1f}  {ratio:>9.3f}")
    five = next(ratio for label, _, ratio in rows if label == "in-process chain,  5 interceptors")
    verdict = "MET" if five <= TARGET else "MISSED"
    print(f"target: 5 in-process interceptors <= {TARGET:.0%} of a direct call: {five:.1%} ({verdict})")


def _exec(chain: Chain, payload: dict[str, Any]) -> Call:
    async def run() -> Any:
        result = await chain.execute("tools/call", "request", payload)
        assert result.allowed, result.aborted_at
        return result

    return run


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls (smoke test)")
    anyio.run(main, parser.parse_args().quick)
