"""Headless Debian Chromium driven by Playwright, for the web view's browser tests; never a downloaded browser.

Without /usr/bin/chromium or the `playwright` package the tests skip, unless MCPI_REQUIRE_BROWSER is set
(CI), where they fail.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
#: As the machine notes prescribe: no sandbox (root), no GPU, and nothing that phones out at start.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def need_browser() -> None:
    problem = None
    if not CHROMIUM.exists():
        problem = f"{CHROMIUM} is missing (apt-get install chromium)"
    else:
        try:
            import playwright.async_api  # noqa: F401
        except ImportError:
            problem = "the playwright package is missing (pip install -e '.[test]')"
    if problem is not None:
        if os.environ.get("MCPI_REQUIRE_BROWSER"):
            pytest.fail(f"MCPI_REQUIRE_BROWSER is set but {problem}")
        pytest.skip(problem)


@asynccontextmanager
async def browser_page() -> AsyncIterator[Any]:
    """A page in a fresh headless Chromium with its own empty profile."""
    need_browser()
    from playwright.async_api import async_playwright

    with tempfile.TemporaryDirectory(prefix="mcpi-chromium-") as profile:
        async with async_playwright() as playwright:
            context = await playwright.chromium.launch_persistent_context(
                profile,
                executable_path=str(CHROMIUM),
                headless=True,
                args=CHROMIUM_ARGS,
                viewport={"width": 1280, "height": 900},
            )
            try:
                yield await context.new_page()
            finally:
                await context.close()
