"""The generic-secret value judge (`_entropy`) answers exactly as its earlier, slower formulation did.

The references below are the earlier code, kept verbatim: each faster form must agree with it on every
input, which hypothesis explores over the characters the shapes care about.
"""

from __future__ import annotations

import re

from hypothesis import given
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
