"""The README demo and the examples run as users run them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_demo_runs_and_shows_redaction_and_block() -> None:
    done = subprocess.run(
        [sys.executable, "examples/demo.py"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"to": "[EMAIL]"' in done.stdout
    assert "blocked: validation_failed by deny-dangerous-tools" in done.stdout
