"""The generic-secret value judge (`_entropy`) answers exactly as its earlier, slower formulation did.

The references below are the earlier code, kept verbatim: each faster form must agree with it on every
input, which hypothesis explores over the characters the shapes care about.
"""

from __future__ import annotations

import math
import re
import string
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_interceptors.guards._detectors import _entropy

# Before possessive `[a-z]++`: exponential on a long lower-case run, so only short inputs here.
_REFERENCE_EXPRESSION = re.compile(
    r"^(?:[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+|[a-z_]+|[A-Z_]+|_*(?:[A-Z]?[a-z]+_?)+[A-Z]?"
    r"|[A-Za-z]+(?:-[A-Za-z]+)+[-*]*)$"
)

identifier_like = st.text(alphabet="abzABZ_.-*09", max_size=16)


@given(identifier_like)
def test_expression_shape_matches_what_the_backtracking_pattern_matched(value: str) -> None:
    assert bool(_entropy._EXPRESSION.match(value)) == bool(_REFERENCE_EXPRESSION.match(value))


_REFERENCE_TEMPLATE = re.compile(r"^(?:\$|%|<|\{|\[|@|env:|vault:|secret:|ref:|file:)|[<>{}]$", re.IGNORECASE)


def _reference_entropy(value: str) -> float:
    size = len(value)
    if not size:
        return 0.0
    return math.log2(size) - sum(n * math.log2(n) for n in map(value.count, set(value))) / size


def _reference_is_placeholder(value: str) -> bool:
    lowered = value.lower()
    return bool(_REFERENCE_TEMPLATE.search(value) or len(set(lowered)) <= 2 or _entropy._PLACEHOLDER.search(lowered))


def _reference_is_random_value(value: str) -> bool:
    if not 8 <= len(value) <= 512:
        return False
    chars = set(value)
    if " " in chars or "\t" in chars:
        return False
    lower, upper, digits = set(string.ascii_lowercase), set(string.ascii_uppercase), set(string.digits)
    classes = bool(chars & lower) + bool(chars & upper) + bool(chars & digits) + bool(chars - (lower | upper | digits))
    if classes < 2:
        return False
    if len(value) < 16 and not chars & digits and chars <= lower | upper | set("_-."):
        return False
    if value.endswith("*") or _entropy._NAME_PAIR.match(value):
        return False
    if _reference_entropy(value) < min(3.0, math.log2(len(value)) - 0.6):
        return False
    return not (
        _reference_is_placeholder(value)
        or _entropy._EXPRESSION.match(value)
        or _entropy._PATHLIKE.match(value)
        or "(" in value
    )


# Values as the generic-secret rules capture them, and the shapes the judge tells apart.
values = (
    st.text(alphabet=string.ascii_letters + string.digits + "_-.+/=*${}<>():@ \t\n", max_size=80)
    | st.text(max_size=40)
    | st.sampled_from(["${API_KEY}", "<your-token>", "env:SECRET", "changeme123", "Zx8kq2LmP9wR4tYvB7nQ", "a}\n"])
    | st.text(alphabet="kK\u212aωΩ\u2126İi", min_size=8, max_size=12)
)


@settings(max_examples=400)
@given(values)
def test_value_judgements_match_the_reference(value: str) -> None:
    assert math.isclose(_entropy.shannon_entropy(value), _reference_entropy(value), rel_tol=1e-12, abs_tol=1e-12)
    assert _entropy.is_placeholder(value) == _reference_is_placeholder(value)
    assert _entropy.is_random_value(value) == _reference_is_random_value(value)


def test_entropy_of_values_longer_than_the_table() -> None:
    value = "".join(chr(0x4E00 + i % 900) for i in range(2000))
    assert math.isclose(_entropy.shannon_entropy(value), _reference_entropy(value), rel_tol=1e-12)


@given(values, st.sampled_from([0.0, 1e-15, -1e-15, 1e-10, -1e-10, 1e-8, -1e-8, 0.01, -0.01, 0.5, -0.5]))
def test_entropy_bounds_decide_as_the_count_does(value: str, delta: float) -> None:
    # Thresholds at, and just around, the value's own entropy: where the bounds must defer to counting.
    threshold = _entropy.shannon_entropy(value) + delta
    expected = _entropy.shannon_entropy(value) >= threshold
    assert _entropy.has_entropy_at_least(value, threshold) == expected
    assert _entropy.has_entropy_at_least(value, threshold, len(set(value))) == expected
    for fixed in (2.4, 3.0, 4.0):
        assert _entropy.has_entropy_at_least(value, fixed) == (_entropy.shannon_entropy(value) >= fixed)


def test_entropy_exactly_at_the_threshold_is_counted() -> None:
    sixteen_twice = "abcdefghijklmnop" * 2  # exactly 4.0 bits per char
    assert _entropy.shannon_entropy(sixteen_twice) == 4.0
    assert _entropy.has_entropy_at_least(sixteen_twice, 4.0)
    assert not _entropy.has_entropy_at_least(sixteen_twice, 4.0 + 1e-12)


def test_at_most_six_chars_lower_to_two() -> None:
    # What `_MOST_CHARS_LOWERING_TO_TWO` rests on, over every code point of this interpreter's Unicode.
    lowered_to: dict[frozenset[str], int] = {}
    for code_point in range(sys.maxunicode + 1):
        lowered = frozenset(chr(code_point).lower())
        lowered_to[lowered] = lowered_to.get(lowered, 0) + 1
    singles = sorted((n for chars, n in lowered_to.items() if len(chars) == 1), reverse=True)
    pairs = [
        n + lowered_to.get(frozenset(a), 0) + lowered_to.get(frozenset(b), 0)
        for chars, n in lowered_to.items()
        if len(chars) == 2
        for a, b in [tuple(chars)]
    ]
    assert max([singles[0] + singles[1], *pairs]) <= _entropy._MOST_CHARS_LOWERING_TO_TWO
