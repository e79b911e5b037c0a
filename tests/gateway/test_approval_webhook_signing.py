"""The approval webhook's signatures (HMAC-SHA256 over the body, `sha256=<hex>`) and the URL the audit names."""

from __future__ import annotations

import hashlib
import hmac

from mcp_interceptors.gateway.approvals.webhook import shown_url, sign, signed_by

SECRET = b"a-shared-secret-of-some-length"


def test_a_signature_is_the_hex_hmac_sha256_of_the_exact_body() -> None:
    body = b'{"id":"q1","action":"accept"}'
    assert sign(SECRET, body) == "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    assert signed_by(SECRET, body, sign(SECRET, body))


def test_a_changed_body_another_secret_or_no_header_is_not_signed() -> None:
    body = b'{"id":"q1","action":"decline"}'
    header = sign(SECRET, body)
    assert not signed_by(SECRET, body.replace(b"decline", b"accept"), header)
    assert not signed_by(b"another-secret-entirely", body, header)
    assert not signed_by(SECRET, body, None)
    assert not signed_by(SECRET, body, header.removeprefix("sha256="))


def test_the_audit_names_the_url_without_user_info_query_or_fragment() -> None:
    assert shown_url("https://bot:pw@hooks.example.com:8443/approve?token=abc#x") == (
        "https://hooks.example.com:8443/approve"
    )
    assert shown_url("http://127.0.0.1/approvals") == "http://127.0.0.1/approvals"
