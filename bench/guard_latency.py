"""Per-guard latency on ~10 KB payloads, in-process, and the five-guard chain the gateway bench uses.

    python bench/guard_latency.py [--rounds N]

Payloads: a `tools/call` request with one 10 KB prose argument, its result (10 KB of text content), and a
10 KB structured result (120 small records). Each guard is timed through `InterceptorHost.invoke` (what
`Chain.add_local` calls), so host overhead (result models, stamping) is included; the chain rows add the
executor. Reported: median microseconds per invocation.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from mcp_interceptors import Call, Chain, guards
from mcp_interceptors.protocol.events import Phase

FIVE = ["secrets", "pii", "tool-policy", "schema-guard", "size-limit"]
_VOCABULARY = "the request server config value data user file path error log time result cache index queue session"
WORDS = _VOCABULARY.split(" ")


def prose(size: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(WORDS)
        words.append(word + ("." if rng.random() < 0.08 else ""))
        length += len(word) + 1
    return " ".join(words)[:size]


def payloads() -> dict[str, tuple[str, Phase, Any]]:
    text = prose(10_240)
    records = [{"id": i, "name": f"item-{i}", "note": prose(60, seed=i), "tags": ["a", "b"]} for i in range(120)]
    return {
        "request 10KB arg": (
            "tools/call",
            "request",
            {"method": "tools/call", "params": {"name": "echo", "arguments": {"text": text}}},
        ),
        "result 10KB text": ("tools/call", "response", {"content": [{"type": "text", "text": text}], "isError": False}),
        "result 10KB records": ("tools/call", "response", {"content": [], "structuredContent": {"items": records}}),
    }


async def timed(fn: Callable[[], Awaitable[Any]], rounds: int) -> float:
    for _ in range(20):
        await fn()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


async def main(rounds: int) -> None:
    cases = payloads()
    tools_list = {
        "tools": [{"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]
    }
    print(f"{'guard':<22}" + "".join(f"{name:>22}" for name in cases))
    for guard in guards.available():
        config = {"path": "/dev/null"} if guard == "audit-log" else {}
        host = guards.load(guard, config)
        if guard == "schema-guard":
            await host.invoke(Call("schema-guard", "validation", "tools/list", "response", tools_list))
        row = f"{guard:<22}"
        for event, phase, payload in cases.values():
            total = 0.0
            for descriptor in host.descriptors:
                if not descriptor.covers(event, phase):
                    continue
                call = Call(descriptor.name, descriptor.type, event, phase, payload)
                total += await timed(lambda call=call, host=host: host.invoke(call), rounds)  # type: ignore[misc]
            row += f"{total:>22.1f}"
        print(row)
    for label, names in (("chain: no guards", []), ("chain: five guards", FIVE)):
        chain = Chain(role="server")
        for name in names:
            chain.add_local(guards.load(name))
        await chain.execute("tools/list", "response", tools_list)
        row = f"{label:<22}"
        for event, phase, payload in cases.values():
            row += f"{await timed(lambda e=event, p=phase, x=payload, c=chain: c.execute(e, p, x), rounds):>22.1f}"  # type: ignore[misc]
        print(row)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    anyio.run(main, parser.parse_args().rounds)
