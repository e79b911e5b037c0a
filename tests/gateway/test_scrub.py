"""[OURS] D18: the gateway's scrub of what no event carries, with the `secrets` and `pii` guards' scanners."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mcp import MCPError

from mcp_interceptors.gateway.config import parse_config
from mcp_interceptors.gateway.scrub import Scrubber
from mcp_interceptors.guards._detectors import Finding

#: Assembled, so that this file holds no credential-looking literal.
KEY = "AKIA" + "IOSFODNN7EXAMPLQ"
EMAIL = "bob@" + "example.com"
CARD = "4111 1111 1111 1111"
PHONE = "+44 20 7946 0958"


def scrubber(guards: list[dict[str, Any]], **extra: Any) -> Scrubber:
    config = parse_config({"upstreams": {"u": {"command": "true"}}, "interceptors": {"guards": guards}, **extra})
    found = Scrubber.from_config(config)
    assert found is not None
    return found


class CountingScanner:
    """The real scanner, counting the texts it is given."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.scans = 0

    def scan(self, text: str) -> list[Finding]:
        self.scans += 1
        found: list[Finding] = self.inner.scan(text)
        return found


def test_every_notifications_strings_are_scrubbed_but_identifiers_and_an_updated_resources_uri() -> None:
    scrub = scrubber([{"name": "secrets"}, {"name": "pii"}])
    uri = f"file:///reports/{EMAIL}.txt"
    updated = scrub.notification("notifications/resources/updated", {"uri": uri, "title": f"by {EMAIL}"})
    assert updated == {"uri": uri, "title": "by [REDACTED:email]"}
    changed = scrub.notification("notifications/tools/list_changed", {"_meta": {"why": KEY}})
    assert changed == {"_meta": {"why": "[REDACTED:aws_access_key]"}}
    own = {"requestId": EMAIL, "elicitationId": EMAIL, "progressToken": EMAIL, "note": EMAIL, "count": 3}
    scrubbed = scrub.notification("notifications/acme/status", own)
    assert scrubbed == {**own, "note": "[REDACTED:email]"}
    assert scrub.notification("notifications/acme/status", {"uri": EMAIL}) == {"uri": "[REDACTED:email]"}
    clean = {"status": "fine"}
    assert scrub.notification("notifications/acme/status", clean) is clean


def test_results_no_event_covers_are_scrubbed_unless_turned_off() -> None:
    completed = {"completion": {"values": ["plain", f"path/{KEY}"], "total": 2, "hasMore": False}}
    scrubbed = scrubber([{"name": "secrets"}]).result(completed)
    assert scrubbed["completion"] == {
        "values": ["plain", "path/[REDACTED:aws_access_key]"],
        "total": 2,
        "hasMore": False,
    }
    kept = scrubber([{"name": "secrets"}], scrub={"results": False}).result(completed)
    assert kept is completed


def test_an_error_is_scanned_once_however_many_handlers_it_crosses() -> None:
    scrub = scrubber([{"name": "secrets"}])
    ((scanner, placeholder),) = scrub.scanners
    counting = CountingScanner(scanner.scanner)
    scrub = replace(scrub, scanners=((replace(scanner, scanner=counting, batchable=False), placeholder),))
    leaky = MCPError(-32050, f"boom: {KEY}", {"detail": "nothing here"})
    scrubbed = scrub.error(leaky)
    assert scrubbed.message == "boom: [REDACTED:aws_access_key]"
    scans = counting.scans
    assert scrub.error(scrubbed) is scrubbed
    clean = MCPError(-32050, "boom: nothing here")
    assert scrub.error(clean) is clean
    scans_clean = counting.scans
    assert scrub.error(clean) is clean
    assert (counting.scans, scans) == (scans_clean, scans)


def test_the_pii_scrub_follows_the_guards_kinds_actions_and_invocation_config() -> None:
    """Kinds set to `allow` or left out of `kinds` are not scrubbed; `deny` kinds are, by redaction; the
    guard's `interceptors.config` override is applied as on every invocation."""
    pii = {"name": "pii", "config": {"kinds": ["email", "credit_card", "ip_address"], "kind_actions": {}}}
    pii["config"]["kind_actions"] = {"email": "allow", "credit_card": "deny"}
    text = f"mail {EMAIL} card {CARD} phone {PHONE} ip 10.1.2.3"
    assert scrubber([pii]).value(text) == (
        f"mail {EMAIL} card [REDACTED:credit_card] phone {PHONE} ip [REDACTED:ip_address]"
    )
    override = {"pii": {"kind_actions": {"email": "redact", "ip_address": "allow"}}}
    assert scrubber([pii], interceptors={"guards": [pii], "config": override}).value(text) == (
        f"mail [REDACTED:email] card [REDACTED:credit_card] phone {PHONE} ip 10.1.2.3"
    )
