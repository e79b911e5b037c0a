"""Every finding of both scanners on a fixed set of inputs, to show a speed-up changed none of them.

Usage (each dump with the source tree under test first on PYTHONPATH, e.g. a `git worktree` of the old code):
    PYTHONPATH=OLD/src python bench/scan_equivalence.py dump old.pickle
    PYTHONPATH=src python bench/scan_equivalence.py dump new.pickle
    python bench/scan_equivalence.py compare old.pickle new.pickle

The inputs: the labelled corpus, the benchmark's 1 MB documents, the hostile inputs and edge texts of the
tests, and 3,000 seeded slices and splices of corpus texts (some joined by non-ASCII chars, other scripts'
digits and a lone surrogate). Both engines, default configuration (stdlib `re` skips the 1 MB documents).
"""

from __future__ import annotations

import pickle
import random
import sys
from pathlib import Path

from scan_throughput import load_generator

from mcp_interceptors.guards._detectors import PiiScanner, SecretScanner

TESTS = Path(__file__).resolve().parents[1] / "tests" / "guards"
SEAMS = ["é", "\u0663", "\uff11", " ", "\n", "🙂", "\ud800"]


def inputs() -> dict[str, list[str]]:
    sys.path.insert(0, str(TESTS))
    from test_scan_fast_paths import EDGE_TEXTS
    from test_scanner_hostile_inputs import HOSTILE

    gen = load_generator()
    corpus = [doc["text"] for doc in gen.load_corpus()]
    rng = random.Random(20261130)
    fragments = []
    for _ in range(3000):
        a, b = rng.choice(corpus), rng.choice(corpus)
        i, j = sorted(rng.randrange(len(a) + 1) for _ in range(2))
        k, m = sorted(rng.randrange(len(b) + 1) for _ in range(2))
        roll = rng.random()
        fragments.append(a[i:j] if roll < 0.4 else a[i:j] + (rng.choice(SEAMS) if roll >= 0.8 else "") + b[k:m])
    return {
        "corpus": corpus,
        "large": [doc["text"] for doc in gen.build_large()] + [gen.build_typical()["text"]],
        "hostile": list(HOSTILE.values()),
        "edge": EDGE_TEXTS,
        "fragments": fragments,
    }


def dump(path: str) -> None:
    found: dict[tuple[str, str], list[object]] = {}
    for engine in ("auto", "re"):
        secrets, pii = SecretScanner(engine=engine), PiiScanner(engine=engine)  # type: ignore[arg-type]
        for name, texts in inputs().items():
            if engine == "auto" or name != "large":
                found[engine, name] = [(secrets.scan(text), pii.scan(text)) for text in texts]
    with open(path, "wb") as out:
        pickle.dump(found, out)
    print(f"{sum(map(len, found.values()))} texts scanned, written to {path}")


def compare(old_path: str, new_path: str) -> int:
    with open(old_path, "rb") as old_file, open(new_path, "rb") as new_file:
        old, new = pickle.load(old_file), pickle.load(new_file)
    differences = [(key, i) for key in old for i, (a, b) in enumerate(zip(old[key], new[key], strict=True)) if a != b]
    for key, i in differences[:10]:
        print("differs:", key, i, old[key][i], new[key][i])
    print(f"{len(differences)} of {sum(map(len, old.values()))} texts differ")
    return 1 if differences else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["dump"] and len(sys.argv) == 3:
        dump(sys.argv[2])
    elif sys.argv[1:2] == ["compare"] and len(sys.argv) == 4:
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)
