"""What shared state costs a guarded call: exfiltration-guard and tool-pinning (the guards that keep state) run
on a `tools/call` request and its result, with their state in the process (`MemoryState`) and in a real Redis
(`RedisState`, a redis-server this script starts on a free loopback port). Prints CPU and wall time per call
(median of the repeats) and the ratio of each to in-memory state measured in the same run.

    python bench/state_cost.py [--calls 2000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import time
import uuid

import anyio

from mcp_interceptors import Chain, guards
from mcp_interceptors.state import StateStore, open_state
from mcp_interceptors.state.memory import MemoryState

SECRET = "AKIA" + "J7Q2XKZ4M5N6P3RT"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def chain_with(state: StateStore) -> Chain:
    chain = Chain(role="server")
    for name in ("exfiltration-guard", "tool-pinning"):
        chain.add_local(guards.load(name, {}, state=state))
    return chain


async def run(state: StateStore, calls: int) -> tuple[float, float]:
    """(CPU µs, wall µs) per call: a request chain and a response chain, each in one session of its own."""
    chain = chain_with(state)
    request = {"method": "tools/call", "params": {"name": "post", "arguments": {"text": "nothing secret here"}}}
    result = {"content": [{"type": "text", "text": f"read: {SECRET}"}]}
    context = {"sessionId": "bench", "server": "a"}
    for _ in range(50):  # warm-up
        await chain.execute("tools/call", "request", request, context=context)
    cpu, wall = time.process_time(), time.perf_counter()
    for index in range(calls):
        ctx = {**context, "sessionId": f"bench-{index % 64}"}
        await chain.execute("tools/call", "response", result, context=ctx)
        await chain.execute("tools/call", "request", request, context={**ctx, "server": "b"})
    return (time.process_time() - cpu) / calls * 1e6, (time.perf_counter() - wall) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed (apt-get install -y redis-server)")
    port = free_port()
    server = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("redis-server did not start") from None
                time.sleep(0.05)
        figures: dict[str, list[tuple[float, float]]] = {"memory": [], "redis": []}
        for _ in range(args.repeats):
            figures["memory"].append(anyio.run(run, MemoryState(), args.calls))

            async def on_redis() -> tuple[float, float]:
                state = open_state(f"redis://127.0.0.1:{port}/0", key_prefix=f"b{uuid.uuid4().hex[:6]}:")
                try:
                    return await run(state, args.calls)
                finally:
                    await state.aclose()

            figures["redis"].append(anyio.run(on_redis))
    finally:
        server.terminate()
        server.wait()
    base_cpu = statistics.median(c for c, _ in figures["memory"])
    base_wall = statistics.median(w for _, w in figures["memory"])
    print(f"{'state':8} {'CPU µs/call':>12} {'x memory':>9} {'wall µs/call':>13} {'x memory':>9}")
    for name, values in figures.items():
        cpu = statistics.median(c for c, _ in values)
        wall = statistics.median(w for _, w in values)
        print(f"{name:8} {cpu:12.0f} {cpu / base_cpu:9.2f} {wall:13.0f} {wall / base_wall:9.2f}")
    extra = statistics.median(c for c, _ in figures["redis"]) - base_cpu
    print(f"Redis state adds {extra:.0f} µs of CPU per guarded call (request and result, two stateful guards)")


if __name__ == "__main__":
    main()
