"""Shared fixtures: the anyio backend, the hypothesis profile for CI, and a real PostgreSQL server."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings
from postgres_server import PostgresUnavailableError, create_database, start_postgres

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("ci")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """One PostgreSQL server (Debian package) per test session; its base URL.

    Skips when no server binary is installed, unless MCPI_REQUIRE_POSTGRES is set (CI), where it fails.
    """
    try:
        url, stop = start_postgres()
    except PostgresUnavailableError as exc:
        if os.environ.get("MCPI_REQUIRE_POSTGRES"):
            pytest.fail(f"MCPI_REQUIRE_POSTGRES is set but {exc}")
        pytest.skip(str(exc))
    try:
        yield url
    finally:
        stop()


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """A fresh, empty database on the session's server, as a SQLAlchemy-style URL."""
    return create_database(postgres_server)
