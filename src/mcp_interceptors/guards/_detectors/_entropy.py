"""Judges whether an assigned value looks random (a credential) or like a placeholder, word or expression.

Used by the generic-secret rules, whose keyword match (`password=`, `api_key:`) says where a secret would
be but not whether one is there.
"""

from __future__ import annotations

import math
import re
import string

__all__ = ["is_placeholder", "is_random_value", "shannon_entropy"]

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
_PLACEHOLDER = re.compile("|".join(re.escape(fragment) for fragment in _PLACEHOLDER_FRAGMENTS))
_LOWER = frozenset(string.ascii_lowercase)
_UPPER = frozenset(string.ascii_uppercase)
_DIGITS = frozenset(string.digits)
_ALNUM = _LOWER | _UPPER | _DIGITS
_NAME_CHARS = _LOWER | _UPPER | frozenset("_-.")
_NAME_PAIR = re.compile(r"[A-Za-z_]+=[A-Za-z_]")
# Templates and references: ${VAR}, {{ var }}, <your-key>, %(x)s, $VAR, [hidden], env:NAME, vault:...
_TEMPLATE = re.compile(r"^(?:\$|%|<|\{|\[|@|env:|vault:|secret:|ref:|file:)|[<>{}]$", re.IGNORECASE)
# Code rather than a literal: dotted names (settings.API_KEY), snake/kebab/camel identifiers and type names
# (user_password, do-not-delete, RefreshTokenT, _TokenType). Random strings almost never take these shapes.
# The camel-case words take their lower-case run possessively (`[a-z]++`): a backtracking split of one run
# into several words is never needed, and trying them all took exponential time in the run's length.
_EXPRESSION = re.compile(
    r"^(?:[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+|[a-z_]+|[A-Z_]+|_*(?:[A-Z]?[a-z]++_?)+[A-Z]?"
    r"|[A-Za-z]+(?:-[A-Za-z]+)+[-*]*)$"
)
_PATHLIKE = re.compile(r"^(?:/|\./|\.\./|~/|[A-Za-z]:\\|[a-z][a-z0-9+.-]*://)")


def shannon_entropy(value: str) -> float:
    """Bits per character of `value`'s own character distribution (0.0 for an empty string)."""
    size = len(value)
    if not size:
        return 0.0
    # H = log2(N) - sum(n * log2(n)) / N, with str.count doing the counting in C.
    return math.log2(size) - sum(n * math.log2(n) for n in map(value.count, set(value))) / size


def is_placeholder(value: str) -> bool:
    """True for values such as `changeme`, `<your-token>`, `${API_KEY}`, `********` or `xxxx-xxxx`."""
    lowered = value.lower()
    return bool(_TEMPLATE.search(value) or len(set(lowered)) <= 2 or _PLACEHOLDER.search(lowered))


def is_random_value(value: str, *, min_length: int = 8) -> bool:
    """True when `value` reads as a generated credential rather than a word, placeholder or expression.

    Needs at least `min_length` chars, two character classes (lower, upper, digit, other), entropy near
    the maximum a string of its length can reach, and none of the placeholder or code shapes.
    """
    if not min_length <= len(value) <= 512:
        return False
    chars = set(value)
    if " " in chars or "\t" in chars:
        return False  # prose ("Invalid token", "development key"); generated secrets have no blanks
    classes = bool(chars & _LOWER) + bool(chars & _UPPER) + bool(chars & _DIGITS) + bool(chars - _ALNUM)
    if classes < 2:
        return False
    # Letters only (plus _ - .) and shorter than 16: a name such as OAuthToken, not a generated value
    # (a random 12-char base62 string has a digit 88 % of the time; longer names meet _EXPRESSION).
    if len(value) < 16 and not chars & _DIGITS and chars <= _NAME_CHARS:
        return False
    # A trailing glob or a name=name pair: ARN patterns and keyword arguments (secret:events!*, bool=False).
    if value.endswith("*") or _NAME_PAIR.match(value):
        return False
    # A random string of length n has up to log2(n) bits/char; ask for most of that, capped at 3.0.
    if shannon_entropy(value) < min(3.0, math.log2(len(value)) - 0.6):
        return False
    return not (is_placeholder(value) or _EXPRESSION.match(value) or _PATHLIKE.match(value) or "(" in value)
