"""What a person sees in a real browser (headless Debian Chromium): the web view over the trail a real gateway
(the CLI, over stdio) writes while the page is open.

A denied call appears within 2 s of its error reaching the client, the filter narrows the table, the detail
page shows the mutation's diff and "signature valid", a record edited in the SQLite file shows as invalid,
and markup in what a client sent renders as text and never runs.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
import yaml
from helpers import child_env, cli_argv, free_tcp_port, running, stderr_log, stdio_transport
from mcp import Client, MCPError
from ui_browser import browser_page

pytestmark = [pytest.mark.anyio, pytest.mark.e2e, pytest.mark.browser]

E2E_DIR = Path(__file__).resolve().parent.parent / "e2e"
SCRIPT = "<script>window.__pwned = 1</script>"
IMG = '<img src=x onerror="window.__pwned = 2">'
AWS_KEY = "AKIA" + "Z7QH4XK2M9PL3TWB"


@asynccontextmanager
async def gateway(tmp_path: Path) -> AsyncIterator[Client]:
    config = tmp_path / "gateway.yaml"
    document = {
        "upstreams": {"e2e": {"command": sys.executable, "args": [str(E2E_DIR / "e2e_upstream.py")]}},
        "interceptors": {
            "guards": [{"name": "secrets"}, {"name": "tool-policy", "config": {"deny": ["delete_*"]}}],
        },
        "audit": {"enabled": True, "store": str(tmp_path / "audit.db"), "key_file": str(tmp_path / "audit-key")},
    }
    config.write_text(yaml.safe_dump(document))
    env = child_env(pythonpath=[E2E_DIR])
    with stderr_log("stdio gateway") as log:
        async with Client(stdio_transport(cli_argv("gateway", "--config", str(config)), log, env=env)) as client:
            yield client


@asynccontextmanager
async def web_view(tmp_path: Path) -> AsyncIterator[str]:
    port = free_tcp_port()
    argv = cli_argv("ui", "--audit", str(tmp_path / "audit.db"), "--key-file", str(tmp_path / "audit-key"))
    async with running([*argv, "--listen", f"127.0.0.1:{port}"], port=port, label="ui"):
        yield f"http://127.0.0.1:{port}"


async def rows(page: Any) -> list[str]:
    return [" ".join((await row.inner_text()).split()) for row in await page.locator("tr.call").all()]


async def test_a_person_watches_calls_land_filters_them_and_checks_one(tmp_path: Path) -> None:
    from playwright.async_api import expect

    with anyio.fail_after(120):
        async with gateway(tmp_path) as client:
            await client.call_tool("echo", {"text": f"{SCRIPT} deploy with {AWS_KEY}"})
            async with web_view(tmp_path) as url, browser_page() as page:
                await page.goto(url + "/")
                await expect(page.locator("#live-status")).to_have_text("live", timeout=10_000)
                before = len(await rows(page))
                assert any("e2e tools/call echo allowed" in row for row in await rows(page)), await rows(page)

                with pytest.raises(MCPError):
                    await client.call_tool("delete_everything", {})
                denied_at = time.monotonic()
                denied = page.locator("tr.call.verdict-denied")
                await expect(denied).to_have_count(1, timeout=2_000)  # live: no reload
                appeared_s = time.monotonic() - denied_at
                await expect(denied).to_contain_text("tool-policy")
                await expect(denied).to_contain_text("tools/call delete_everything")
                print(f"the denied call was on screen {appeared_s:.2f} s after its error reached the client")
                assert appeared_s <= 2.0

                with pytest.raises(MCPError):
                    await client.call_tool(IMG, {})  # an unknown tool: the gateway refuses it
                await expect(page.locator("tr.call.verdict-refused")).to_have_count(1, timeout=2_000)
                assert len(await rows(page)) == before + 2

                await page.select_option("select[name=verdict]", "denied")
                await page.click("#filters button[type=submit]")
                await expect(page.locator("tr.call")).to_have_count(1)
                assert "denied" in (await rows(page))[0] and "tool-policy" in (await rows(page))[0]

                await page.goto(url + "/")
                echo = page.locator("tr.call", has_text="allowed").filter(has_text="e2e")
                await echo.locator("a").click()
                await expect(page.locator("h3", has_text="Mutation by secrets")).to_be_visible()
                value = page.locator("ul.diff code.value")
                await expect(value).to_have_text(f'"{SCRIPT} deploy with [REDACTED:aws_access_key]"')
                checks = page.locator("#verification li.check")
                await expect(checks.filter(has_text="signature valid")).to_have_count(2)
                await expect(page.locator(".verdict-line")).to_contain_text("Every record of this call verifies")
                assert await page.evaluate("window.__pwned") is None
                detail = page.url

                await page.goto(url + "/?verdict=refused")
                await page.locator("tr.call a").click()
                await expect(page.locator("dd.error")).to_contain_text(f"Unknown tool: {IMG}")
                assert await page.locator("img").count() == 0  # text, not an element
                assert await page.evaluate("window.__pwned") is None

                call_id = detail.rsplit("/", 1)[1]
                with sqlite3.connect(tmp_path / "audit.db") as db:  # someone edits the request record's upstream
                    row = db.execute(
                        "SELECT id, record FROM audit_records WHERE call_id = ? AND phase = 'request'", (call_id,)
                    ).fetchone()
                    record = orjson.loads(row[1])
                    record["body"]["server"] = "somewhere-else"
                    db.execute(
                        "UPDATE audit_records SET record = ? WHERE id = ?", (orjson.dumps(record).decode(), row[0])
                    )
                await page.goto(detail)
                await expect(page.locator(".verdict-line")).to_contain_text("INVALID")
                tampered = page.locator(f'#verification li.check[data-record="{row[0]}"]')
                await expect(tampered).to_contain_text("invalid:")
                await expect(tampered).to_contain_text("edited (content does not match its hash)")
                await expect(checks.filter(has_text="signature valid")).to_have_count(1)  # the response's
