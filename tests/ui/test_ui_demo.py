"""The README's one command for the web view: `python examples/demo.py --ui` serves the demo's own trail."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import httpx2
import pytest
from helpers import child_env, free_tcp_port, spawn, stop, wait_http_ready
from ui_helpers import rows_of

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parent.parent.parent


async def test_the_demo_serves_the_web_view_of_the_trail_it_wrote() -> None:
    port = free_tcp_port()
    argv = [sys.executable, "examples/demo.py", "--ui", "--listen", f"127.0.0.1:{port}"]
    child = spawn(argv, cwd=ROOT, env=child_env(), label="demo --ui")
    try:
        await wait_http_ready(child, port, limit_s=180)  # the demo runs first
        with anyio.fail_after(30):
            async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                page = (await http.get("/")).text
                denied = [row for row in rows_of(page) if row["verdict"] == "denied"]
                assert {row["decided"] for row in denied} == {"tool-policy", "prompt-injection"}
                detail = (await http.get(f"/calls/{denied[0]['key']}")).text
                assert "signature valid" in detail and "Every record of this call verifies" in detail
    finally:
        stop(child)
