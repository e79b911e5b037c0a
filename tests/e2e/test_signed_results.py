"""Issue 5 item 3 through the real CLI gateway: a remote interceptor server signs its validation results and
the gateway, configured with its public key (`interceptors.servers[].public_key`), checks every one.

A tampered, unsigned or foreign-key verdict is an invocation failure: the call is blocked (fail-closed),
or allowed with the failure in the audit record when the interceptor is failOpen.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from e2e_support import E2E_DIR, ERAS, ConfigWriter, gateway_env, text_of, upstream_entry
from e2e_support import fresh_gateway as connect
from helpers import run_cli
from mcp import MCPError

from mcp_interceptors.signatures import public_key_text

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

SIGNED_SERVER = str(E2E_DIR / "e2e_signed_interceptor_server.py")
HOST_KEY = Ed25519PrivateKey.generate()
OTHER_KEY = Ed25519PrivateKey.generate()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def signed_config(
    public_key: str | None, *, signing_key: Ed25519PrivateKey | None = HOST_KEY, tamper: bool = False, **extra: Any
) -> dict[str, Any]:
    env = {"E2E_TAMPER": "1" if tamper else "0"}
    if signing_key is not None:
        env["E2E_SIGNING_KEY"] = _b64(signing_key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption()))
    server: dict[str, Any] = {"name": "signed", "command": sys.executable, "args": [SIGNED_SERVER], "env": env}
    if public_key is not None:
        server["public_key"] = public_key
    return {
        "upstreams": {"e2e": upstream_entry()},
        "interceptors": {"servers": [server], **extra.pop("interceptors", {})},
        "chain": {"include_error_details": True},
        **extra,
    }


def blocked_data(reason: str, aborted: str) -> dict[str, Any]:
    return {
        "interceptor": "signed-policy",
        "reason": reason,
        "event": "tools/call",
        "phase": "request",
        "status": "validation_failed",
        "abortedAt": {"interceptor": "signed-policy", "reason": aborted, "type": "validation"},
        "validationErrors": [],
    }


async def call(client: Any, text: str) -> str:
    with anyio.fail_after(30):
        return text_of(await client.call_tool("echo", {"text": text}))


async def refused(client: Any, text: str) -> MCPError:
    with anyio.fail_after(30), pytest.raises(MCPError) as caught:
        await client.call_tool("echo", {"text": text})
    return caught.value


@pytest.mark.parametrize("era", ERAS)
async def test_signed_result_through_the_gateway_verified_verdicts_are_enforced(
    write_config: ConfigWriter, tmp_path: Path, era: str
) -> None:
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "signed.pub").write_text(public_key_text(HOST_KEY) + "\n")
    config = write_config(signed_config("keys/signed.pub"))  # a file, relative to the config
    async with connect("stdio", config, era) as client:
        assert await call(client, "hello") == "hello"
        denied = await refused(client, "forbidden")
    assert (denied.code, denied.message) == (-32602, "Blocked by interceptor validation")
    assert denied.data == {
        **blocked_data("validation failed", "validation failed (error): text 'forbidden' is refused"),
        "validationErrors": [
            {"interceptor": "signed-policy", "severity": "error", "message": "text 'forbidden' is refused"}
        ],
    }


@pytest.mark.parametrize("era", ERAS)
async def test_signed_result_through_the_gateway_tampered_verdict_fails_closed(
    write_config: ConfigWriter, era: str
) -> None:
    config = write_config(signed_config(public_key_text(HOST_KEY), tamper=True))
    async with connect("stdio", config, era) as client:
        smuggled = await refused(client, "forbidden")  # the man in the middle turned "no" into "yes"
        spoiled = await refused(client, "hello")  # and "yes" into "no"
    for error in (smuggled, spoiled):
        assert (error.code, error.message) == (-32602, "Blocked by interceptor validation")
        assert error.data == blocked_data("interceptor failed", "invocation failed: signature invalid")


@pytest.mark.parametrize(
    ("signing_key", "aborted"),
    [(None, "invocation failed: signature missing"), (OTHER_KEY, "invocation failed: signature invalid")],
    ids=["unsigned", "another-key"],
)
async def test_signed_result_through_the_gateway_unsigned_or_foreign_verdicts_fail_closed(
    write_config: ConfigWriter, signing_key: Ed25519PrivateKey | None, aborted: str
) -> None:
    config = write_config(signed_config(public_key_text(HOST_KEY), signing_key=signing_key))
    async with connect("stdio", config, "2026-07-28") as client:
        error = await refused(client, "hello")
    assert (error.code, error.message) == (-32602, "Blocked by interceptor validation")
    assert error.data == blocked_data("interceptor failed", aborted)


async def test_signed_result_through_the_gateway_fail_open_allows_and_the_audit_record_keeps_the_failure(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    config = write_config(
        signed_config(
            public_key_text(HOST_KEY),
            tamper=True,
            interceptors={"overrides": {"signed-policy": {"fail_open": True}}},
            audit={"enabled": True, "store": "audit/audit.db", "key_file": "audit/audit-key"},
        )
    )
    async with connect("stdio", config, "legacy") as client:
        assert await call(client, "hello") == "hello"  # failOpen: the failed check does not block
    done = await run_cli("audit", "export", "--config", str(config), env=gateway_env())
    assert done.returncode == 0, done.stderr.decode()
    records = [orjson.loads(line) for line in done.stdout.splitlines()]
    calls = [r["body"] for r in records if r.get("kind") == "decision" and r["body"]["event"] == "tools/call"]
    assert [(b["phase"], b["decision"]) for b in calls] == [("request", "allow"), ("response", "allow")]
    assert calls[0]["interceptors"] == [
        {
            "name": "signed-policy",
            "mode": "active",
            "fail_open": True,
            "error": {"code": -32603, "reason": "signature invalid", "timeout": False},
        }
    ]
    verified = await run_cli("audit", "verify", "--config", str(config), env=gateway_env())
    assert verified.returncode == 0, verified.stdout.decode() + verified.stderr.decode()


async def test_signed_result_public_key_that_is_neither_a_key_nor_a_file_is_a_config_error(
    write_config: ConfigWriter,
) -> None:
    config = write_config(signed_config("keys/missing.pub"))
    done = await run_cli("gateway", "--check", str(config), env=gateway_env())
    assert done.returncode == 1
    missing = config.parent / "keys" / "missing.pub"
    assert (
        done.stderr.decode()
        .strip()
        .endswith(
            f"{config}: interceptors.servers[0].public_key: not a key, and cannot read '{missing}' "
            "(No such file or directory) (fix: give the host's base64url public key (43 characters) "
            "or the path of a file holding it)"
        )
    )
