"""README.md and docs/ describe what the product does, concisely: no paragraph runs past 8 lines, no table
cell's prose past a few lines, and no history of fixes (that goes to CHANGELOG.md and commit messages)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from doc_snippets import ROOT, pages

PAGES = pages()
MAX_LINES = 8
#: A line as read: long source lines count as several of this width.
WIDTH = 120
#: A table cell's prose (code spans aside: test names, code locations) at most about three lines.
MAX_CELL_PROSE = 3 * WIDTH
_ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.)\s")
_CODE_SPAN = re.compile(r"`[^`]*`")
_HISTORY = re.compile(r"\bFixed:|^#+ .*\((?:fixed|history)\)", re.IGNORECASE | re.MULTILINE)


def prose_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) outside fenced code blocks and HTML comments."""
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced and not line.lstrip().startswith("<!--"):
            yield number, line


def paragraphs(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(first line number, lines) of each paragraph: a run of text lines; a list item starts a new one."""
    start, current = 0, []
    for number, line in [*prose_lines(path), (0, "")]:
        text = line.strip()
        breaks = not text or text.startswith(("|", "#")) or _ITEM.match(line)
        if breaks and current:
            yield start, current
            current = []
        if text and not text.startswith(("|", "#")):
            if not current:
                start = number
            current.append(line)


def length(lines: list[str]) -> int:
    return sum(max(1, math.ceil(len(line.strip()) / WIDTH)) for line in lines)


@pytest.mark.parametrize("page", PAGES, ids=[page.relative_to(ROOT).as_posix() for page in PAGES])
def test_no_paragraph_runs_past_eight_lines(page: Path) -> None:
    long = [f"line {start}: {length(lines)} lines" for start, lines in paragraphs(page) if length(lines) > MAX_LINES]
    assert long == [], f"{page.name}: split these paragraphs, or make them a list or a table"


@pytest.mark.parametrize("page", PAGES, ids=[page.relative_to(ROOT).as_posix() for page in PAGES])
def test_no_table_cell_runs_past_a_few_lines(page: Path) -> None:
    long = []
    for number, line in prose_lines(page):
        if not line.startswith("|"):
            continue
        for cell in re.split(r"(?<!\\)\|", line.strip("|")):
            prose = _CODE_SPAN.sub("", cell).strip()
            if len(prose) > MAX_CELL_PROSE:
                long.append(f"line {number}: {len(prose)} characters of prose: {prose[:60]}…")
    assert long == [], f"{page.name}: move the explanation to the page that owns the topic"


@pytest.mark.parametrize("page", PAGES, ids=[page.relative_to(ROOT).as_posix() for page in PAGES])
def test_no_history_of_fixes(page: Path) -> None:
    text = "\n".join(line for _, line in prose_lines(page))
    assert _HISTORY.findall(text) == [], f"{page.name}: say what the product does now; history goes to CHANGELOG.md"
