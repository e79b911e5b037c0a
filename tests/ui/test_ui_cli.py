"""`mcp-interceptors ui` as a user runs it: the bind rule, bad input, and the gateway's auth from --config."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx2
import pytest
import yaml
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
