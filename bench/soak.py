"""A bounded soak of a real gateway (issue 34 item 4): `--concurrency` clients on loopback for `--minutes`,
with upstream crashes and hangs injected, then `audit verify` of the trail it wrote. Stops by itself.

    python bench/soak.py --minutes 30            # the long soak
    python bench/soak.py --minutes 2 --json      # the CI form (tests/fuzz/test_soak.py)
    python bench/soak.py --minutes 30 --plot docs/benchmarks/soak.svg  # and the plot of RSS and p99 over time

The gateway is the CLI on a loopback port (Streamable HTTP, 2026-07-28 era), fronting the fuzz upstream
(`tests/fuzz/fuzz_peers.py`) behind `secrets`, the fuzz interceptor server and a signed SQLite audit trail.
Each client calls `echo` in a loop; one call in `--fault-every` is `crash` (the upstream exits) or `hang`
(it never answers; the upstream's 1 s timeout ends it). Prints the gateway's RSS and the period's echo p99
once per sampling period (`--plot` draws both over time as an SVG), the echo calls' p50/p99 latency, the
outcomes, the RSS growth after warm-up (the first fifth) and the `audit verify` line; exits 1 when an echo
call got anything but its answer or the injected faults' -32000 and -32001 (a wrong answer, a 5xx, a dropped
connection), or the trail does not verify.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fuzz"))

import gateway_fuzz_targets as fuzz
from soak_plot import soak_svg


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Soak:
    def __init__(self, gateway: fuzz.HttpGateway, fault_every: int) -> None:
        self.gateway = gateway
        self.fault_every = fault_every
        self.latencies: list[float] = []
        #: (when it ended, on the monotonic clock, and how long it took) of each echo call answered
        self.ended: list[tuple[float, float]] = []
        self.outcomes: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def client(self, index: int) -> None:
        import httpx2

        headers = {**self.gateway.headers(), "Mcp-Method": "tools/call"}
        with httpx2.Client(timeout=60) as client:
            for number in range(1, 1 << 62):
                if self.stop.is_set():
                    return
                tool = "echo"
                if number % self.fault_every == 0:
                    tool = "crash" if (number // self.fault_every + index) % 2 else "hang"
                body = {"jsonrpc": "2.0", "id": number, "method": "tools/call"}
                body["params"] = {"name": tool, "arguments": {"text": f"c{index}-{number}"}, "_meta": fuzz.META}
                started = time.perf_counter()
                try:
                    reply = client.post(self.gateway.url, json=body, headers={**headers, "Mcp-Name": tool})
                    answer = reply.json()
                    outcome = self.outcome_of(tool, reply.status_code, answer, f"c{index}-{number}")
                except (httpx2.HTTPError, ValueError) as exc:
                    outcome = f"{tool}: {type(exc).__name__}"
                elapsed = time.perf_counter() - started
                with self.lock:
                    self.outcomes[outcome] += 1
                    if tool == "echo" and outcome == "echo: ok":
                        self.latencies.append(elapsed)
                        self.ended.append((time.monotonic(), elapsed))

    @staticmethod
    def outcome_of(tool: str, status: int, answer: Any, text: str) -> str:
        if status != 200:
            return f"{tool}: HTTP {status}"
        if "error" in answer:
            return f"{tool}: error {answer['error'].get('code')}"
        result = answer.get("result", {})
        if tool == "echo":
            return "echo: ok" if result.get("content", [{}])[0].get("text") == text else "echo: wrong answer"
        return f"{tool}: isError" if result.get("isError") else f"{tool}: result"


def run(minutes: float, concurrency: int, fault_every: int, sample_s: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        gateway = fuzz.HttpGateway(Path(folder), audit=True, upstream_timeout_ms=1000)
        soak = Soak(gateway, fault_every)
        threads = [threading.Thread(target=soak.client, args=(i,), daemon=True) for i in range(concurrency)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        samples: list[tuple[float, float, int, float | None]] = []
        try:
            while (elapsed := time.monotonic() - started) < minutes * 60:
                time.sleep(min(sample_s, max(0.1, minutes * 60 - elapsed)))
                with soak.lock:
                    calls = sum(soak.outcomes.values())
                    period, soak.ended = sorted(took for _, took in soak.ended), []
                p99 = 1000 * period[int(0.99 * (len(period) - 1))] if period else None
                samples.append((time.monotonic() - started, rss_mb(gateway.popen.pid), calls, p99))
                shown = f"{p99:8.1f} ms" if p99 is not None else "       - ms"
                at, rss = samples[-1][:2]
                print(f"{at:7.0f} s  rss {rss:7.1f} MB  p99 {shown}  calls {calls:>9,}", flush=True)
        finally:
            soak.stop.set()
            for thread in threads:
                thread.join(timeout=90)
            gateway.close()
        code, verified = fuzz.audit_verify(Path(folder) / "audit.db")
    latencies = sorted(soak.latencies)
    warm = samples[max(0, len(samples) // 5 - 1)][1] if samples else 0.0
    return {
        "minutes": minutes,
        "concurrency": concurrency,
        "calls": sum(soak.outcomes.values()),
        "outcomes": dict(soak.outcomes),
        "p50_ms": 1000 * statistics.median(latencies) if latencies else None,
        "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))] if latencies else None,
        "sample_s": [round(t, 1) for t, _, _, _ in samples],
        "rss_mb": [round(rss, 1) for _, rss, _, _ in samples],
        "p99_ms_by_period": [None if p99 is None else round(p99, 1) for _, _, _, p99 in samples],
        "rss_after_warmup_mb": round(warm, 1),
        "rss_end_mb": round(samples[-1][1], 1) if samples else None,
        "audit_verify_exit": code,
        "audit_verify": verified.strip().splitlines()[-1] if verified.strip() else "",
    }


#: What an echo call may get while an injected crash takes its upstream connection down (calls in flight on it
#: fail as closed, -32000, until the gateway reconnects) or a hang holds it: anything else fails the soak.
_COLLATERAL = {"echo: ok", "echo: error -32000", "echo: error -32001"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--fault-every", type=int, default=50, help="one call in N is a crash or a hang")
    parser.add_argument("--sample-s", type=float, default=0, help="RSS sampling period (default: minutes * 2 s)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON line at the end")
    parser.add_argument("--plot", type=Path, help="write RSS and p99 per sampling period over time to this SVG")
    args = parser.parse_args()
    report = run(args.minutes, args.concurrency, args.fault_every, args.sample_s or max(5.0, args.minutes * 2))
    failed = sum(
        count for key, count in report["outcomes"].items() if key.startswith("echo") and key not in _COLLATERAL
    )
    print(f"calls {report['calls']:,} at c={report['concurrency']} for {report['minutes']:g} min: {report['outcomes']}")
    print(f"echo latency p50 {report['p50_ms']:.1f} ms, p99 {report['p99_ms']:.1f} ms")
    print(f"gateway RSS after warm-up {report['rss_after_warmup_mb']} MB, at the end {report['rss_end_mb']} MB")
    print(f"audit verify: {report['audit_verify']}")
    if args.json:
        print(json.dumps(report))
    if args.plot:
        title = (
            f"soak: c={report['concurrency']} for {report['minutes']:g} min, one call in {args.fault_every} "
            f"a crash or hang; {report['calls']:,} calls"
        )
        panels = [("gateway RSS (MB)", report["rss_mb"]), ("echo p99 per period (ms)", report["p99_ms_by_period"])]
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        args.plot.write_text(soak_svg(title, [t / 60 for t in report["sample_s"]], panels))
        print(f"plot: {args.plot}")
    return 1 if failed or report["audit_verify_exit"] != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
