"""Recall and precision of the scanners on the labelled corpus (tests/data/scan_corpus), small and 1 MB.

Recall must be >= 99 % for every planted kind, on the ~400 small documents and on the two 1 MB ones
(scanning a big document must not lose what scanning its parts finds). Precision must stay >= 98 % per
kind: the corpus plants ~50 near-miss look-alikes (UUIDs, SHAs, versions, bad checksums, placeholders)
around every item, and each kind has ~100-4000 findings, so 98 % fails on a handful of new false
positives without being flaky. Real traffic is messier than a synthetic corpus; docs/guards-accuracy.md
says so next to the numbers.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from mcp_interceptors.guards._detectors import PII_KINDS, SECRET_KINDS, PiiScanner, SecretScanner
from mcp_interceptors.guards._detectors._engine import re2

CORPUS_DIR = Path(__file__).parents[1] / "data" / "scan_corpus"
MIN_RECALL = 0.99
MIN_PRECISION = 0.98
ENGINES = ["re", pytest.param("re2", marks=pytest.mark.skipif(re2 is None, reason="google-re2 not installed"))]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"scan_corpus_{name}", CORPUS_DIR / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


generate = _load("generate")
corpus_score = _load("corpus_score")


@pytest.fixture(scope="module")
def small_docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = generate.load_corpus()
    return docs


@pytest.fixture(scope="module")
def large_docs() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = generate.build_large()
    assert all(len(doc["text"]) >= 1_000_000 for doc in docs)
    return docs


def _assert_scores(scores: dict[str, Any], kinds: tuple[str, ...]) -> None:
    problems = []
    for kind in kinds:
        entry = scores[kind]
        assert entry.planted > 0, f"the corpus plants no {kind}"
        if entry.recall < MIN_RECALL:
            problems.append(f"{kind}: recall {entry.recall:.4f}; missed e.g. {entry.missed[:3]}")
        if entry.precision < MIN_PRECISION:
            problems.append(f"{kind}: precision {entry.precision:.4f}; spurious e.g. {entry.spurious[:3]}")
    assert not problems, "\n".join(problems)


def test_committed_corpus_matches_its_generator(small_docs: list[dict[str, Any]]) -> None:
    assert generate.build_corpus() == small_docs, "run: python tests/data/scan_corpus/generate.py"


@pytest.mark.parametrize("engine", ENGINES)
def test_secrets_on_small_documents(engine: str, small_docs: list[dict[str, Any]]) -> None:
    scores = corpus_score.score(small_docs, SecretScanner(engine=engine).scan, SECRET_KINDS)
    _assert_scores(scores, SECRET_KINDS)


@pytest.mark.parametrize("engine", ENGINES)
def test_pii_on_small_documents(engine: str, small_docs: list[dict[str, Any]]) -> None:
    scores = corpus_score.score(small_docs, PiiScanner(engine=engine).scan, PII_KINDS)
    _assert_scores(scores, PII_KINDS)


def test_secrets_on_1mb_documents(large_docs: list[dict[str, Any]]) -> None:
    _assert_scores(corpus_score.score(large_docs, SecretScanner().scan, SECRET_KINDS), SECRET_KINDS)


def test_pii_on_1mb_documents(large_docs: list[dict[str, Any]]) -> None:
    _assert_scores(corpus_score.score(large_docs, PiiScanner().scan, PII_KINDS), PII_KINDS)


def test_both_scanners_on_a_1mb_typical_document() -> None:
    docs = [generate.build_typical()]
    _assert_scores(corpus_score.score(docs, SecretScanner().scan, SECRET_KINDS), SECRET_KINDS)
    _assert_scores(corpus_score.score(docs, PiiScanner().scan, PII_KINDS), PII_KINDS)


def test_1mb_documents_find_what_their_parts_find(large_docs: list[dict[str, Any]]) -> None:
    """No recall loss with size: the whole document yields exactly the findings of its lines."""
    scanner = PiiScanner()
    text = large_docs[0]["text"][:200_000]
    whole = [(f.kind, f.start, f.end) for f in scanner.scan(text)]
    parts = []
    offset = 0
    for line in text.split("\n"):
        parts.extend((f.kind, f.start + offset, f.end + offset) for f in scanner.scan(line))
        offset += len(line) + 1
    assert whole == parts
