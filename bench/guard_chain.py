"""The five guards as an in-process chain on 10 KB payloads, in thread CPU time, against one direct in-memory call.

python bench/guard_chain.py             # 5 repeats of 300 calls per cell
python bench/guard_chain.py --quick     # a smoke test

For each payload shape (compare.py's: rows, a 10 KB argument, a 10 KB text result, 120 records) the chain runs
on the same payload every call and on 64 variants in turn (a distinct object and text each, as new traffic is).
Each repeat times direct calls, then the chain: the ratio compares two batches under the same machine load.
Issue 32 target 3: the chain costs <= 20 % of a direct call.
"""

from __future__ import annotations

import argparse
import copy
import gc
import statistics
import time
from typing import Any

import anyio
from chain_overhead import big_payload, echo_server
from guard_latency import payloads
from mcp import Client

from mcp_interceptors import Chain, guards

GUARDS = ["secrets", "pii", "tool-policy", "schema-guard", "size-limit"]
VARIANTS = 64


def variant(payload: Any, index: int) -> Any:
    """A copy of `payload` whose first string longer than 20 characters ends in ` v{index}`."""
    copied = copy.deepcopy(payload)
    stack = [copied]
    while stack:
        node = stack.pop()
        for key, value in list(node.items() if isinstance(node, dict) else enumerate(node)):
            if isinstance(value, str) and len(value) > 20:
                node[key] = f"{value} v{index}"
                return copied
            if isinstance(value, dict | list):
                stack.append(value)
    return copied


async def main(calls: int, repeats: int) -> None:
    chain = Chain(role="server")
    for name in GUARDS:
        chain.add_local(guards.load(name))
    await chain.execute("tools/list", "response", {"tools": [{"name": "echo", "inputSchema": {"type": "object"}}]})
    shapes = {"rows": ("tools/call", "request", big_payload())}
    shapes.update(zip(["prose (argument)", "text (result)", "records"], payloads().values(), strict=True))
    clock = time.thread_time
    print(f"{'payload':<18} {'calls':<9} {'µs/call':>8} {'x direct':>9}")
    async with Client(echo_server()) as client:

        async def direct() -> Any:
            return await client.call_tool("echo", {"text": "hello world"})

        for _ in range(50):
            await direct()
        for label, (event, phase, payload) in shapes.items():
            for mode, pool in (("same", [payload]), ("distinct", [variant(payload, i) for i in range(VARIANTS)])):
                for each in pool:
                    assert (await chain.execute(event, phase, each)).allowed
                values, ratios = [], []
                for _ in range(repeats):
                    gc.collect()
                    started = clock()
                    for _ in range(calls):
                        await direct()
                    base = (clock() - started) / calls
                    started = clock()
                    for i in range(calls):
                        await chain.execute(event, phase, pool[i % len(pool)])
                    value = (clock() - started) / calls
                    values.append(value * 1e6)
                    ratios.append(value / base)
                print(f"{label:<18} {mode:<9} {statistics.median(values):>8.1f} {statistics.median(ratios):>9.1%}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls (smoke test)")
    args = parser.parse_args()
    anyio.run(main, *((60, 2) if args.quick else (300, 5)))
