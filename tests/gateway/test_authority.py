from __future__ import annotations

import pytest

from mcp_interceptors.gateway.config import authority, is_loopback


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("127.0.0.1", "127.0.0.1:8080"),
        ("localhost", "localhost:8080"),
        ("::1", "[::1]:8080"),
        ("fe80::2", "[fe80::2]:8080"),
    ],
)
def test_authority_brackets_ipv6_hosts_as_urls_need(host: str, expected: str) -> None:
    assert authority(host, 8080) == expected


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("127.0.0.1", True),
        ("127.0.0.2", True),  # all of 127.0.0.0/8 serves this machine only
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("gateway.example.com", False),
    ],
)
def test_only_loopback_binds_go_without_auth(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
