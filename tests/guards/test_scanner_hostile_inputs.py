"""Hostile 100-200 KB inputs (long runs of one pattern's prefix) must scan in linear time on both engines.

No timing assertion (the machine is shared and noisy): a quadratic regression turns each case from
milliseconds into minutes, which the suite's duration shows at once.
"""

from __future__ import annotations

import pytest

from mcp_interceptors.guards._detectors import PiiScanner, SecretScanner
from mcp_interceptors.guards._detectors._engine import re2

ENGINES = ["re", pytest.param("re2", marks=pytest.mark.skipif(re2 is None, reason="google-re2 not installed"))]

HOSTILE = {
    "hex run": "0123456789abcdef" * 12_500,
    "eyJ repeated": "eyJ" * 60_000,
    "digit run": "1234567890" * 20_000,
    "spaced digit table": "12 " * 60_000,
    "dashed digit groups": "1234-" * 40_000,
    "colon run": "a:" * 100_000,
    "double colons": "a::" * 60_000,
    "dotted digits": "1." * 100_000,
    "email-ish": "@" + "a." * 100_000,
    "BEGIN lines": "-----BEGIN PRIVATE KEY-----\n" * 6_000,
    "keywords": "token=" * 30_000,
    "unterminated quotes": 'token="' * 30_000,
    "plus signs": "+1 " * 60_000,
}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_input_scans_in_linear_time(engine: str, name: str) -> None:
    text = HOSTILE[name]
    secrets = SecretScanner(engine=engine).scan(text)  # type: ignore[arg-type]
    pii = PiiScanner(engine=engine).scan(text)  # type: ignore[arg-type]
    assert secrets == []  # "BEGIN lines": headers without key material are not keys
    assert all(f.kind == "ip_address" for f in pii) if "colon" in name else pii == []


@pytest.mark.parametrize("engine", ENGINES)
def test_long_lower_case_run_in_an_assigned_value_is_judged_in_linear_time(engine: str) -> None:
    # The identifier-shape check once split such a run into camel-case words every possible way: 2^n steps.
    value = "abcdefghijklmnopqrstuvwxyz" * 19 + "7"
    text = f"password = {value}"
    found = SecretScanner(engine=engine).scan(text)  # type: ignore[arg-type]
    assert [(f.kind, text[f.start : f.end]) for f in found] == [("generic_secret", value)]
