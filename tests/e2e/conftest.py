"""End-to-end fixtures: config files for the real CLI, and stderr tails of live children on failure."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import ConfigWriter, write_yaml
from helpers import LIVE


@pytest.fixture
def write_config(tmp_path: Path) -> ConfigWriter:
    """Write a config dict (or raw YAML text) to a file in the test's temp folder and return its path."""

    def write(config: dict[str, Any] | str, name: str = "gateway.yaml") -> Path:
        return write_yaml(tmp_path / name, config)

    return write


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    """On failure, show the stderr tail of every child still running (module-scoped gateways)."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and LIVE:
        for child in LIVE:
            report.sections.append((f"child {child.label or child.pid}", child.describe()))
