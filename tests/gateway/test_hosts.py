"""`hosts.is_allowed`: exact entries, and `name:*` as the name with a port of digits only (F11)."""

from __future__ import annotations

import pytest

from mcp_interceptors.gateway.fronts.hosts import is_allowed

ALLOWED = ["localhost:*", "127.0.0.1:*", "[::1]:*", "localhost", "gateway.example.com:8443", "http://localhost:*"]


@pytest.mark.parametrize(
    ("value", "allowed"),
    [
        ("localhost:8000", True),
        ("localhost", True),
        ("[::1]:65535", True),
        ("gateway.example.com:8443", True),
        ("http://localhost:3000", True),
        ("localhost:evil", False),
        ("localhost:", False),
        ("localhost:123456", False),
        ("127.0.0.1:8000@evil.com", False),
        ("localhost:8000x", False),
        ("localhost.evil.com:80", False),
        ("gateway.example.com:8444", False),
        ("http://localhost:3000.evil.com", False),
    ],
)
def test_f11_a_port_wildcard_is_digits_only(value: str, allowed: bool) -> None:
    assert is_allowed(value, ALLOWED) is allowed
