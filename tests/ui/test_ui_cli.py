"""`mcp-interceptors ui` as a user runs it: the bind rule, bad input, and the gateway's auth from --config."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jwt
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from helpers import cli_argv, free_tcp_port, run_cli, running
from ui_trail import Trail

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


async def test_a_non_loopback_bind_without_auth_is_refused(trail: Trail) -> None:
    done = await run_cli("ui", "--audit", str(trail.store), "--listen", f"0.0.0.0:{free_tcp_port()}")
    assert done.returncode == 1
    assert b"refusing to serve 0.0.0.0:" in done.stderr and b"without authentication" in done.stderr


async def test_a_missing_store_and_a_bad_listen_address_are_named(tmp_path: Path) -> None:
    done = await run_cli("ui", "--audit", str(tmp_path / "nope.db"), "--listen", f"127.0.0.1:{free_tcp_port()}")
    assert done.returncode == 1 and b"nope.db does not exist" in done.stderr
    done = await run_cli("ui", "--audit", str(tmp_path / "x.db"), "--listen", "localhost")
    assert done.returncode == 2 and b"must look like HOST:PORT" in done.stderr
    done = await run_cli("ui")
    assert done.returncode == 2 and b"give the audit store" in done.stderr
    done = await run_cli("ui", "--audit", str(tmp_path / "x.db"), "--key-file", str(tmp_path / "no-key"))
    assert done.returncode == 2 and b"no-key does not exist" in done.stderr


async def test_with_a_config_the_gateways_tokens_guard_the_view(trail: Trail, tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "upstreams": {"u": {"command": "true"}},
                "auth": {"tokens": ["s3cret-token"]},
                "audit": {"enabled": True, "store": str(trail.store), "key_file": str(trail.key_file)},
            }
        )
    )
    port = free_tcp_port()
    argv = cli_argv("ui", "--config", str(config), "--listen", f"0.0.0.0:{port}")  # auth: any interface is fine
    async with running(argv, port=port, label="ui"), httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        with anyio.fail_after(30):
            page = await http.get("/")
            assert page.status_code == 303 and page.headers["location"] == "/login?next=%2F"
            assert (await http.get("/fragment/calls")).status_code == 401
            bearer = {"authorization": "Bearer s3cret-token"}
            listed = await http.get("/", headers=bearer)
            assert listed.status_code == 200 and "c-denied" in listed.text
            assert (await http.get("/", headers={"authorization": "Bearer wrong"})).status_code == 303
            refused = await http.post("/login", data={"token": "wrong", "next": "/"})
            assert refused.status_code == 401 and "That token was refused" in refused.text
            signed_in = await http.post("/login", data={"token": "s3cret-token", "next": "/calls/c-denied"})
            assert signed_in.status_code == 303 and signed_in.headers["location"] == "/calls/c-denied"
            cookie = signed_in.headers["set-cookie"]
            assert "HttpOnly" in cookie and "SameSite=strict" in cookie
            detail = await http.get("/calls/c-denied")  # the client keeps the cookie
            assert detail.status_code == 200 and "signature valid" in detail.text
            elsewhere = await http.post("/login", data={"token": "s3cret-token", "next": "//evil.example/"})
            assert elsewhere.headers["location"] == "/"  # never off to another site


async def test_with_a_jwt_config_the_view_takes_only_live_tokens_with_the_required_scope(
    trail: Trail, tmp_path: Path
) -> None:
    """`auth.jwt` and `required_scopes` guard the view as they guard the gateway: a token signed by another key,
    without the scope or expired is refused, by header and by cookie alike (checked on every request)."""
    key, other = ed25519.Ed25519PrivateKey.generate(), ed25519.Ed25519PrivateKey.generate()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    (tmp_path / "public.pem").write_bytes(public)
    issuer, audience = "https://issuer.ui.example", "mcp-gateway-ui"
    config = tmp_path / "gateway.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "upstreams": {"u": {"command": "true"}},
                "auth": {
                    "jwt": {"public_key_file": str(tmp_path / "public.pem"), "issuer": issuer, "audience": audience},
                    "required_scopes": ["audit:read"],
                },
                "audit": {"enabled": True, "store": str(trail.store), "key_file": str(trail.key_file)},
            }
        )
    )

    def token(signer: Any = key, scope: str = "mcp audit:read", exp_in: int = 600) -> str:
        claims = {"sub": "ops", "iss": issuer, "aud": audience, "scope": scope, "exp": int(time.time()) + exp_in}
        return jwt.encode(claims, signer, algorithm="EdDSA")

    port = free_tcp_port()
    argv = cli_argv("ui", "--config", str(config), "--listen", f"127.0.0.1:{port}")
    async with running(argv, port=port, label="ui"), httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
        with anyio.fail_after(30):
            listed = await http.get("/fragment/calls", headers={"authorization": f"Bearer {token()}"})
            assert listed.status_code == 200 and "c-denied" in listed.text
            for refused in (token(signer=other), token(scope="mcp"), token(exp_in=-60)):
                answer = await http.get("/fragment/calls", headers={"authorization": f"Bearer {refused}"})
                assert answer.status_code == 401, refused
                answer = await http.get("/", headers={"cookie": f"mcpi_ui_token={refused}"})
                assert answer.status_code == 303 and answer.headers["location"] == "/login?next=%2F"
            assert (await http.post("/login", data={"token": token(scope="mcp"), "next": "/"})).status_code == 401
            assert (await http.get("/", headers={"cookie": f"mcpi_ui_token={token()}"})).status_code == 200
