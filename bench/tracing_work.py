"""The tracing work of one gateway `tools/call`, in one process: CPU µs per call with tracing on and off.

python bench/tracing_work.py            # 1000 calls a repeat, 7 interleaved repeats
python bench/tracing_work.py --quick    # 100 calls, 2 repeats, for a smoke test

A call is what the gateway's hooks do around it, without the transports: the call's SERVER span
(`Telemetry.start_call`), the request chain through the five built-in guards (`Chain`, local hosts), the
upstream request's CLIENT span, the response chain and the call span's end, so thirteen spans. `tracing on`
is the gateway's own `Telemetry` (`telemetry: {exporter: none}`: the SDK's BatchSpanProcessor, spans dropped
at export); `tracing off` runs the same chains untraced. Each repeat is this process's CPU time
(`time.process_time`, the export thread included) per call; repeats alternate between the two and the
figures are medians. Steadier than `tracing_overhead.py`'s whole gateways on a shared machine, it prices the
tracing code alone (no HTTP, no event loop switches): use it to compare two versions of that code.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import anyio

from mcp_interceptors import Chain, guards
from mcp_interceptors.gateway.config import TelemetryConfig
from mcp_interceptors.gateway.telemetry import Telemetry, telemetry_for
from mcp_interceptors.invoker.tracing import ChainSpans

GUARDS = ["secrets", "pii", "tool-policy", "schema-guard", "size-limit"]


def guarded_chain(tracing: ChainSpans | None) -> Chain:
    chain = Chain(role="server", tracer_provider=False)
    for name in GUARDS:
        chain.add_local(guards.load(name))
    chain.tracing = tracing
    return chain


async def one_call(telemetry: Telemetry | None, chain: Chain, index: int) -> None:
    params: dict[str, Any] = {"name": "echo", "arguments": {"text": f"hello {index}"}}
    reply = {"method": "tools/call", "params": params, "result": {"content": [{"type": "text", "text": "hi"}]}}
    if telemetry is None:
        await chain.execute("tools/call", "request", {"method": "tools/call", "params": params})
        await chain.execute("tools/call", "response", reply)
        return
    span = telemetry.start_call("tools/call", params, "session-1", index)
    await chain.execute("tools/call", "request", {"method": "tools/call", "params": params})
    sent, token, _ = telemetry.start_upstream("tools/call", params, "echo", "upstream", None)
    telemetry.end_upstream((sent, token), None)
    await chain.execute("tools/call", "response", reply)
    span.end("ok", "echo")


async def cpu_per_call_us(telemetry: Telemetry | None, chain: Chain, calls: int) -> float:
    started = time.process_time()
    for index in range(calls):
        await one_call(telemetry, chain, index)
    return (time.process_time() - started) / calls * 1e6


async def main(args: argparse.Namespace) -> None:
    # A queue long enough that a repeat never fills it: a full queue logs a warning a span.
    telemetry = telemetry_for(TelemetryConfig(exporter="none", max_queue_size=1 << 16), environ={})
    assert telemetry is not None
    traced, untraced = guarded_chain(telemetry.chain_spans), guarded_chain(None)
    await cpu_per_call_us(telemetry, traced, args.calls // 2)  # warm: plans, layouts, caches
    await cpu_per_call_us(None, untraced, args.calls // 2)
    on, off = [], []
    for _ in range(args.repeats):
        off.append(await cpu_per_call_us(None, untraced, args.calls))
        on.append(await cpu_per_call_us(telemetry, traced, args.calls))
    telemetry.close()
    work = [a - b for a, b in zip(on, off, strict=True)]
    print(f"{args.calls} calls a repeat, median of {args.repeats} interleaved repeats, five guards, 13 spans a call")
    print(f"tracing off {statistics.median(off):.0f} µs, on {statistics.median(on):.0f} µs of CPU per call")
    print(f"tracing work {statistics.median(work):.0f} µs per call (repeats {min(work):.0f}-{max(work):.0f})")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="100 calls, 2 repeats")
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.repeats = 100, 2
    return args


if __name__ == "__main__":
    anyio.run(main, parse_args())
