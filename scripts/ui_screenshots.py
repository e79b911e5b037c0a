"""Screenshots of the web view for docs/ui.md, taken in headless Debian Chromium over the demo's own trail.

    python scripts/ui_screenshots.py          # writes docs/ui/*.png

Runs `examples/demo.py --audit-dir TMP`, serves `mcp-interceptors ui` on that trail, and photographs the
recent calls, a filtered table, one call's detail, and the same call after a record was edited in the store.
Needs /usr/bin/chromium and the `playwright` package (the test extra); never downloads a browser.
"""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson
from playwright.async_api import Page, async_playwright

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "ui"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
ARGS += ["--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(port: int, process: subprocess.Popen[bytes], limit_s: float = 60) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"mcp-interceptors ui exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"mcp-interceptors ui did not listen on {port} within {limit_s} s")


async def mutated_call(page: Page, url: str) -> str:
    """The detail page of the demo's call whose arguments the guards redacted."""
    await page.goto(url + "/?verdict=allowed&guard=secrets")
    links = [await link.get_attribute("href") for link in await page.locator("tr.call a").all()]
    for href in links:
        await page.goto(url + str(href).removeprefix(url))
        if await page.locator("h3", has_text="Mutation by secrets").count():
            return page.url
    raise SystemExit("the demo's trail has no call the secrets guard changed")


async def photograph(url: str, store: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="mcpi-chromium-") as profile:
        async with async_playwright() as playwright:
            context = await playwright.chromium.launch_persistent_context(
                profile,
                executable_path="/usr/bin/chromium",
                headless=True,
                args=ARGS,
                viewport={"width": 1280, "height": 820},
            )
            page = await context.new_page()
            await page.goto(url + "/")
            await page.wait_for_selector("#live-status.live")
            await page.screenshot(path=OUT / "calls.png", full_page=True)
            await page.select_option("select[name=verdict]", "denied")
            await page.click("#filters button[type=submit]")
            await page.wait_for_selector("tr.call.verdict-denied")
            await page.screenshot(path=OUT / "filtered.png", full_page=True)
            detail = await mutated_call(page, url)
            await page.screenshot(path=OUT / "call.png", full_page=True)
            call_id = detail.rsplit("/", 1)[1]
            with sqlite3.connect(store) as db:  # what a person editing the database by hand leaves behind
                record_id, raw = db.execute(
                    "SELECT id, record FROM audit_records WHERE call_id = ? AND phase = 'request'", (call_id,)
                ).fetchone()
                record = orjson.loads(raw)
                record["body"]["interceptors"] = []
                db.execute(
                    "UPDATE audit_records SET record = ? WHERE id = ?", (orjson.dumps(record).decode(), record_id)
                )
            await page.goto(detail)
            await page.locator("#verification").screenshot(path=OUT / "tampered.png")
            await context.close()


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mcpi-ui-shots-") as folder:
        subprocess.run([sys.executable, "examples/demo.py", "--audit-dir", folder], cwd=ROOT, check=True)
        port = free_port()
        store = Path(folder) / "audit.db"
        command = [sys.executable, "-m", "mcp_interceptors", "ui", "--audit", str(store)]
        command += ["--key-file", f"{folder}/audit-key", "--listen", f"127.0.0.1:{port}"]
        server = subprocess.Popen(command, cwd=ROOT)
        try:
            wait_for(port, server)
            asyncio.run(photograph(f"http://127.0.0.1:{port}", store))
        finally:
            server.terminate()
            server.wait(timeout=10)
    print("wrote", ", ".join(sorted(path.name for path in OUT.glob("*.png"))))


if __name__ == "__main__":
    main()
