"""The guard-bypass corpus: the encodings an attacker uses to slip a secret or personal data past
`secrets` and `pii`, each through the guard's real invocation path (`guards.load` in a chain), both as a
redacting mutator (nothing the denying form finds is left) and as a denying validator. What the guards
deliberately do not catch is pinned by `LIMITS`, the table of docs/guards.md "Limits"."""

from __future__ import annotations

import base64
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from guard_support import run_chain, tool_call

from mcp_interceptors import MutationResult, guards

pytestmark = pytest.mark.anyio

AWS = "AKIAQYLPMN5HHHFPZAM2"
GITHUB = "ghp_" + "Zq8xR2mT5vW9yB3nK6pL1sD4fG7hJ0aC2eF5"
STRIPE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
EMAIL = "jane.doe@example.com"
CARD = "4111111111111111"


def fullwidth(text: str) -> str:
    return "".join(chr(ord(char) + 0xFEE0) if "!" <= char <= "~" else char for char in text)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def b64url(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def request(value: Any) -> dict[str, Any]:
    return tool_call("save_note", text=value)


def result(content: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"content": content, "isError": False, **extra}


def nested(value: Any, depth: int) -> dict[str, Any]:
    for index in range(depth):
        value = {f"level{index}": [value]}
    return value


#: (case, guard, phase, payload, kind): each must be found by the guard in both its forms.
CASES: list[tuple[str, str, str, Any, str]] = [
    # F1: a token glued to the letter or digit that ends an escape.
    ("percent-escaped =", "secrets", "request", request(f"token%3D{GITHUB}"), "github_token"),
    ("percent-escaped = before AKIA", "secrets", "request", request(f"key%3D{AWS}"), "aws_access_key"),
    ("percent-escaped space after Bearer", "secrets", "request", request(f"Bearer%20{STRIPE}"), "stripe_key"),
    ("escaped newline", "secrets", "request", request(f"line1\\n{GITHUB}"), "github_token"),
    ("escaped tab", "secrets", "request", request(f"id:\\t{AWS}"), "aws_access_key"),
    ("escaped tab before an SSN", "pii", "request", request("ssn:\\t536-22-1234"), "us_ssn"),
    ("escaped newline before a card", "pii", "request", request(f"line1\\n{CARD}"), "credit_card"),
    # F2: encodings.
    ("percent-encoded email", "pii", "request", request(urllib.parse.quote(EMAIL)), "email"),
    (
        "every byte percent-encoded",
        "secrets",
        "request",
        request("".join(f"%{b:02X}" for b in AWS.encode())),
        "aws_access_key",
    ),
    (
        "percent-encoded query value",
        "secrets",
        "request",
        request("https://x.example/?k=" + urllib.parse.quote(f"AKIA{AWS[4:]}", safe="")),
        "aws_access_key",
    ),
    ("double percent-encoding", "pii", "request", request(EMAIL.replace("@", "%2540")), "email"),
    ("HTML decimal entity", "pii", "request", request("jane.doe&#64;example.com"), "email"),
    ("HTML hex entity", "pii", "request", request("jane.doe&#x40;example.com"), "email"),
    ("HTML named entity", "pii", "request", request("jane.doe&commat;example.com"), "email"),
    ("base64 of a whole value", "secrets", "request", request(b64(f"key={AWS}")), "aws_access_key"),
    ("base64url without padding", "secrets", "request", request(b64url(f"key {AWS}??>")), "aws_access_key"),
    ("double base64", "secrets", "request", request(b64(b64(f"key={AWS}"))), "aws_access_key"),
    (
        "base64 in a URL query",
        "secrets",
        "request",
        request("https://x.example/cb?d=" + b64url(f"k={AWS}")),
        "aws_access_key",
    ),
    ("base64 after key=", "pii", "request", request("payload=" + b64(f"mail {EMAIL}")), "email"),
    ("hex of a value", "secrets", "request", request(f"key={AWS}".encode().hex()), "aws_access_key"),
    ("upper-case hex", "pii", "request", request(f"to {EMAIL}".encode().hex().upper()), "email"),
    ("backslash-u escapes", "secrets", "request", request("\\u0041\\u004B" + AWS[2:]), "aws_access_key"),
    ("backslash-u escaped @", "pii", "request", request("jane.doe\\u0040example.com"), "email"),
    # F3: invisible and look-alike characters.
    ("zero-width space in a token", "secrets", "request", request(AWS[:8] + "\u200b" + AWS[8:]), "aws_access_key"),
    (
        "zero-width joiner in a token",
        "secrets",
        "request",
        request(GITHUB[:10] + "\u200d" + GITHUB[10:]),
        "github_token",
    ),
    ("word joiner in a token", "secrets", "request", request(STRIPE[:9] + "\u2060" + STRIPE[9:]), "stripe_key"),
    ("bidi override in a token", "secrets", "request", request(AWS[:4] + "\u202e" + AWS[4:]), "aws_access_key"),
    ("bidi isolate in an email", "pii", "request", request("jane.doe\u2066@example.com"), "email"),
    ("soft hyphen in an email", "pii", "request", request("jane\u00ad.doe@example.com"), "email"),
    ("zero-width spaces in a card", "pii", "request", request("4111\u200b1111\u200b1111\u200b1111"), "credit_card"),
    ("soft hyphens in a card", "pii", "request", request("4111\u00ad1111\u00ad1111\u00ad1111"), "credit_card"),
    ("fullwidth letters", "secrets", "request", request(fullwidth(AWS)), "aws_access_key"),
    ("fullwidth at sign", "pii", "request", request("jane.doe\uff20example.com"), "email"),
    ("fullwidth digits", "pii", "request", request(fullwidth("4111 1111 1111 1111")), "credit_card"),
    (
        "mathematical bold letters",
        "secrets",
        "request",
        request("".join(chr(0x1D400 + ord(c) - 65) if c.isupper() else c for c in AWS)),
        "aws_access_key",
    ),
    ("combining accent in a token", "secrets", "request", request(AWS[:5] + "\u0301" + AWS[5:]), "aws_access_key"),
    # F4: numbers and layouts.
    ("card with dots", "pii", "request", request("4111.1111.1111.1111"), "credit_card"),
    ("card as a JSON integer", "pii", "response", result([], structuredContent={"card": int(CARD)}), "credit_card"),
    ("card as a JSON float", "pii", "response", result([], structuredContent={"card": float(CARD)}), "credit_card"),
    (
        "card as an exponent float",
        "pii",
        "response",
        result([], structuredContent={"card": 4.111111111111111e15}),
        "credit_card",
    ),
    # Where in the payload.
    ("deep nesting", "secrets", "request", request(nested(f"key {AWS}", 90)), "aws_access_key"),
    ("structuredContent", "secrets", "response", result([], structuredContent={"env": {"AWS": AWS}}), "aws_access_key"),
    (
        "embedded resource text",
        "secrets",
        "response",
        result([{"type": "resource", "resource": {"uri": "file:///.env", "text": f"K={AWS}"}}]),
        "aws_access_key",
    ),
    (
        "embedded resource blob",
        "pii",
        "response",
        result([{"type": "resource", "resource": {"uri": "file:///c", "blob": b64(f"mail {EMAIL}\n")}}]),
        "email",
    ),
    (
        "resource link description",
        "pii",
        "response",
        result([{"type": "resource_link", "uri": "file:///x", "name": "x", "description": f"owner {EMAIL}"}]),
        "email",
    ),
    (
        "tool-call _meta",
        "secrets",
        "request",
        {"method": "tools/call", "params": {"name": "x", "arguments": {}, "_meta": {"k": AWS}}},
        "aws_access_key",
    ),
    ("escapes inside base64", "secrets", "request", request(b64(f"token%3D{GITHUB}")), "github_token"),
    (
        "zero-width inside percent-encoding",
        "secrets",
        "request",
        request(urllib.parse.quote(AWS[:4] + "\u200b" + AWS[4:])),
        "aws_access_key",
    ),
]

#: (case, guard, payload): what `secrets`/`pii` deliberately do not catch (docs/guards.md, Limits).
LIMITS: list[tuple[str, str, Any]] = [
    ("split across two arguments", "secrets", tool_call("save", a=AWS[:10], b=AWS[10:])),
    ("split across two lines", "secrets", request(f"{AWS[:10]}\n{AWS[10:]}")),
    ("a blob inside prose", "secrets", request(f"here it is {b64(f'key={AWS}')} as asked")),
    ("letters spelled out", "secrets", request(" ".join(AWS))),
    ("a key in a mapping key, redacting", "secrets", tool_call("save", **{AWS: "value"})),
    (
        "ROT13",
        "secrets",
        request(AWS.translate(str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "NOPQRSTUVWXYZABCDEFGHIJKLM"))),
    ),
    ("card digits in an array", "pii", result([], structuredContent={"card": [4111, 1111, 1111, 1111]})),
]


@pytest.mark.parametrize(("case", "guard", "phase", "payload", "kind"), CASES, ids=[c[0] for c in CASES])
async def test_bypass_attempt_is_redacted_and_denied(
    case: str, guard: str, phase: str, payload: Any, kind: str
) -> None:
    redacted = await run_chain(guards.load(guard), "tools/call", phase, payload)
    assert redacted.status == "success"
    mutation = redacted.results[0]
    assert isinstance(mutation, MutationResult) and kind in mutation.info["redacted"], case
    deny = guards.load(guard, {"action": "deny"})
    denied = await run_chain(deny, "tools/call", phase, payload)
    assert denied.status == "validation_failed", case
    [validation] = denied.results
    assert any(m.message.endswith(f"found: {kind}") for m in validation.messages or ()), validation.messages
    # Whatever the reading, nothing the denying form finds is left after redaction.
    leftover = await run_chain(deny, "tools/call", phase, redacted.final_payload)
    assert leftover.status == "success", (case, redacted.final_payload)


@pytest.mark.parametrize(("case", "guard", "payload"), LIMITS, ids=[c[0] for c in LIMITS])
async def test_documented_limit_passes(case: str, guard: str, payload: Any) -> None:
    outcome = await run_chain(guards.load(guard), "tools/call", "request", payload)
    assert outcome.status == "success" and outcome.final_payload == payload, case


def test_every_limit_is_in_the_docs_table() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "guards.md").read_text()
    limits = docs[docs.index("## Limits") :]
    for case, _, _ in LIMITS:
        assert f"| {case} |" in limits, case


async def test_a_key_in_a_mapping_key_is_denied_with_scan_keys() -> None:
    host = guards.load("secrets", {"action": "deny", "scan_keys": True})
    outcome = await run_chain(host, "tools/call", "request", tool_call("save", **{AWS: "value"}))
    assert outcome.status == "validation_failed"


async def test_a_value_split_across_arguments_is_caught_by_exfiltration_guard() -> None:
    host = guards.load("exfiltration-guard")
    read = {"content": [{"type": "text", "text": f"aws_access_key_id = {AWS}"}]}
    await run_chain(host, "tools/call", "response", read, server="A", sessionId="s")
    sent = await run_chain(
        host, "tools/call", "request", tool_call("save", a=AWS[:10], b=AWS[10:]), server="B", sessionId="s"
    )
    assert sent.status == "validation_failed"


@pytest.mark.parametrize(
    ("encode", "case"),
    [
        (lambda v: v[:8] + "\u200b" + v[8:], "zero-width"),
        (lambda v: "&#65;" + v[1:], "HTML entity"),
        (lambda v: "\\u0041" + v[1:], "backslash-u"),
        (fullwidth, "fullwidth"),
    ],
)
async def test_exfiltration_guard_reads_outgoing_text_undone(encode: Callable[[str], str], case: str) -> None:
    host = guards.load("exfiltration-guard")
    read = {"content": [{"type": "text", "text": f"aws_access_key_id = {AWS}"}]}
    await run_chain(host, "tools/call", "response", read, server="A", sessionId="s")
    sent = await run_chain(
        host, "tools/call", "request", tool_call("save", text=encode(AWS)), server="B", sessionId="s"
    )
    assert sent.status == "validation_failed", case


@pytest.mark.parametrize("action", ["redact", "deny"])
async def test_a_skipped_aws_example_key_is_logged_at_debug_without_the_key(
    action: str, caplog: pytest.LogCaptureFixture
) -> None:
    host = guards.load("secrets", {"action": action})
    payload = tool_call("save", text="try AKIAIOSFODNN7EXAMPLE", other="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    with caplog.at_level("DEBUG", logger="mcp_interceptors.guards.secrets"):
        outcome = await run_chain(host, "tools/call", "request", payload)
    assert outcome.status == "success" and outcome.final_payload == payload  # skipped on purpose
    lines = [r.getMessage() for r in caplog.records if r.name == "mcp_interceptors.guards.secrets"]
    why = "(AWS documentation keys never authenticate)"
    assert lines == [
        f"guard 'secrets': known example key skipped at $.params.arguments.text {why}",
        f"guard 'secrets': known example key skipped at $.params.arguments.other {why}",
    ]
    assert "AKIAIOSFODNN7EXAMPLE" not in caplog.text and "EXAMPLEKEY" not in caplog.text


#: Clean text that looks encoded: the readings must not make findings of it (precision).
NEAR_MISSES = [
    "https://example.com/search?q=hello%20world&lang=en&page=2%2F3",
    "<p>Fish &amp; chips &mdash; &#8220;quoted&#8221; &nbsp;caf&eacute; &#x2764;</p>",
    'line one\\nline two\\tTabbed \\u00e9t\\u00e9 \\"quoted\\" C:\\\\new\\\\test',
    "commit 148793670389a403194d774dd481c6b5be33fcba, digest sha256:"
    + "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "id 550e8400-e29b-41d4-a716-446655440000 and 123e4567-e89b-12d3-a456-426614174000",
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
    b64("The quick brown fox jumps over the lazy dog, twice over."),
    b"The quick brown fox jumps over".hex(),
    "東京都千代田区"
    + fullwidth("1-2-3")
    + "、電話"
    + fullwidth(":")
    + "予約は"
    + fullwidth("(")
    + "午前"
    + fullwidth(")")
    + fullwidth("10")
    + "時から。"
    + fullwidth("ABC")
    + "株式会社",
    "family 👨\u200d👩\u200d👧 and flags 🏳\ufe0f\u200d🌈, soft\u00adhyphen",
    "مَرْحَبًا بِكُمْ and Zu\u0308rich and e\u0301te\u0301",
    "price 1.234.567,89 EUR; version 4.1.1.1; build 2024.11.30.1234",
    "total 4111.1111 and 1111.1111 kg",
    "eyJhbGciOiJIUzI1NiJ9 is only a header",
    "%41%42%43 %7B%22a%22%3A1%7D " + urllib.parse.quote("name=José&city=Zürich"),
]


@pytest.mark.parametrize("text", NEAR_MISSES)
@pytest.mark.parametrize("guard", ["secrets", "pii"])
async def test_encoded_clean_text_is_not_a_finding(guard: str, text: str) -> None:
    outcome = await run_chain(guards.load(guard), "tools/call", "request", request(text))
    assert outcome.status == "success" and outcome.final_payload == request(text), outcome.results
