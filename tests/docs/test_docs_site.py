"""The docs site builds with `mkdocs build --strict` and its generated pages are complete: the API page
documents every public name, the configuration page every field."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import mcp_interceptors
from mcp_interceptors import audit, guards

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    return out


def test_the_api_page_documents_every_public_name(site: Path) -> None:
    anchors = set(re.findall(r'id="(mcp_interceptors[\w.]*)"', (site / "api" / "index.html").read_text("utf-8")))
    missing = [
        f"{module.__name__}.{name}"
        for module in (mcp_interceptors, guards, audit)
        for name in module.__all__
        if f"{module.__name__}.{name}" not in anchors
    ]
    assert missing == []


def test_the_configuration_page_has_its_generated_tables(site: Path) -> None:
    page = (site / "configuration" / "index.html").read_text("utf-8")
    assert "config-reference" not in page
    for setting in ("upstreams.&lt;name&gt;.command", "http.max_body_bytes", "audit.writer", "scrub.errors"):
        assert f"<code>{setting}</code>" in page


def test_the_command_line_page_has_every_commands_help(site: Path) -> None:
    page = (site / "cli" / "index.html").read_text("utf-8")
    assert "cli-reference" not in page
    for command in ("list", "invoke", "gateway", "config-schema", "serve", "pin", "audit", "audit verify"):
        assert f"usage: mcp-interceptors {command}" in page
