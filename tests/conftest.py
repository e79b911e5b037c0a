"""Shared fixtures: the anyio backend and the hypothesis profile for CI."""

from __future__ import annotations

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("ci")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
