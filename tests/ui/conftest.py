"""Fixtures for the web view's tests: a written trail and an in-process client of the view over it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from ui_helpers import view_of
from ui_trail import Trail, build_trail


@pytest.fixture
def trail(tmp_path: Path) -> Trail:
    return build_trail(tmp_path)


@pytest.fixture
def view(trail: Trail) -> Iterator[TestClient]:
    with view_of(trail) as client:
        yield client
