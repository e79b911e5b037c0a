"""End-to-end fixtures: config files for the real CLI, and stderr tails of live children on failure.

The gateway runs as `python -m mcp_interceptors gateway` with this folder on PYTHONPATH, so
configs written to a temp folder can load `e2e_hosts:...` and start `e2e_upstream.py`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import LIVE, child_env

E2E_DIR = Path(__file__).resolve().parent
EXAMPLES_DIR = E2E_DIR.parent.parent / "examples"
UPSTREAM = str(E2E_DIR / "e2e_upstream.py")


def upstream_entry(**extra: Any) -> dict[str, Any]:
    """A stdio upstream entry running the e2e upstream server."""
    return {"command": sys.executable, "args": [UPSTREAM], **extra}


def standard_config(**overrides: Any) -> dict[str, Any]:
    """One e2e upstream behind the standard e2e guards; `overrides` replace top-level keys."""
    config: dict[str, Any] = {
        "upstreams": {"e2e": upstream_entry()},
        "interceptors": {"hosts": [{"module": "e2e_hosts:host"}]},
        "expose_execute_chain": True,
    }
    config.update(overrides)
    return config


def gateway_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return child_env(extra, pythonpath=[E2E_DIR])


ConfigWriter = Callable[..., Path]


@pytest.fixture
def write_config(tmp_path: Path) -> ConfigWriter:
    """Write a config dict (or raw YAML text) to a file and return its path."""

    def write(config: dict[str, Any] | str, name: str = "gateway.yaml") -> Path:
        path = tmp_path / name
        path.write_text(config if isinstance(config, str) else yaml.safe_dump(config, sort_keys=False))
        return path

    return write


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    """On failure, show the stderr tail of every child still running (module-scoped gateways)."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and LIVE:
        for child in LIVE:
            report.sections.append((f"child {child.label or child.pid}", child.describe()))
