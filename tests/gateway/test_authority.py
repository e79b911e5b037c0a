from __future__ import annotations

import pytest

from mcp_interceptors.gateway.config import authority


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
