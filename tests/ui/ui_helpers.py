"""The web view in-process over a trail, and its calls table read back as the cells a person sees."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from contextlib import contextmanager

from starlette.testclient import TestClient
from ui_trail import Trail

from mcp_interceptors.audit import load_key
from mcp_interceptors.ui import AuditReader, Limits, UiSettings, allowed_hosts_for, create_app

_ROW = re.compile(r'<tr class="call verdict-[a-z]+" data-key="([^"]*)">(.*?)</tr>', re.S)
_CELL = re.compile(r"<td>(.*?)</td>", re.S)
_TAG = re.compile(r"<[^>]+>")


def rows_of(page: str) -> list[dict[str, str]]:
    rows = []
    for key, cells in _ROW.findall(page):
        text = [" ".join(html.unescape(_TAG.sub("", cell)).split()) for cell in _CELL.findall(cells)]
        _, principal, upstream, method, target, verdict, decided, latency = text
        rows.append(
            {
                "key": html.unescape(key),
                "principal": principal,
                "upstream": upstream,
                "method": method,
                "target": target,
                "verdict": verdict.split()[0],
                "decided": decided,
                "latency": latency,
            }
        )
    return rows


@contextmanager
def view_of(trail: Trail, target: str | None = None, limits: Limits | None = None) -> Iterator[TestClient]:
    """An in-process client of the view over `trail` (or the store at `target`), trusting the trail's key."""
    reader = AuditReader(target or trail.store)
    trusted = load_key(trail.key_file).trusted()
    settings = UiSettings(reader, trusted, f"the keys of {trail.key_file}", limits=limits or Limits())
    app = create_app(settings, allowed_hosts=allowed_hosts_for("127.0.0.1"))
    try:
        with TestClient(app, base_url="http://127.0.0.1", follow_redirects=False) as client:
            yield client
    finally:
        reader.close()
