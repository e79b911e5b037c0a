"""Precision/recall per entity type on the labelled scan corpus, as markdown: ours, Presidio, detect-secrets.

Usage: python bench/corpus_report.py [--only-ours] [--guard-path]

Three document sets: the 400 small documents (tests/data/scan_corpus/corpus.jsonl), the two 1 MB documents
and a 1 MB "typical" document (`build_typical`). Our scanners and Presidio are scored per kind: a finding
counts only when its kind matches the planted item it overlaps. detect-secrets names its findings by
plugin ("Base64 High Entropy String", ...), not by our kinds, so it is scored kind-agnostic: a planted
secret counts as found when any detect-secrets finding overlaps it, and a finding is correct when it
overlaps any planted secret. Presidio runs pattern recognizers only (no spaCy model can be installed).
With `--guard-path`, our scanners run as the guards run them: each document a string of a payload, read as
sent and through its readings (escapes, invisible characters, blobs undone; `guards/_readings.py`), each
finding mapped back to the document; what the readings add to the findings is then in the figures.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from mcp_interceptors.guards._detectors import PII_KINDS, SECRET_KINDS, PiiScanner, SecretScanner

CORPUS_DIR = Path(__file__).resolve().parents[1] / "tests" / "data" / "scan_corpus"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"scan_corpus_{name}", CORPUS_DIR / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Span:
    kind: str
    start: int
    end: int


def detect_secrets_scan(workdir: str) -> Callable[[str], list[Span]] | None:
    """detect-secrets' default `scan_file` over `text`, with findings mapped back to char spans."""
    try:
        from detect_secrets.core.scan import scan_file
        from detect_secrets.settings import default_settings
    except ImportError:
        return None

    def scan(text: str) -> list[Span]:
        path = os.path.join(workdir, "doc.txt")
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        lines = text.split("\n")
        offsets = [0]
        for line in lines:
            offsets.append(offsets[-1] + len(line) + 1)
        spans = []
        with default_settings():
            for secret in scan_file(path):
                line = lines[secret.line_number - 1]
                value = secret.secret_value or ""
                column = line.find(value) if value else -1
                if column < 0:
                    column, value = 0, line
                start = offsets[secret.line_number - 1] + column
                spans.append(Span("secret", start, start + len(value)))
        return spans

    return scan


def kind_agnostic(docs: Iterable[dict[str, Any]], kinds: tuple[str, ...]) -> list[dict[str, Any]]:
    """The same documents with every planted item of `kinds` relabelled "secret"."""
    return [
        {**doc, "labels": [{**lab, "kind": "secret"} for lab in doc["labels"] if lab["kind"] in kinds]} for doc in docs
    ]


def recall_by_kind(
    docs: list[dict[str, Any]], scan: Callable[[str], list[Span]], kinds: tuple[str, ...]
) -> dict[str, float]:
    """Per planted kind: the share overlapped by any finding (for kind-agnostic tools)."""
    hit = dict.fromkeys(kinds, 0)
    total = dict.fromkeys(kinds, 0)
    for doc in docs:
        found = sorted((f.start, f.end) for f in scan(doc["text"]))
        for lab in doc["labels"]:
            if lab["kind"] in total:
                total[lab["kind"]] += 1
                hit[lab["kind"]] += any(s < lab["end"] and lab["start"] < e for s, e in found)
    return {kind: hit[kind] / total[kind] if total[kind] else 1.0 for kind in kinds}


def guard_path(scanner: Any, min_length: int, integers: bool = False) -> Callable[[str], list[Span]]:
    """`scanner` as `_scanning` runs it on a payload's string (readings included), spans in the string."""
    from mcp_interceptors.guards._readings import span_on_string
    from mcp_interceptors.guards._scanning import TextScanner, _findings_of

    text_scanner = TextScanner(scanner, min_length=min_length, integers=integers)

    def scan(text: str) -> list[Span]:
        spans = set()  # a reading may find again what the string as sent showed
        for reading, findings in _findings_of(text_scanner, [text]).get(0, []):
            for finding in findings:
                start, end, _ = span_on_string(reading, finding.start, finding.end)
                spans.add(Span(finding.kind, start, end))
        return sorted(spans, key=lambda span: (span.start, span.end, span.kind))

    return scan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only-ours", action="store_true", help="skip the Presidio and detect-secrets columns")
    parser.add_argument("--guard-path", action="store_true", help="score ours through the guards' readings")
    args = parser.parse_args()
    gen, scoring = load("generate"), load("corpus_score")
    sets = {
        "400 small docs": gen.load_corpus(),
        "2 x 1 MB docs": gen.build_large(),
        "1 MB typical doc": [gen.build_typical()],
    }
    presidio = None
    if not args.only_ours:
        try:
            from mcp_interceptors.guards._detectors import PresidioPiiScanner

            presidio = PresidioPiiScanner()
        except ImportError:
            presidio = None
    secrets, pii = SecretScanner(), PiiScanner()
    scan_secrets, scan_pii = secrets.scan, pii.scan
    if args.guard_path:
        scan_secrets, scan_pii = guard_path(secrets, 12), guard_path(pii, 6)
    with tempfile.TemporaryDirectory() as workdir:
        ds_scan = None if args.only_ours else detect_secrets_scan(workdir)
        for set_name, docs in sets.items():
            planted = sum(len(doc["labels"]) for doc in docs)
            size = sum(len(doc["text"].encode()) for doc in docs) / 1e6
            print(f"\n### {set_name} ({size:.2f} MB, {planted} planted items)\n")
            ours = {**scoring.score(docs, scan_secrets, SECRET_KINDS), **scoring.score(docs, scan_pii, PII_KINDS)}
            theirs = scoring.score(docs, presidio.scan, PII_KINDS) if presidio else {}
            ds_recall = recall_by_kind(docs, ds_scan, SECRET_KINDS) if ds_scan else {}
            ds_total = (
                scoring.score(kind_agnostic(docs, SECRET_KINDS), ds_scan, ("secret",))["secret"] if ds_scan else None
            )
            columns = [
                "ours recall",
                "ours precision",
                "Presidio recall",
                "Presidio precision",
                "detect-secrets recall",
            ]
            print("| kind | planted | " + " | ".join(columns) + " |")
            print("|---|---:|---:|---:|---:|---:|---:|")
            for kind in SECRET_KINDS + PII_KINDS:
                entry = ours[kind]
                p_cells = (
                    (f"{theirs[kind].recall:.1%}", f"{theirs[kind].precision:.1%}")
                    if kind in theirs
                    else ("n/a", "n/a")
                    if presidio or kind in SECRET_KINDS
                    else ("not run", "not run")
                )
                ds_cell = (
                    f"{ds_recall[kind]:.1%}"
                    if kind in ds_recall
                    else ("n/a" if ds_scan or kind in PII_KINDS else "not run")
                )
                print(
                    f"| {kind} | {entry.planted} | {entry.recall:.1%} | {entry.precision:.1%} | "
                    f"{p_cells[0]} | {p_cells[1]} | {ds_cell} |"
                )
            if ds_total is not None:
                print(
                    f"\ndetect-secrets overall (kind-agnostic): recall {ds_total.recall:.1%} of "
                    f"{ds_total.planted} planted secrets, precision {ds_total.precision:.1%} "
                    f"of {ds_total.found} findings."
                )
            sys.stdout.flush()


if __name__ == "__main__":
    main()
