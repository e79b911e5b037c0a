"""Every code block of README.md and docs/ runs in CI as a reader would run it (see doc_snippets.py for
the kinds of block and what is done with each); blocks that need the network run in the quick-start test."""

from __future__ import annotations

from pathlib import Path

import pytest
from doc_snippets import KINDS, ROOT, blocks, page_runner, pages

PAGES = pages()


def test_every_block_has_a_language_and_a_known_kind() -> None:
    unknown = [str(block) for page in PAGES for block in blocks(page) if not block.lang or block.kind not in KINDS]
    assert unknown == [], "give each block a language, and a <!-- snippet: KIND --> line for a kind not its default"


def test_only_the_readme_has_the_ci_command() -> None:
    ci = [str(block) for page in PAGES for block in blocks(page) if block.kind == "ci"]
    assert ci == [f"README.md:{next(b.line for b in blocks(ROOT / 'README.md') if b.kind == 'ci')} (bash, ci)"]


@pytest.mark.e2e
@pytest.mark.parametrize("page", PAGES, ids=[page.relative_to(ROOT).as_posix() for page in PAGES])
def test_the_blocks_of_a_page_run(page: Path, tmp_path: Path) -> None:
    with page_runner(tmp_path) as runner:
        for block in blocks(page):
            if block.needs_network or block.kind == "ci":
                runner.skip(block)
            else:
                runner.run(block)
