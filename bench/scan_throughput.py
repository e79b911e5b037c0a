"""Scan throughput (MB/s) on MCP payloads of ~10 KB and ~1 MB: ours vs Presidio vs detect-secrets.

Usage: python bench/scan_throughput.py [--repeats N] [--slow-repeats N]

Payloads are MCP tool results built from the labelled scan corpus (tests/data/scan_corpus), in two
densities: "dense" (the corpus itself, about one planted item per 110 bytes) and "typical" (clean logs,
code, JSON and prose with a planted document every ~8 parts, about one item per 650 bytes). Every
scanner walks the payload's strings with `guards._walk` and scans each one; MB/s is the payload's JSON
size over the median wall time (`time.perf_counter`) of the repeats, after one warm-up run; the CPU-time
figure beside it (`time.process_time`) shows the same run without interference from other processes. Presidio
runs its pattern recognizers with a no-op NLP engine; detect-secrets runs `scan_file` with default
settings over the payload's strings written one per line (files written before timing). Columns for
tools that are not installed are skipped with a note (`pip install -e '.[bench]'`). The PII scanner
remembers its phone verdicts, so the timed runs, which repeat the warm-up's payloads, never judge a
number anew; the "first sight" row forgets them before each run, as traffic with new numbers has it.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from mcp_interceptors.guards._detectors import PiiScanner, SecretScanner
from mcp_interceptors.guards._detectors._engine import re2
from mcp_interceptors.guards._walk import walk_strings

CORPUS_DIR = Path(__file__).resolve().parents[1] / "tests" / "data" / "scan_corpus"


def load_generator() -> Any:
    spec = importlib.util.spec_from_file_location("scan_corpus_generate", CORPUS_DIR / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tool_result(texts: list[str], request_id: int) -> dict[str, Any]:
    """An MCP tools/call result carrying `texts` as content items, plus a little structured metadata."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "result": {
            "content": [{"type": "text", "text": text} for text in texts],
            "structuredContent": {"tool": "read_file", "bytes": sum(map(len, texts)), "truncated": False},
            "isError": False,
        },
    }


def payloads_10kb(texts: list[str], count: int) -> list[dict[str, Any]]:
    """`count` payloads of ~10 KB, each a run of consecutive corpus texts (split where longer)."""
    pieces = [t[i : i + 2500] for t in texts for i in range(0, len(t), 2500)]
    payloads, batch, size = [], [], 0
    for piece in pieces:
        batch.append(piece)
        size += len(piece)
        if size >= 10_000:
            payloads.append(tool_result(batch, len(payloads)))
            batch, size = [], 0
            if len(payloads) == count:
                break
    return payloads


def time_scan(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median wall time (`perf_counter`) and median CPU time (`process_time`) of `repeats` runs."""
    fn()  # warm-up: lazy DFA states, phonenumbers metadata, imports
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(wall), statistics.median(cpu)


def make_ours(engine: str, which: str, *, first_sight: bool = False) -> Callable[[list[dict[str, Any]]], int]:
    """`first_sight`: forget the PII scanner's phone verdicts before each run, so every number is judged
    as new traffic would have it (the timed runs otherwise repeat the warm-up's numbers)."""
    secrets = SecretScanner(engine=engine)  # type: ignore[arg-type]
    pii = PiiScanner(engine=engine)  # type: ignore[arg-type]
    scanners = {"secrets": [secrets.scan], "pii": [pii.scan], "both": [secrets.scan, pii.scan]}[which]

    def run(payloads: list[dict[str, Any]]) -> int:
        if first_sight:
            pii.forget_verdicts()
        found = 0
        for payload in payloads:
            for _, text in walk_strings(payload):
                for scan in scanners:
                    found += len(scan(text))
        return found

    return run


def walk_only(payloads: list[dict[str, Any]]) -> int:
    return sum(len(text) for payload in payloads for _, text in walk_strings(payload))


def make_presidio() -> Callable[[list[dict[str, Any]]], int] | None:
    try:
        from mcp_interceptors.guards._detectors import PresidioPiiScanner

        scanner = PresidioPiiScanner()
    except ImportError:
        return None

    def run(payloads: list[dict[str, Any]]) -> int:
        return sum(len(scanner.scan(text)) for payload in payloads for _, text in walk_strings(payload))

    return run


def make_detect_secrets(workdir: str) -> Callable[[list[dict[str, Any]]], int] | None:
    try:
        from detect_secrets.core.scan import scan_file
        from detect_secrets.settings import default_settings
    except ImportError:
        return None
    files: dict[int, list[str]] = {}

    def run(payloads: list[dict[str, Any]]) -> int:
        key = id(payloads)
        if key not in files:  # written on the warm-up run, outside the timed repeats
            paths = []
            for i, payload in enumerate(payloads):
                path = os.path.join(workdir, f"{key}-{i}.txt")
                with open(path, "w", encoding="utf-8") as f:
                    f.write("\n".join(text for _, text in walk_strings(payload)))
                paths.append(path)
            files[key] = paths
        found = 0
        with default_settings():
            for path in files[key]:
                found += sum(1 for _ in scan_file(path))
        return found

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed runs for our scanners (median)")
    parser.add_argument("--slow-repeats", type=int, default=3, help="timed runs for Presidio/detect-secrets")
    parser.add_argument("--only-ours", action="store_true", help="skip the Presidio and detect-secrets columns")
    args = parser.parse_args()

    gen = load_generator()
    dense_docs = [doc["text"] for doc in gen.load_corpus()]
    dense_large = gen.build_large()[1]["text"]  # the mixed 1 MB document
    typical_large = gen.build_typical()["text"]
    typical_small = gen.build_typical(seed=7, size=600_000)["text"]
    workloads = {
        "dense 10 KB": payloads_10kb(dense_docs, 30),
        "dense 1 MB": [tool_result([dense_large], 1)],
        "typical 10 KB": payloads_10kb([typical_small], 30),
        "typical 1 MB": [tool_result([typical_large], 1)],
    }
    sizes = {name: sum(len(orjson.dumps(p)) for p in payloads) for name, payloads in workloads.items()}

    with tempfile.TemporaryDirectory() as workdir:
        rows: list[tuple[str, Callable[[list[dict[str, Any]]], int] | None, int, str]] = [
            ("walk only (`walk_strings`)", walk_only, args.repeats, ""),
            ("ours: secrets", make_ours("auto", "secrets"), args.repeats, ""),
            ("ours: pii", make_ours("auto", "pii"), args.repeats, ""),
            ("ours: secrets + pii", make_ours("auto", "both"), args.repeats, ""),
            ("ours: secrets + pii, first sight", make_ours("auto", "both", first_sight=True), args.repeats, ""),
            ("ours: secrets + pii, stdlib `re` only", make_ours("re", "both"), args.repeats, ""),
            ("Presidio pattern-only (PII)", None if args.only_ours else make_presidio(), args.slow_repeats, "not run"),
            (
                "detect-secrets `scan_file` (secrets)",
                None if args.only_ours else make_detect_secrets(workdir),
                args.slow_repeats,
                "not run",
            ),
        ]
        print(f"# Scan throughput, MB/s (higher is better), median of repeats, {time.strftime('%Y-%m-%d')}\n")
        print(
            f"Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cores, "
            f"load average {os.getloadavg()[0]:.2f}; google-re2 {'installed' if re2 else 'NOT installed'}.\n"
        )
        print("Payload sizes (JSON bytes): " + ", ".join(f"{k} = {v / 1e6:.2f} MB" for k, v in sizes.items()) + "\n")
        print("Each cell: MB/s by wall time (by CPU time of this process, which other load on the machine")
        print("does not slow down).\n")
        print("| scanner | " + " | ".join(workloads) + " |")
        print("|---|" + "---:|" * len(workloads))
        walk_times: dict[str, float] = {}
        both_times: dict[str, float] = {}
        for label, fn, repeats, missing in rows:
            if fn is None:
                print(f"| {label} | " + " | ".join("skipped" for _ in workloads) + f" |  <!-- {missing} -->")
                continue
            cells = []
            for name, payloads in workloads.items():
                elapsed, cpu = time_scan(lambda fn=fn, payloads=payloads: fn(payloads), repeats)  # type: ignore[misc]
                if label.startswith("walk"):
                    walk_times[name] = cpu
                if label == "ours: secrets + pii":
                    both_times[name] = cpu
                cells.append(f"{sizes[name] / elapsed / 1e6:,.1f} ({sizes[name] / cpu / 1e6:,.1f})")
            print(f"| {label} | " + " | ".join(cells) + " |")
            sys.stdout.flush()
        share = ", ".join(f"{name}: {walk_times[name] / both_times[name]:.1%}" for name in workloads)
        print(f"\nWalking alone as a share of secrets + pii CPU time: {share}.")


if __name__ == "__main__":
    main()
