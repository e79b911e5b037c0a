"""Judges whether an assigned value looks random (a credential) or like a placeholder, word or expression.

Used by the generic-secret rules, whose keyword match (`password=`, `api_key:`) says where a secret would
be but not whether one is there.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter

__all__ = ["has_entropy_at_least", "is_placeholder", "is_random_value", "shannon_entropy"]

# Lower-cased fragments that mark a value as documentation, a template or a masked value.
_PLACEHOLDER_FRAGMENTS = (
    "changeme",
    "change_me",
    "change-me",
    "password",
    "passwd",
    "secret",
    "example",
    "sample",
    "dummy",
    "placeholder",
    "redacted",
    "your_",
    "your-",
    "yourtoken",
    "yourkey",
    "xxxx",
    "****",
    "....",
    "todo",
    "fixme",
    "replace",
    "insert",
    "undefined",
    "notset",
    "not_set",
    "none",
    "null",
    "test",
)


def _literal_trie(words: list[str]) -> str:
    """A pattern matching exactly `words`, as a trie: `re` tries one branch per position instead of each word."""
    by_first: dict[str, list[str]] = {}
    for word in words:
        if word:
            by_first.setdefault(word[0], []).append(word[1:])
    branches = [re.escape(first) + _literal_trie(rests) for first, rests in sorted(by_first.items())]
    body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    if not by_first:
        return ""
    return f"(?:{body})?" if "" in words else body


_PLACEHOLDER = re.compile(_literal_trie(list(_PLACEHOLDER_FRAGMENTS)))
_LOWER = frozenset(string.ascii_lowercase)
_UPPER = frozenset(string.ascii_uppercase)
_DIGITS = frozenset(string.digits)
_ALNUM = _LOWER | _UPPER | _DIGITS
_NAME_CHARS = _LOWER | _UPPER | frozenset("_-.")
_NAME_PAIR = re.compile(r"[A-Za-z_]+=[A-Za-z_]")
# Templates and references: ${VAR}, {{ var }}, <your-key>, %(x)s, $VAR, [hidden], env:NAME, vault:...
# (Its start and end are two patterns: a search for the end alone would try every position.)
_TEMPLATE_START = re.compile(r"\$|%|<|\{|\[|@|env:|vault:|secret:|ref:|file:", re.IGNORECASE)
_TEMPLATE_END = re.compile(r"[<>{}]$")
# Code rather than a literal: dotted names (settings.API_KEY), snake/kebab/camel identifiers and type names
# (user_password, do-not-delete, RefreshTokenT, _TokenType). Random strings almost never take these shapes.
# The camel-case words take their lower-case run possessively (`[a-z]++`): a backtracking split of one run
# into several words is never needed, and trying them all took exponential time in the run's length.
_EXPRESSION = re.compile(
    r"^(?:[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+|[a-z_]+|[A-Z_]+|_*(?:[A-Z]?[a-z]++_?)+[A-Z]?"
    r"|[A-Za-z]+(?:-[A-Za-z]+)+[-*]*)$"
)
_PATHLIKE = re.compile(r"^(?:/|\./|\.\./|~/|[A-Za-z]:\\|[a-z][a-z0-9+.-]*://)")
# What rejects a value by its start alone, in one match: a name=name pair, a template or a path.
_REJECTED_START = re.compile(
    "|".join(f"(?:{pattern.pattern.removeprefix('^')})" for pattern in (_NAME_PAIR, _PATHLIKE))
    + r"|\$|%|<|\{|\[|@|(?i:env|vault|secret|ref|file):"
)
# Longer values are not judged (see is_random_value).
_MAX_VALUE_LENGTH = 512
# n * log2(n) for every count up to that length: the entropy sum looks terms up instead of taking logs.
_N_LOG2_N = (0.0, *(n * math.log2(n) for n in range(1, _MAX_VALUE_LENGTH + 1)))
# A value whose lower-cased form has at most two distinct chars has at most this many distinct chars
# itself: no more than three chars lower to the same one (K, k and the Kelvin sign all give "k"). The
# tests check this against the running interpreter's Unicode database.
_MOST_CHARS_LOWERING_TO_TWO = 6
# Far above the rounding error of a computed entropy (~1e-13), far below any real difference in entropy.
_BOUND_MARGIN = 1e-9


def shannon_entropy(value: str) -> float:
    """Bits per character of `value`'s own character distribution (0.0 for an empty string)."""
    if not value:
        return 0.0
    size = len(value)
    # H = log2(N) - sum(n * log2(n)) / N, over the count n of each distinct character (Counter counts in C).
    counts = Counter(value).values()
    if size <= _MAX_VALUE_LENGTH:
        return math.log2(size) - sum(map(_N_LOG2_N.__getitem__, counts)) / size
    return math.log2(size) - sum(n * math.log2(n) for n in counts) / size


def has_entropy_at_least(value: str, threshold: float, distinct: int | None = None) -> bool:
    """`shannon_entropy(value) >= threshold`, mostly without counting characters.

    With N chars of which k are distinct (`distinct`, if the caller has it), the entropy is at most
    log2(k) (all k equally often) and at least log2(N) - (N-k+1)·log2(N-k+1)/N (one char N-k+1 times,
    the others once). Only a threshold between those bounds, or within float noise of one, needs counting.
    """
    size = len(value)
    if not size:
        return threshold <= 0.0
    k = len(set(value)) if distinct is None else distinct
    if math.log2(k) < threshold - _BOUND_MARGIN:
        return False
    if size <= _MAX_VALUE_LENGTH and math.log2(size) - _N_LOG2_N[size - k + 1] / size >= threshold + _BOUND_MARGIN:
        return True
    return shannon_entropy(value) >= threshold


def is_placeholder(value: str, distinct: int | None = None) -> bool:
    """True for values such as `changeme`, `<your-token>`, `${API_KEY}`, `********` or `xxxx-xxxx`.

    `distinct`, the number of distinct chars in `value` if the caller has it, can spare a count.
    """
    lowered = value.lower()
    # `$` also matches before a final newline, so the end pattern may start two chars from the end.
    is_template = _TEMPLATE_START.match(value) or _TEMPLATE_END.search(value, len(value) - 2)
    few_chars = (distinct is None or distinct <= _MOST_CHARS_LOWERING_TO_TWO) and len(set(lowered)) <= 2
    return bool(is_template or few_chars or _PLACEHOLDER.search(lowered))


def is_random_value(value: str, *, min_length: int = 8) -> bool:
    """True when `value` reads as a generated credential rather than a word, placeholder or expression.

    Needs at least `min_length` chars, two character classes (lower, upper, digit, other), entropy near
    the maximum a string of its length can reach, and none of the placeholder or code shapes.
    """
    if not min_length <= len(value) <= _MAX_VALUE_LENGTH:
        return False
    chars = set(value)
    if " " in chars or "\t" in chars:
        return False  # prose ("Invalid token", "development key"); generated secrets have no blanks
    # (isdisjoint and <= build no intermediate sets.)
    has_digit = not _DIGITS.isdisjoint(chars)
    classes = (not _LOWER.isdisjoint(chars)) + (not _UPPER.isdisjoint(chars)) + has_digit + (not chars <= _ALNUM)
    if classes < 2:
        return False
    # Letters only (plus _ - .) and shorter than 16: a name such as OAuthToken, not a generated value
    # (a random 12-char base62 string has a digit 88 % of the time; longer names meet _EXPRESSION).
    if len(value) < 16 and not has_digit and chars <= _NAME_CHARS:
        return False
    # A call, a trailing glob (ARN patterns: secret:events!*), a name=name pair (keyword arguments:
    # bool=False), a template or a path. (The cheap tests first: every test below must pass for a secret.)
    if (
        "(" in chars
        or value.endswith("*")
        or _REJECTED_START.match(value)
        or _TEMPLATE_END.search(value, len(value) - 2)
    ):
        return False
    # A random string of length n has up to log2(n) bits/char; ask for most of that, capped at 3.0.
    if not has_entropy_at_least(value, min(3.0, math.log2(len(value)) - 0.6), len(chars)):
        return False
    # Only _EXPRESSION's dotted names hold digits: a value with a digit and no "." cannot match it.
    if (not has_digit or "." in chars) and _EXPRESSION.match(value):
        return False
    # The rest of `is_placeholder` (its template tests are above).
    lowered = value.lower()
    few_chars = len(chars) <= _MOST_CHARS_LOWERING_TO_TWO and len(set(lowered)) <= 2
    return not (few_chars or _PLACEHOLDER.search(lowered))
