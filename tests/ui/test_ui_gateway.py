"""The web view inside the gateway (`ui:`): at /ui on the HTTP front behind the gateway's own tokens, and on a
listener of its own next to a stdio gateway; calls made through the gateway show up in it."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import yaml
from helpers import (
    child_env,
    cli_argv,
    free_tcp_port,
    http_transport,
    run_cli,
    running,
    stderr_log,
    stdio_transport,
    until,
)
from mcp import Client, MCPError
from ui_browser import browser_page
from ui_helpers import rows_of

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

E2E_DIR = Path(__file__).resolve().parent.parent / "e2e"
TOKEN = "ui-test-token"


def config_file(tmp_path: Path, **extra: Any) -> Path:
    document = {
        "upstreams": {"e2e": {"command": sys.executable, "args": [str(E2E_DIR / "e2e_upstream.py")]}},
        "interceptors": {"guards": [{"name": "tool-policy", "config": {"deny": ["delete_*"]}}]},
        "audit": {"enabled": True, "store": str(tmp_path / "audit.db"), "key_file": str(tmp_path / "audit-key")},
        **extra,
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


async def test_an_http_gateway_serves_the_view_at_ui_behind_its_tokens(tmp_path: Path) -> None:
    config = config_file(tmp_path, auth={"tokens": [TOKEN]}, ui={"enabled": True})
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}")
    bearer = {"authorization": f"Bearer {TOKEN}"}
    base = f"http://127.0.0.1:{port}"
    async with running(argv, port=port, env=child_env(pythonpath=[E2E_DIR]), label="HTTP gateway"):
        with anyio.fail_after(60):
            async with httpx2.AsyncClient(base_url=base, headers=bearer) as http:
                async with Client(http_transport(f"{base}/mcp", headers=bearer)) as client:
                    with pytest.raises(MCPError):
                        await client.call_tool("delete_everything", {})
                page = await http.get("/ui/")
                assert page.status_code == 200
                denied = [row for row in rows_of(page.text) if row["verdict"] == "denied"]
                assert [row["decided"] for row in denied] == ["tool-policy"]
                assert "signature valid" in (await http.get(f"/ui/calls/{denied[0]['key']}")).text
                assert (await http.get("/ui/static/ui.js")).status_code == 200
            async with httpx2.AsyncClient(base_url=base) as anonymous:
                refused = await anonymous.get("/ui/")
                assert refused.status_code == 303 and refused.headers["location"] == "/ui/login?next=%2F"
                assert (await anonymous.get("/ui/fragment/calls")).status_code == 401
                assert (await anonymous.get("/ui/", headers={"host": "evil.example"})).status_code == 421


@pytest.mark.browser
async def test_a_stdio_gateway_serves_the_view_on_its_own_port_live(tmp_path: Path) -> None:
    from playwright.async_api import expect

    port = free_tcp_port()
    config = config_file(tmp_path, ui={"enabled": True, "listen": f"127.0.0.1:{port}"})
    argv = cli_argv("gateway", "--config", str(config))
    with anyio.fail_after(90), stderr_log("stdio gateway") as log:
        async with Client(stdio_transport(argv, log, env=child_env(pythonpath=[E2E_DIR]))) as client:
            await until(lambda: "audit web view on" in log.tail())
            async with browser_page() as page:
                await page.goto(f"http://127.0.0.1:{port}/")
                await expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)
                with pytest.raises(MCPError):
                    await client.call_tool("delete_everything", {})
                denied_at = time.monotonic()
                await expect(page.locator("tr.call.verdict-denied")).to_have_count(1, timeout=2_000)
                assert time.monotonic() - denied_at <= 2.0


async def test_the_view_in_a_config_needs_the_audit_trail_and_auth_off_loopback(tmp_path: Path) -> None:
    config = config_file(tmp_path, ui={"enabled": True, "listen": "0.0.0.0:8765"})
    done = await run_cli("gateway", "--check", str(config))
    assert done.returncode == 1 and b"serving the view there needs `auth`" in done.stderr
    document = yaml.safe_load(config.read_text())
    document["audit"] = {"enabled": False}
    document["ui"] = {"enabled": True}
    config.write_text(yaml.safe_dump(document))
    done = await run_cli("gateway", "--check", str(config))
    assert done.returncode == 1 and b"set `audit.enabled: true` too" in done.stderr
