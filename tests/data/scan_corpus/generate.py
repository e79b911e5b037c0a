"""Writes the labelled scan corpus: realistic documents with planted fake secrets/PII and clean look-alikes.

`python tests/data/scan_corpus/generate.py` rewrites `corpus.jsonl` (one document per line:
`{"id", "source", "text", "labels": [{"kind", "start", "end"}]}`). The two 1 MB documents are not
stored: `build_large()` and `build_typical()` rebuild them from a fixed seed whenever a test or bench
needs them. Document shapes live in `corpus_templates.py`, fake values and near misses in
`corpus_fakes.py`.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from corpus_templates import CLEAN_TEMPLATES, TEMPLATES, Doc, build_doc

HERE = Path(__file__).parent
CORPUS_PATH = HERE / "corpus.jsonl"
SEED = 20260728


def build_corpus(seed: int = SEED, per_template: int = 40) -> list[dict[str, object]]:
    """Small documents: `per_template` of each template, each a few KB."""
    rng = random.Random(seed)
    docs = []
    for source in TEMPLATES:
        for i in range(per_template):
            d = build_doc(source, rng)
            docs.append({"id": f"{source}-{i:03d}", "source": source, "text": d.text(), "labels": d.labels})
    return docs


def build_large(seed: int = SEED + 1, size: int = 1_000_000) -> list[dict[str, object]]:
    """Two ~1 MB documents: a log dump (phone/PII heavy) and a mix of every template."""
    docs = []
    for name, sources in (("large-log", ["log", "csv", "chat"]), ("large-mixed", list(TEMPLATES))):
        rng = random.Random(f"{seed}-{name}")
        docs.append(_concatenate(name, size, rng, lambda r, s=sources: build_doc(r.choice(s), r)))  # type: ignore[misc]
    return docs


def build_typical(seed: int = SEED + 2, size: int = 1_000_000, planted_every: int = 8) -> dict[str, object]:
    """Sparser traffic: clean logs, code, JSON and prose, with one planted template every `planted_every`
    parts (about one item per 1-2 KB instead of one per ~110 bytes)."""
    rng = random.Random(f"{seed}-typical-{size}")

    def part(r: random.Random) -> Doc:
        if r.randrange(planted_every) == 0:
            return build_doc(r.choice(list(TEMPLATES)), r)
        d = Doc(r)
        r.choice(CLEAN_TEMPLATES)(d)
        return d

    return _concatenate(f"typical-{size}", size, rng, part)


def _concatenate(name: str, size: int, rng: random.Random, make: Callable[[random.Random], Doc]) -> dict[str, object]:
    big = Doc(rng)
    while big.size < size:
        part = make(rng)
        offset = big.size
        big.add(part.text())
        big.labels.extend({**lab, "start": lab["start"] + offset, "end": lab["end"] + offset} for lab in part.labels)  # type: ignore[operator]
        big.add("\n")
    return {"id": name, "source": name, "text": big.text(), "labels": big.labels}


def load_corpus() -> list[dict[str, object]]:
    with CORPUS_PATH.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def main() -> None:
    docs = build_corpus()
    with CORPUS_PATH.open("w", encoding="utf-8") as f:
        for doc in docs:
            f.write(json.dumps(doc, ensure_ascii=False) + "\n")
    planted = sum(len(doc["labels"]) for doc in docs)  # type: ignore[arg-type]
    print(f"wrote {len(docs)} documents, {planted} planted items -> {CORPUS_PATH}")


if __name__ == "__main__":
    main()
