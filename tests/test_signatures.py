"""Issue 5 item 3, signed validation results: what is signed, key formats, the host signing, the invoker checking.

The pure part is checked against independent primitives (the `rfc8785` package and `cryptography` directly);
host and invoker run over in-memory `mcp.Client`s in every era, with a tampering middleware standing in for
a man in the middle between them.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import anyio
import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.rsa import generate_private_key
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat
from fakes import ERAS, connect, raw_call
from mcp import Client, MCPError
from mcp.server import ServerRequestContext
from mcp.server.context import CallNext, HandlerResult

from mcp_interceptors import Chain, ChainResult, InterceptorHost, Invocation, ValidationResult, invoke_interceptor
from mcp_interceptors.signatures import (
    SignatureError,
    check_result_signature,
    generate_signing_key,
    load_signing_key,
    load_verify_key,
    public_key_text,
    sign_result,
    signed_bytes,
    signing_key_from,
    verify_key_from,
)

pytestmark = pytest.mark.anyio

SAFE = {"method": "tools/call", "params": {"name": "echo", "arguments": {"text": "hi"}}}
SHELL = {"method": "tools/call", "params": {"name": "shell", "arguments": {"cmd": "rm -rf /"}}}
KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
OTHER_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32, 64)))
BODY = {
    "interceptor": "no-shell",
    "phase": "request",
    "durationMs": 0.125,
    "type": "validation",
    "valid": False,
    "severity": "error",
    "messages": [{"message": "shell is forbidden", "severity": "error", "path": "$.params.name"}],
}


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def raw_public(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


# --------------------------------------------------------------------------- what is signed


def test_signed_result_is_ed25519_over_the_rfc8785_body_without_the_signature() -> None:
    signed = sign_result(BODY, KEY)
    assert {k: v for k, v in signed.items() if k != "signature"} == BODY
    signature = signed["signature"]
    assert signature["algorithm"] == "ed25519"
    assert signature["publicKey"] == b64url(raw_public(KEY))
    # Independently: the rfc8785 package's bytes, and cryptography's verify (raises if wrong).
    message = rfc8785.dumps(BODY)
    assert signed_bytes(signed) == message
    value = base64.urlsafe_b64decode(signature["value"] + "=" * (-len(signature["value"]) % 4))
    KEY.public_key().verify(value, message)
    assert "=" not in signature["value"] and len(value) == 64


def test_signed_result_ignores_what_the_transport_adds() -> None:
    signed = sign_result(BODY, KEY)
    # A 2026-07-28 server wraps results in `resultType` and `_meta`; neither is part of the host's result.
    wrapped = {**signed, "resultType": "complete", "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "h"}}}
    check_result_signature(wrapped, KEY.public_key(), "no-shell")
    assert signed_bytes(wrapped) == signed_bytes(BODY)


def test_signed_result_replaces_a_signature_already_present() -> None:
    forged = {**BODY, "signature": {"algorithm": "ed25519", "publicKey": "x", "value": "y"}}
    check_result_signature(sign_result(forged, KEY), KEY.public_key(), "no-shell")


def tamper(body: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**body, **changes}


SIGNED = sign_result(BODY, KEY)
_RAW_SIGNATURE = base64.urlsafe_b64decode(SIGNED["signature"]["value"] + "==")


def with_signature_bytes(raw: bytes) -> dict[str, Any]:
    value = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    return tamper(SIGNED, signature={**SIGNED["signature"], "value": value})


def test_signed_result_check_accepts_what_openssl_signs() -> None:
    """Results are checked through libsodium; a signature OpenSSL made (`sign_result` signs with it) verifies."""
    assert KEY.sign(signed_bytes(BODY)) == _RAW_SIGNATURE  # OpenSSL's bytes
    check_result_signature(SIGNED, KEY.public_key(), "no-shell")


@pytest.mark.parametrize(
    ("body", "reason", "detail"),
    [
        (BODY, "signature missing", "the result has no signature"),
        (tamper(SIGNED, signature=None), "signature missing", "the result has no signature"),
        (tamper(SIGNED, signature="abc"), "signature invalid", "signature is not an object"),
        (tamper(SIGNED, valid=True), "signature invalid", "the signature does not match the result"),
        (tamper(SIGNED, messages=[]), "signature invalid", "the signature does not match the result"),
        (tamper(SIGNED, extra="added"), "signature invalid", "the signature does not match the result"),
        (
            tamper(SIGNED, signature={**SIGNED["signature"], "algorithm": "rsa"}),
            "signature invalid",
            "algorithm 'rsa', expected 'ed25519'",
        ),
        (
            tamper(SIGNED, signature={**SIGNED["signature"], "value": "!!not-base64!!"}),
            "signature invalid",
            "the signature does not match the result",
        ),
        (
            with_signature_bytes(bytes([_RAW_SIGNATURE[0] ^ 1]) + _RAW_SIGNATURE[1:]),
            "signature invalid",
            "the signature does not match the result",
        ),
        (with_signature_bytes(_RAW_SIGNATURE[:63]), "signature invalid", "the signature does not match the result"),
        (
            with_signature_bytes(_RAW_SIGNATURE + b"\0"),
            "signature invalid",
            "the signature does not match the result",
        ),
        (
            tamper(SIGNED, signature={**SIGNED["signature"], "value": 7}),
            "signature invalid",
            "the signature does not match the result",
        ),
        (
            sign_result(BODY, OTHER_KEY),
            "signature invalid",
            f"signed by key {public_key_text(OTHER_KEY)!r}, expected {public_key_text(KEY)!r}",
        ),
        (
            # The right key's name on another key's signature: the value itself must verify.
            tamper(
                sign_result(BODY, OTHER_KEY),
                signature={**sign_result(BODY, OTHER_KEY)["signature"], "publicKey": public_key_text(KEY)},
            ),
            "signature invalid",
            "the signature does not match the result",
        ),
    ],
)
def test_signed_result_check_names_the_problem(body: dict[str, Any], reason: str, detail: str) -> None:
    with pytest.raises(SignatureError) as caught:
        check_result_signature(body, KEY.public_key(), "no-shell")
    error = caught.value
    assert error.code == -32603
    assert error.data == {"interceptor": "no-shell", "reason": reason, "detail": detail}
    assert error.message == f"Result of 'no-shell' failed its signature check: {detail}"


# --------------------------------------------------------------------------- keys


def test_signed_result_keys_are_accepted_as_objects_raw_bytes_base64url_and_pem() -> None:
    raw = KEY.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    pem = KEY.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    for value in (KEY, raw, b64url(raw), pem, pem.decode()):
        assert public_key_text(signing_key_from(value)) == b64url(raw_public(KEY))
    public_pem = KEY.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    for public in (KEY.public_key(), raw_public(KEY), b64url(raw_public(KEY)), public_pem, public_pem.decode()):
        assert public_key_text(verify_key_from(public)) == b64url(raw_public(KEY))


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (b"short", "an Ed25519 private key is 32 raw bytes, got 5"),
        (b64url(bytes(31)), "an Ed25519 private key is 32 raw bytes, got 31"),
        ("not/base64url+", "not base64url (RFC 4648 §5: letters, digits, '-' and '_')"),
    ],
)
def test_signed_result_bad_signing_keys_name_the_problem(value: Any, problem: str) -> None:
    with pytest.raises(ValueError) as caught:
        signing_key_from(value)
    assert str(caught.value) == problem


def test_signed_result_a_non_ed25519_pem_key_is_refused() -> None:
    rsa = generate_private_key(public_exponent=65537, key_size=1024)
    pem = rsa.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    with pytest.raises(ValueError) as private:
        signing_key_from(pem)
    assert str(private.value) == f"the PEM key is {type(rsa).__name__}, not an Ed25519 private key"
    public_pem = rsa.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    with pytest.raises(ValueError) as public:
        verify_key_from(public_pem)
    assert str(public.value) == f"the PEM key is {type(rsa.public_key()).__name__}, not an Ed25519 public key"


@pytest.mark.parametrize("value", [5, None, 1.5])
def test_signed_result_a_verify_key_of_the_wrong_type_is_a_value_error(value: object) -> None:
    with pytest.raises(ValueError, match=f"a public key is a key object, bytes or text, not {type(value).__name__}"):
        verify_key_from(value)  # type: ignore[arg-type]


def test_signed_result_key_file_is_created_once_with_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "host-key.pem"
    first = load_signing_key(path, create=True)
    assert (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777) == (0o600, 0o700)
    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert public_key_text(load_signing_key(path, create=True)) == public_key_text(first)
    assert public_key_text(load_signing_key(path)) == public_key_text(first)
    public_file = tmp_path / "host.pub"
    public_file.write_text(public_key_text(first) + "\n")
    assert public_key_text(load_verify_key(public_file)) == public_key_text(first)
    os.chmod(path, 0o640)
    with pytest.raises(ValueError) as caught:
        load_signing_key(path)
    assert str(caught.value) == f"signing key file {path} has mode 0640; run `chmod 600 {path}`"


def test_signed_result_generated_keys_differ() -> None:
    assert public_key_text(generate_signing_key()) != public_key_text(generate_signing_key())


# --------------------------------------------------------------------------- host and invoker, in memory


def signing_host(key: Ed25519PrivateKey | None = KEY, *, fail_open: bool = False) -> InterceptorHost:
    host = InterceptorHost("signed", signing_key=key)

    @host.validator("no-shell", events=["tools/call"], phase="request", fail_open=fail_open)
    async def no_shell(inv: Invocation) -> tuple[bool, str] | bool:
        if inv.payload["params"]["name"] == "shell":
            return False, "shell is forbidden"
        return True

    @host.mutator("stamp", events=["tools/call"], phase="request")
    async def stamp(inv: Invocation) -> Any:
        return {**inv.payload, "stamped": True}

    return host


async def flip_valid(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """A man in the middle: turns every validation verdict around after the host signed it."""
    result = await call_next(ctx)
    if ctx.method == "interceptor/invoke" and isinstance(result, dict) and "valid" in result:
        result = {**result, "valid": not result["valid"]}
    return result


def failures_of(result: ChainResult) -> list[tuple[str, int, str, bool]]:
    return [(f.interceptor, f.code, f.reason, f.fail_open) for f in result.failures]


@pytest.fixture(params=ERAS)
def era(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_signed_result_host_signs_validation_results_on_the_wire(era: str) -> None:
    host = signing_host()
    assert host.public_key == b64url(raw_public(KEY))
    params = {"event": "tools/call", "phase": "request", "payload": SHELL}
    with anyio.fail_after(5):
        async with connect(host.create_server(), era) as client:
            verdict = await raw_call(client, "interceptor/invoke", {"name": "no-shell", **params})
            mutation = await raw_call(client, "interceptor/invoke", {"name": "stamp", **params})
    assert verdict["signature"]["publicKey"] == host.public_key
    assert (verdict["valid"], verdict["interceptor"], verdict["type"]) == (False, "no-shell", "validation")
    check_result_signature(verdict, KEY.public_key(), "no-shell")  # as received, envelope and all
    assert "signature" not in mutation  # the spec's field is on validation results only


async def test_signed_result_host_without_a_key_signs_nothing(era: str) -> None:
    with anyio.fail_after(5):
        async with connect(signing_host(None).create_server(), era) as client:
            params = {"name": "no-shell", "event": "tools/call", "phase": "request", "payload": SAFE}
            verdict = await raw_call(client, "interceptor/invoke", params)
    assert "signature" not in verdict


async def test_signed_result_invoker_verifies_and_keeps_the_signature(era: str) -> None:
    host = signing_host()
    with anyio.fail_after(5):
        async with connect(host.create_server(), era) as client:
            chain = Chain(role="client")
            await chain.add_server(client, verify_key=host.public_key)
            allowed = await chain.execute("tools/call", "request", SAFE)
            blocked = await chain.execute("tools/call", "request", SHELL)
    assert allowed.status == "success" and allowed.failures == []
    assert allowed.final_payload == {**SAFE, "stamped": True}
    verdict = next(r for r in allowed.results if isinstance(r, ValidationResult))
    assert verdict.signature is not None and verdict.signature.public_key == host.public_key
    # A signed "no" is still a "no": the verdict blocks, not the signature check.
    assert blocked.status == "validation_failed" and blocked.failures == []
    assert blocked.aborted_at is not None
    assert blocked.aborted_at.reason == "validation failed (error): shell is forbidden"


async def test_signed_result_tampered_verdict_is_an_invocation_failure_that_fails_closed(era: str) -> None:
    server = signing_host().create_server(middleware=[flip_valid])
    with anyio.fail_after(5):
        async with connect(server, era) as client:
            unchecked = Chain(role="client")
            await unchecked.add_server(client)
            fooled = await unchecked.execute("tools/call", "request", SHELL)
            checked = Chain(role="client")
            await checked.add_server(client, verify_key=KEY.public_key())
            blocked = await checked.execute("tools/call", "request", SHELL)
    assert fooled.status == "success"  # the threat: without a key, the flipped verdict lets `shell` through
    assert blocked.status == "validation_failed"
    assert blocked.aborted_at is not None
    assert (blocked.aborted_at.interceptor, blocked.aborted_at.reason) == (
        "no-shell",
        "invocation failed: signature invalid",
    )
    assert failures_of(blocked) == [("no-shell", -32603, "signature invalid", False)]
    assert blocked.final_payload is None


async def test_signed_result_tampered_verdict_with_fail_open_is_allowed_and_recorded(era: str) -> None:
    server = signing_host(fail_open=True).create_server(middleware=[flip_valid])
    with anyio.fail_after(5):
        async with connect(server, era) as client:
            chain = Chain(role="client")
            await chain.add_server(client, verify_key=KEY.public_key())
            result = await chain.execute("tools/call", "request", SAFE)
    assert result.status == "success"
    assert result.final_payload == {**SAFE, "stamped": True}
    assert failures_of(result) == [("no-shell", -32603, "signature invalid", True)]
    assert [r.interceptor for r in result.results] == ["stamp"]  # the failed verdict is not a result


async def test_signed_result_missing_signature_fails_when_a_key_is_configured(era: str) -> None:
    with anyio.fail_after(5):
        async with connect(signing_host(None).create_server(), era) as client:
            chain = Chain(role="client")
            await chain.add_server(client, verify_key=KEY.public_key())
            result = await chain.execute("tools/call", "request", SAFE)
    assert result.status == "validation_failed"
    assert result.aborted_at is not None and result.aborted_at.reason == "invocation failed: signature missing"
    assert failures_of(result) == [("no-shell", -32603, "signature missing", False)]


async def test_signed_result_from_another_key_fails(era: str) -> None:
    with anyio.fail_after(5):
        async with connect(signing_host(OTHER_KEY).create_server(), era) as client:
            chain = Chain(role="client")
            await chain.add_server(client, verify_key=public_key_text(KEY))
            result = await chain.execute("tools/call", "request", SAFE)
            with pytest.raises(SignatureError) as caught:
                await invoke_interceptor(
                    client, "no-shell", "tools/call", "request", SAFE, type="validation", verify_key=KEY.public_key()
                )
    assert failures_of(result) == [("no-shell", -32603, "signature invalid", False)]
    expected = f"signed by key {public_key_text(OTHER_KEY)!r}, expected {public_key_text(KEY)!r}"
    assert caught.value.data["detail"] == expected


async def test_signed_result_a_verdict_with_no_canonical_form_is_internal_error_naming_it(era: str) -> None:
    """JSON carries `10**400`, RFC 8785 cannot: the signing host answered code 0 with no `data`."""
    host = InterceptorHost("signed", signing_key=KEY)

    @host.validator("huge-info", events=["tools/call"])
    async def huge_info(inv: Invocation) -> ValidationResult:
        return ValidationResult(valid=True, info={"n": 10**400})

    params = {"name": "huge-info", "event": "tools/call", "phase": "request", "payload": SAFE}
    with anyio.fail_after(5):
        async with connect(host.create_server(), era) as client:
            with pytest.raises(MCPError) as caught:
                await raw_call(client, "interceptor/invoke", params)
    assert caught.value.code == -32603
    assert caught.value.data["interceptor"] == "huge-info"
    assert caught.value.data["reason"].startswith("result cannot be signed: an integer of 1329 bits is beyond")


async def test_signed_result_host_errors_stay_host_errors(era: str) -> None:
    """An error response carries no result to sign: it is the host's error, not a signature failure."""
    with anyio.fail_after(5):
        async with connect(signing_host().create_server(), era) as client:
            with pytest.raises(MCPError) as caught:
                await invoke_interceptor(
                    client, "no-shell", "tools/call", "response", SAFE, type="validation", verify_key=KEY.public_key()
                )
    assert caught.value.code == -32602


async def test_signed_result_in_process_hosts_need_no_verification() -> None:
    chain = Chain(role="client")
    chain.add_local(signing_host())
    result = await chain.execute("tools/call", "request", SAFE)
    assert result.status == "success" and result.failures == []


def test_signed_result_remote_source_accepts_every_key_form() -> None:
    from mcp_interceptors import RemoteSource

    client: Client = object()  # type: ignore[assignment]  # never used: only the key is parsed
    for value in (KEY.public_key(), raw_public(KEY), public_key_text(KEY)):
        source = RemoteSource(client, verify_key=value)
        assert isinstance(source.verify_key, Ed25519PublicKey)
        assert public_key_text(source.verify_key) == public_key_text(KEY)
