"""Merging overlapping findings, redaction, the regex engine seam and the optional Presidio backend."""

from __future__ import annotations

import itertools
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_interceptors.guards._detectors import Finding, merge_findings, redact
from mcp_interceptors.guards._detectors._engine import CompiledPattern, ScanText, re2, re2_binding, resolve_engine
from mcp_interceptors.guards._detectors.findings import inside_any, merge_spans
from mcp_interceptors.guards._detectors.presidio import PresidioPiiScanner, load_presidio_scanner

RANK = {"generic_secret": 1}


@pytest.mark.parametrize(
    ("findings", "merged"),
    [
        ([], []),
        ([Finding("a", 5, 9), Finding("b", 0, 3)], [Finding("b", 0, 3), Finding("a", 5, 9)]),
        ([Finding("a", 0, 3), Finding("b", 3, 6)], [Finding("a", 0, 3), Finding("b", 3, 6)]),  # adjacent stay
        ([Finding("phone", 2, 8), Finding("credit_card", 0, 16)], [Finding("credit_card", 0, 16)]),
        ([Finding("short", 0, 4), Finding("long", 2, 12)], [Finding("long", 0, 12)]),  # union, longest names it
        ([Finding("generic_secret", 4, 9), Finding("jwt", 4, 9)], [Finding("jwt", 4, 9)]),  # rank breaks ties
        ([Finding("x", 0, 5), Finding("x", 0, 5)], [Finding("x", 0, 5)]),
        ([Finding("a", 0, 4), Finding("b", 3, 7), Finding("c", 6, 10)], [Finding("a", 0, 10)]),  # chains fuse
    ],
)
def test_merge_fuses_overlaps(findings: list[Finding], merged: list[Finding]) -> None:
    assert merge_findings(findings, RANK) == merged


spans = st.lists(st.tuples(st.integers(0, 60), st.integers(1, 15)), max_size=12).map(
    lambda pairs: [Finding(f"k{i % 3}", s, s + n) for i, (s, n) in enumerate(pairs)]
)


@given(spans)
def test_merged_findings_are_sorted_disjoint_and_cover_the_input(findings: list[Finding]) -> None:
    merged = merge_findings(findings)
    assert all(a.end <= b.start for a, b in itertools.pairwise(merged))
    covered = {i for f in findings for i in range(f.start, f.end)}
    assert {i for f in merged for i in range(f.start, f.end)} == covered


@given(spans)
def test_redaction_is_well_formed(findings: list[Finding]) -> None:
    text = "abcdefghijklmnopqrstuvwxyz" * 3
    out = redact(text, findings, placeholder=lambda f: "#")
    kept = [ch for i, ch in enumerate(text) if not any(f.start <= i < f.end for f in findings)]
    assert out.replace("#", "") == "".join(kept)
    assert out.count("#") == len(merge_findings(findings))


def test_redact_default_placeholder() -> None:
    text = "mail bob@example.com now"
    assert redact(text, [Finding("email", 5, 20)]) == "mail [REDACTED:email] now"
    assert redact(text, []) is text


def test_scan_text_maps_byte_offsets_to_chars() -> None:
    text = "aé😀b東c"
    scan = ScanText(text)
    byte_at = [len(text[:char_index].encode()) for char_index in range(len(text) + 1)]
    pairs = list(itertools.combinations_with_replacement(range(len(text) + 1), 2))
    assert scan.char_spans([(byte_at[a], byte_at[b]) for a, b in pairs]) == pairs  # backwards restarts the count


@pytest.mark.skipif(re2 is None, reason="google-re2 not installed")
def test_both_engines_report_the_same_char_spans() -> None:
    text = "Grüße AKIAFAKEFAKEFAKEFAKE 東京 AKIAFAKEFAKEFAKEFAKE"
    pattern = "AKIA[A-Z]{16}"
    scan = ScanText(text)
    assert list(CompiledPattern(pattern, "re").spans(scan)) == list(CompiledPattern(pattern, "re2").spans(scan))


@pytest.mark.skipif(re2 is None, reason="google-re2 not installed")
def test_re2_patterns_run_through_the_binding() -> None:
    # The fast path must be the one in use: a google-re2 release that moves its binding shows up here.
    assert re2_binding is not None


@pytest.mark.skipif(re2 is None, reason="google-re2 not installed")
@pytest.mark.parametrize(
    ("pattern", "groups"),
    [
        ("AKIA[A-Z]{4}", (0,)),
        ("x*", (0,)),  # empty matches: the search moves one byte on, as finditer does
        ("(?i:key)=(?:\"([^\"]+)\"|'([^']+)'|([^ ]+))", (1, 2, 3)),
        ("(a)?b", (1,)),  # a group that takes no part falls back to the whole match
    ],
)
def test_binding_spans_equal_the_wrapper_finditer(pattern: str, groups: tuple[int, ...]) -> None:
    texts = ["", "xx", "AKIAABCD AKIAEFGH", "Grüße AKIAABCD 東京 xax", "key=\"v1\" KEY='v2' key=v3 b ab", "é" * 5 + "x"]
    fast = CompiledPattern(pattern, "re2")
    for text in texts:
        scan = ScanText(text)
        matches = re2.compile(pattern).finditer(text)
        expected = [next((m.span(g) for g in groups if m.span(g)[0] >= 0), m.span()) for m in matches]
        assert fast.spans(scan, groups) == expected, text


def test_resolve_engine() -> None:
    assert resolve_engine("re") == "re"
    assert resolve_engine("auto") == ("re2" if re2 is not None else "re")


def test_presidio_missing_raises_a_clear_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "presidio_analyzer", None)
    with pytest.raises(ImportError, match=r"pip install 'mcp-interceptors\[presidio\]'"):
        load_presidio_scanner()


def test_presidio_backend_maps_kinds() -> None:
    pytest.importorskip("presidio_analyzer.nlp_engine", exc_type=ImportError)
    scanner = PresidioPiiScanner(kinds=["email", "credit_card", "iban"])
    text = "mail bob@example.com card 4242 4242 4242 4242 iban DE89 3704 0044 0532 0130 00"
    assert [(f.kind, text[f.start : f.end]) for f in scanner.scan(text)] == [
        ("email", "bob@example.com"),
        ("credit_card", "4242 4242 4242 4242"),
        ("iban", "DE89 3704 0044 0532 0130 00"),
    ]


def _reference_merge(findings: list[Finding], ranks: dict[str, int]) -> list[Finding]:
    """The merge as first written, one `Finding` per input: `merge_spans` must agree with it exactly. (Ties
    in start, length and rank go to the kind name that sorts first, not to the first one reported.)"""
    ordered = sorted(findings, key=lambda f: (f.start, -(f.end - f.start), ranks.get(f.kind, 0), f.kind))
    merged: list[Finding] = []
    best: Finding | None = None
    merged_start, end = 0, -1
    for finding in ordered:
        if best is not None and finding.start < end:
            end = max(end, finding.end)
            c_len, h_len = finding.end - finding.start, best.end - best.start
            if c_len > h_len or (c_len == h_len and ranks.get(finding.kind, 0) < ranks.get(best.kind, 0)):
                best = finding
            continue
        if best is not None:
            merged.append(Finding(best.kind, merged_start, end))
        best, merged_start, end = finding, finding.start, finding.end
    if best is not None:
        merged.append(Finding(best.kind, merged_start, end))
    return merged


# Few starts, lengths and kinds, so that ties in every sort key (and empty spans) are common.
tied_spans = st.lists(
    st.tuples(st.integers(0, 12), st.integers(0, 4), st.sampled_from(["jwt", "generic_secret", "email", "phone"])),
    max_size=14,
).map(lambda triples: [Finding(kind, s, s + n) for s, n, kind in triples])


@given(tied_spans, st.sampled_from([{}, RANK, {"phone": 2, "email": 1}]))
def test_merge_matches_the_reference_merge(findings: list[Finding], ranks: dict[str, int]) -> None:
    spans = [f for f in findings if f.end > f.start]  # an empty finding covers nothing: dropped
    expected = _reference_merge(spans, ranks)
    assert merge_findings(findings, ranks) == expected
    assert merge_spans([(f.start, f.end, f.kind) for f in spans], ranks) == expected


@given(
    # Up to 40 spans: `inside_any` compares a candidate with each of a few spans and bisects many.
    st.lists(st.tuples(st.integers(0, 40), st.integers(1, 8), st.sampled_from(["jwt", "email", "phone"])), max_size=40),
    st.integers(0, 44),
    st.integers(1, 8),
)
def test_inside_any_answers_for_each_candidate_and_a_lowest_ranked_one_inside_changes_no_merge(
    triples: list[tuple[int, int, str]], start: int, length: int
) -> None:
    """The scanners skip a candidate of their lowest-ranked kind inside a finding they already have: what
    they return must be what adding it would have given (ranks as the PII scanner's, phone last)."""
    ranks = {"phone": 2, "email": 1}
    found = [(s, s + n, kind) for s, n, kind in triples]
    end = start + length
    inside = inside_any(found)(start, end)
    assert inside == any(s <= start and end <= e for s, e, _ in found)
    if inside:
        assert merge_spans([*found, (start, end, "phone")], ranks) == merge_spans(found, ranks)


@pytest.mark.parametrize("count", [1, 40])
def test_inside_any_answers_for_the_spans_it_was_given(count: int) -> None:
    # The scanners append to the list while testing candidates against it: the answer stays the one for the
    # spans given, whichever way (few or many spans) it is worked out.
    found = [(i * 10, i * 10 + 5, "email") for i in range(count)]
    inside = inside_any(found)
    found.append((1000, 1020, "iban"))
    assert inside(0, 5)
    assert not inside(1005, 1010)
    assert not inside(3, 8)
