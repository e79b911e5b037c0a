"""secrets and pii: redaction in place (typed placeholders, untouched input, no copy when clean), denial with
JSON paths, per-kind actions, and near misses that must pass through. The scanners themselves are tested
in test_secret_scanner.py / test_pii_scanner.py; here it is the guard around them."""

from __future__ import annotations

import base64
import copy
from typing import Any

import anyio
import mcp_types
import pytest
from fakes import connect, raw_call
from guard_support import messages, run_chain, tool_call
from mcp import MCPError

from mcp_interceptors import MutationResult, guards
from mcp_interceptors.guards._detectors import PiiScanner, SecretScanner
from mcp_interceptors.guards._scanning import TextScanner

pytestmark = pytest.mark.anyio

AWS = "AKIAQYLPMN5HHHFPZAM2"
GITHUB = "ghp_" + "Zq8xR2mT5vW9yB3nK6pL1sD4fG7hJ0aC2eF5"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)


def result_payload(*texts: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": t} for t in texts], "isError": False}


async def test_secrets_redacts_with_typed_placeholders_in_requests_and_results() -> None:
    host = guards.load("secrets")
    request = tool_call("save_note", name="creds", text=f"key={AWS} token {GITHUB}")
    before = copy.deepcopy(request)
    outcome = await run_chain(host, "tools/call", "request", request)
    assert outcome.status == "success"
    assert outcome.final_payload == tool_call(
        "save_note", name="creds", text="key=[REDACTED:aws_access_key] token [REDACTED:github_token]"
    )
    assert request == before  # the input is never mutated
    mutation = outcome.results[0]
    assert isinstance(mutation, MutationResult)
    assert mutation.info == {"redacted": {"aws_access_key": 1, "github_token": 1}, "paths": ["$.params.arguments.text"]}

    response = await run_chain(host, "tools/call", "response", result_payload("fine", f"jwt: {JWT}"))
    assert response.final_payload == result_payload("fine", "jwt: [REDACTED:jwt]")


@pytest.mark.parametrize(
    "text",
    [
        "AKIA is the prefix of AWS access key ids",
        "AKIAQYLPMN5HHHFPZAM",  # one character short
        "the password field is required",
        "password=changeme",  # a placeholder, not a secret
        "ghp_ is a GitHub prefix",
        "eyJhbGciOiJIUzI1NiJ9 alone is only a header",
        "sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    ],
)
async def test_secrets_near_misses_pass_untouched(text: str) -> None:
    host = guards.load("secrets")
    payload = tool_call("echo", text=text)
    outcome = await run_chain(host, "tools/call", "request", payload)
    assert outcome.status == "success"
    assert outcome.final_payload is payload  # nothing found: no copy was made
    assert isinstance(outcome.results[0], MutationResult) and outcome.results[0].modified is False


async def test_secrets_deny_names_kind_and_path_never_the_value() -> None:
    host = guards.load("secrets", {"action": "deny"})
    payload = {"content": [{"type": "text", "text": "ok"}], "structuredContent": {"env": {"AWS_KEY": AWS}}}
    outcome = await run_chain(host, "tools/call", "response", payload)
    assert outcome.status == "validation_failed"
    assert outcome.aborted_at is not None and outcome.aborted_at.interceptor == "secrets"
    assert messages(outcome) == [("$.structuredContent.env.AWS_KEY", "credential found: aws_access_key")]
    assert AWS not in str(outcome.to_wire())


async def test_secrets_deny_scans_keys_when_asked_and_never_quotes_them_in_paths() -> None:
    host = guards.load("secrets", {"action": "deny", "scan_keys": True})
    with anyio.fail_after(5):
        outcome = await run_chain(host, "tools/call", "request", tool_call("x", **{AWS: {"note": GITHUB}}))
    key = '$.params.arguments["[REDACTED:aws_access_key]"]'
    assert messages(outcome) == [
        (f"{key}~", "credential found: aws_access_key"),
        (f"{key}.note", "credential found: github_token"),  # a path through the key hides it too
    ]
    assert AWS not in str(outcome.to_wire())


def blob_read(text: str | bytes) -> dict[str, Any]:
    """A resources/read result whose one content is `text` as a base64 blob."""
    data = text.encode() if isinstance(text, str) else text
    blob = base64.b64encode(data).decode()
    return {"contents": [{"uri": "file:///app/.env", "mimeType": "text/plain", "blob": blob}]}


async def test_secrets_and_pii_read_base64_text_blobs_and_redact_inside_them() -> None:
    payload = blob_read(f"AWS_ACCESS_KEY_ID={AWS}\nowner=jane.doe@example.com\n")
    redacted = await run_chain(guards.load("secrets"), "resources/read", "response", payload)
    assert redacted.status == "success"
    blob = base64.b64decode(redacted.final_payload["contents"][0]["blob"]).decode()
    assert blob == "AWS_ACCESS_KEY_ID=[REDACTED:aws_access_key]\nowner=jane.doe@example.com\n"
    redacted = await run_chain(guards.load("pii"), "resources/read", "response", redacted.final_payload)
    blob = base64.b64decode(redacted.final_payload["contents"][0]["blob"]).decode()
    assert blob == "AWS_ACCESS_KEY_ID=[REDACTED:aws_access_key]\nowner=[REDACTED:email]\n"
    denied = await run_chain(guards.load("secrets", {"action": "deny"}), "resources/read", "response", payload)
    assert messages(denied) == [("$.contents[0].blob", "credential found: aws_access_key")]


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("width", [76, 64])
async def test_secrets_and_pii_read_line_wrapped_base64_and_keep_its_layout(newline: str, width: int) -> None:
    # `base64` (coreutils), MIME and PEM bodies wrap base64 in lines; a tool returning such a file is common.
    text = "# settings\n" * 8 + f"AWS_ACCESS_KEY_ID={AWS}\nowner=jane.doe@example.com\n"
    encoded = base64.b64encode(text.encode()).decode()
    wrapped = newline.join(encoded[i : i + width] for i in range(0, len(encoded), width)) + newline
    payload = {"contents": [{"uri": "file:///app/.env.b64", "mimeType": "text/plain", "text": wrapped}]}
    denied = await run_chain(guards.load("secrets", {"action": "deny"}), "resources/read", "response", payload)
    assert messages(denied) == [("$.contents[0].text", "credential found: aws_access_key")]
    redacted = await run_chain(guards.load("pii"), "resources/read", "response", payload)
    out = redacted.final_payload["contents"][0]["text"]
    lines = out.split(newline)
    assert lines[-1] == "" and all(len(line) == width for line in lines[:-2]) and 0 < len(lines[-2]) <= width
    assert base64.b64decode(out.replace(newline, "")).decode() == text.replace(
        "jane.doe@example.com", "[REDACTED:email]"
    )
    binary = base64.encodebytes(b"\x89PNG\r\n\x1a\n" + AWS.encode() + bytes(range(256))).decode()
    image = {"contents": [{"uri": "file:///a.png.b64", "mimeType": "text/plain", "text": binary}]}
    untouched = await run_chain(guards.load("secrets"), "resources/read", "response", image)
    assert untouched.status == "success" and untouched.final_payload == image  # binary is not text


def enveloped_call(client_name: str) -> dict[str, Any]:
    """A 2026-07-28 `tools/call` with the era's `_meta` envelope, whose `clientInfo` name the client chose."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": client_name, "version": "1.0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    return {"method": "tools/call", "params": {"name": "echo", "arguments": {"text": "hi there"}, "_meta": meta}}


def stamped_result(server_name: str) -> dict[str, Any]:
    """A 2026-07-28 `tools/call` result with the `serverInfo` stamp, whose name the upstream chose."""
    stamp = {"io.modelcontextprotocol/serverInfo": {"name": server_name, "version": "1.0.0"}}
    return {**result_payload("ok"), "resultType": "complete", "_meta": stamp}


CLIENT_NAME_PATH = '$.params._meta["io.modelcontextprotocol/clientInfo"].name'
SERVER_NAME_PATH = '$._meta["io.modelcontextprotocol/serverInfo"].name'


@pytest.mark.parametrize(
    "encode",
    [
        lambda text: base64.b64encode(text.encode()).decode(),
        lambda text: base64.urlsafe_b64encode(text.encode()).decode().rstrip("="),
        lambda text: text.encode().hex(),
    ],
    ids=["base64", "base64url", "hex"],
)
async def test_secrets_and_pii_find_encoded_values_in_the_2026_07_28_envelope_every_time(encode: Any) -> None:
    # The envelope's values come again on every call and their readings are remembered: each call must
    # still find (and redact inside) what the client or upstream hid there, not only the first one.
    secret, email = encode(f"key={AWS}"), encode("owner=jane.doe@example.com")
    deny_secrets = guards.load("secrets", {"action": "deny"})
    deny_pii = guards.load("pii", {"action": "deny"})
    for _ in range(3):
        clean = await run_chain(deny_secrets, "tools/call", "request", enveloped_call("mcp-interceptors-bench"))
        assert clean.status == "success"
        denied = await run_chain(deny_secrets, "tools/call", "request", enveloped_call(secret))
        assert messages(denied) == [(CLIENT_NAME_PATH, "credential found: aws_access_key")]
        denied = await run_chain(deny_pii, "tools/call", "response", stamped_result(email))
        assert [path for path, _ in messages(denied)] == [SERVER_NAME_PATH]
        redacted = await run_chain(guards.load("secrets"), "tools/call", "request", enveloped_call(secret))
        name = redacted.final_payload["params"]["_meta"]["io.modelcontextprotocol/clientInfo"]["name"]
        assert name.rstrip("=") == encode("key=[REDACTED:aws_access_key]").rstrip("=")  # base64's padding
        redacted = await run_chain(guards.load("pii"), "tools/call", "response", stamped_result(email))
        name = redacted.final_payload["_meta"]["io.modelcontextprotocol/serverInfo"]["name"]
        assert name.rstrip("=") == encode("owner=[REDACTED:email]").rstrip("=")


@pytest.mark.parametrize(
    "blob",
    [
        b"\x89PNG\r\n\x1a\n" + AWS.encode() + bytes(range(256)),  # binary data is not text: not read decoded
        "AKIA only",  # base64 too short to hold anything
    ],
)
async def test_secrets_leave_binary_blobs_and_short_base64_alone(blob: str | bytes) -> None:
    payload = blob_read(blob)
    outcome = await run_chain(guards.load("secrets"), "resources/read", "response", payload)
    assert outcome.status == "success" and outcome.final_payload == payload


async def test_secrets_allowlist_kinds_placeholder_and_extra_patterns() -> None:
    host = guards.load(
        "secrets",
        {
            "allow": [AWS],
            "kinds": ["aws_access_key", "github_token"],
            "placeholder": "<{kind}>",
            "extra_patterns": {"acme_key": r"acme_(?P<secret>[0-9a-f]{16})"},
        },
    )
    payload = tool_call("x", a=AWS, b=GITHUB, c=JWT, d="id acme_0123456789abcdef end")
    outcome = await run_chain(host, "tools/call", "request", payload)
    assert outcome.final_payload["params"]["arguments"] == {
        "a": AWS,
        "b": "<github_token>",
        "c": JWT,
        "d": "id acme_<acme_key> end",
    }


async def test_secrets_bare_params_payloads_are_scanned_too() -> None:
    host = guards.load("secrets")
    outcome = await run_chain(host, "tools/call", "request", {"name": "x", "arguments": {"t": AWS}})
    assert outcome.final_payload == {"name": "x", "arguments": {"t": "[REDACTED:aws_access_key]"}}


async def test_pii_redacts_by_default_and_denies_the_kinds_told_to() -> None:
    host = guards.load("pii", {"kind_actions": {"credit_card": "deny", "ip_address": "allow"}})
    assert [(d.name, d.type) for d in host.descriptors] == [("pii", "mutation"), ("pii-deny", "validation")]
    redacted = await run_chain(
        host,
        "tools/call",
        "response",
        result_payload("Mail jane.roe@example.org or call +44 20 7946 0958 from 8.8.8.8"),
    )
    assert redacted.status == "success"
    assert redacted.final_payload == result_payload("Mail [REDACTED:email] or call [REDACTED:phone] from 8.8.8.8")
    denied = await run_chain(host, "tools/call", "request", tool_call("pay", card="4111 1111 1111 1111"))
    assert denied.status == "validation_failed"
    assert messages(denied) == [("$.params.arguments.card", "personal data found: credit_card")]


async def test_pii_reads_a_card_number_a_tool_put_in_a_json_number() -> None:
    """`structuredContent` carries numbers as numbers: a card there is found like its text copy, denied or
    redacted (the number becomes the placeholder string), while other numbers stay numbers."""
    structured = {"card": 4111111111111111, "count": 3, "total": 12.5, "ok": True, "order": 202406011234}
    result = {"content": [{"type": "text", "text": "card 4111111111111111"}], "structuredContent": structured}
    denied = await run_chain(guards.load("pii", {"action": "deny"}), "tools/call", "response", result)
    assert messages(denied) == [
        ("$.content[0].text", "personal data found: credit_card"),
        ("$.structuredContent.card", "personal data found: credit_card"),
    ]
    redacted = await run_chain(guards.load("pii"), "tools/call", "response", result)
    assert redacted.final_payload == {
        "content": [{"type": "text", "text": "card [REDACTED:credit_card]"}],
        "structuredContent": {**structured, "card": "[REDACTED:credit_card]"},
    }
    untouched = await run_chain(
        guards.load("pii"), "tools/call", "response", {"structuredContent": {"n": 4111111111111112}}
    )
    assert untouched.final_payload == {"structuredContent": {"n": 4111111111111112}}  # fails Luhn: not a card


async def test_pii_deny_scans_keys_when_asked() -> None:
    payload = tool_call("x", scores={"jane.roe@example.org": 3})
    unasked = await run_chain(guards.load("pii", {"action": "deny"}), "tools/call", "request", payload)
    asked = await run_chain(guards.load("pii", {"action": "deny", "scan_keys": True}), "tools/call", "request", payload)
    assert unasked.status == "success"
    assert messages(asked) == [('$.params.arguments.scores["[REDACTED:email]"]~', "personal data found: email")]
    assert "jane.roe" not in str(asked.to_wire())


async def test_pii_deny_only_config_builds_a_single_validator() -> None:
    host = guards.load("pii", {"action": "deny", "kinds": ["us_ssn", "iban"]})
    assert [(d.name, d.type) for d in host.descriptors] == [("pii", "validation")]
    outcome = await run_chain(host, "tools/call", "request", tool_call("x", iban="DE89 3704 0044 0532 0130 00"))
    assert messages(outcome) == [("$.params.arguments.iban", "personal data found: iban")]


def test_pii_config_that_checks_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="leaves no kind to redact or deny"):
        guards.load("pii", {"kinds": ["email"], "kind_actions": {"email": "allow"}})


@pytest.mark.parametrize(
    "text",
    [
        "4111 1111 1111 1112",  # fails Luhn
        "DE89 3704 0044 0532 0130 01",  # fails the IBAN checksum
        "000-12-3456",  # SSA never issues area 000
        "icon@2x.png",
        "version 1.2.3.4",
        "order 2024-06-01, ticket 12345",
    ],
)
async def test_pii_near_misses_pass_untouched(text: str) -> None:
    host = guards.load("pii", {"action": "deny"})
    outcome = await run_chain(host, "tools/call", "request", tool_call("echo", text=text))
    assert outcome.status == "success", messages(outcome)


async def test_pii_presidio_backend_redacts_through_the_same_guard() -> None:
    pytest.importorskip("presidio_analyzer")
    host = guards.load("pii", {"backend": "presidio", "kinds": ["email"]})
    outcome = await run_chain(host, "tools/call", "request", tool_call("x", t="write to jane.roe@example.org"))
    assert outcome.final_payload == tool_call("x", t="write to [REDACTED:email]")


async def test_redaction_covers_every_string_of_nested_results_including_sampling_messages() -> None:
    host = guards.load("secrets")
    payload = {
        "method": "sampling/createMessage",
        "params": {
            "messages": [{"role": "user", "content": {"type": "text", "text": f"use {AWS}"}}],
            "systemPrompt": f"token {GITHUB}",
            "maxTokens": 10,
        },
    }
    outcome = await run_chain(host, "sampling/createMessage", "request", payload)
    params = outcome.final_payload["params"]
    assert params["messages"][0]["content"]["text"] == "use [REDACTED:aws_access_key]"
    assert params["systemPrompt"] == "token [REDACTED:github_token]"
    assert params["maxTokens"] == 10


def test_batched_scan_equals_per_string_scan() -> None:
    texts = [
        "phone",
        "+1 415 555 2671",
        "password",
        f"= {AWS}",
        "version",
        "1.2.3.4",
        "SSN:",
        "123-45-6789",
        "jane.roe@example.org",
        "-----BEGIN RSA PRIVATE KEY-----",
        "MIIEowIBAAKCAQEA7",
    ]
    for scanner in (TextScanner(SecretScanner(), min_length=1), TextScanner(PiiScanner(), min_length=1)):
        assert scanner.findings_many(texts) == [scanner.findings(t) for t in texts]


@pytest.mark.parametrize("name", ["secrets", "pii"])
async def test_r26_a_scan_that_outlasts_timeout_ms_is_a_timeout_not_a_result(name: str) -> None:
    """The scanners never yield, so no cancel scope stops them; a result past the deadline is discarded."""
    text = f"word {AWS} jane@example.org " * 25_000  # ~1 MB: tens of ms of scanning against 0.5 ms
    params = {"name": name, "event": "tools/call", "phase": "request", "payload": tool_call("x", t=text)}
    with anyio.fail_after(30):
        async with connect(guards.load(name).create_server(), "legacy") as client:
            with pytest.raises(MCPError) as caught:
                await raw_call(client, "interceptor/invoke", {**params, "timeoutMs": 0.5})
            assert (await raw_call(client, "interceptor/invoke", params))["modified"] is True  # no deadline: done
    assert caught.value.code == -32000
    assert caught.value.data == {"interceptor": name, "reason": "timeout", "timeoutMs": 0.5, "phase": "request"}


async def test_pii_redacts_a_card_written_in_fullwidth_digits_in_place() -> None:
    card = "".join(chr(ord(c) + 0xFEE0) if c.isdigit() else c for c in "4111 1111 1111 1111")
    outcome = await run_chain(guards.load("pii"), "tools/call", "response", result_payload(f"card: {card}, thanks"))
    assert outcome.final_payload == result_payload("card: [REDACTED:credit_card], thanks")


async def test_secrets_and_pii_find_a_value_cut_across_two_text_blocks() -> None:
    # A model reads consecutive text blocks as one text: a key cut across two is whole there.
    cut = result_payload("ok", f"key {AWS[:10]}", f"{AWS[10:]} mail jane.doe", "@corp-mail.com done")
    across = {"scan_across_blocks": True}
    with anyio.fail_after(5):
        redacted = await run_chain(guards.load("secrets", across), "tools/call", "response", cut)
        denied = await run_chain(guards.load("secrets", {"action": "deny", **across}), "tools/call", "response", cut)
        pii = await run_chain(guards.load("pii", across), "tools/call", "response", cut)
        by_default = await run_chain(guards.load("secrets"), "tools/call", "response", cut)
    assert redacted.final_payload == result_payload(
        "ok", "key [REDACTED:aws_access_key]", " mail jane.doe", "@corp-mail.com done"
    )
    mutation = redacted.results[0]
    assert isinstance(mutation, MutationResult) and mutation.info is not None
    assert mutation.info["redacted"] == {"aws_access_key": 1}
    mcp_types.CallToolResult.model_validate(redacted.final_payload)  # still the event's result type
    assert messages(denied) == [("$.content[1].text", "credential found: aws_access_key")]
    assert AWS not in str(denied.to_wire())
    assert pii.final_payload == result_payload("ok", f"key {AWS[:10]}", f"{AWS[10:]} mail [REDACTED:email]", " done")
    assert by_default.final_payload is cut  # off by default: each block is read alone


async def test_a_long_value_cut_near_its_start_is_redacted_whole() -> None:
    # The seam's window holds only the JWT's first 64 characters after the cut: the finding touches the
    # window's edge, so the run is read whole and all of the token is redacted, not the window's part.
    cut = result_payload(f"see {JWT[:20]}", f"{JWT[20:]} end")
    with anyio.fail_after(5):
        outcome = await run_chain(guards.load("secrets", {"scan_across_blocks": True}), "tools/call", "response", cut)
    assert outcome.final_payload == result_payload("see [REDACTED:jwt]", " end")


async def test_a_value_cut_across_blocks_is_redacted_with_the_blocks_own_findings() -> None:
    cut = result_payload(f"{GITHUB} then {AWS[:8]}", f"{AWS[8:]} and {JWT}")
    across = {"scan_across_blocks": True}
    with anyio.fail_after(5):
        outcome = await run_chain(guards.load("secrets", across), "tools/call", "response", cut)
    assert outcome.final_payload == result_payload(
        "[REDACTED:github_token] then [REDACTED:aws_access_key]", " and [REDACTED:jwt]"
    )
    not_a_run = {
        "content": [
            {"type": "text", "text": f"key {AWS[:10]}"},
            {"type": "image", "data": "AAAA"},
            {"type": "text", "text": AWS[10:]},
        ]
    }
    with anyio.fail_after(5):
        apart = await run_chain(guards.load("secrets", across), "tools/call", "response", not_a_run)
    assert apart.final_payload is not_a_run  # blocks not next to each other are not read joined
