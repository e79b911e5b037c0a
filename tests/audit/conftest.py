"""Fixtures for the audit tests: a decision factory, keys, stores and a real PostgreSQL server.

`start_postgres` is self-contained (a function returning a URL and a stop callable) so it can move to
tests/conftest.py when the gateway tests need it too.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from mcp_interceptors.audit import DecisionInput, SigningKey, SqliteStore, load_or_create_key

_PG_USER = "mcpi"


@pytest.fixture
def make_decision() -> Callable[..., DecisionInput]:
    """A factory for allowed tools/call request decisions; keyword arguments override fields."""

    def make(**overrides: Any) -> DecisionInput:
        payload = {"method": "tools/call", "params": {"name": "post_note", "arguments": {"text": "hi"}}}
        fields: dict[str, Any] = {
            "timestamp": datetime(2026, 9, 1, 10, 0, tzinfo=UTC),
            "session_id": "s-1",
            "principal": {"type": "user", "id": "u-7"},
            "server": "notes",
            "event": "tools/call",
            "phase": "request",
            "direction": "sending",
            "decision": "allow",
            "status": "success",
            "call_id": None,
            "interceptors": [],
            "intent_payload": payload,
            "executed_payload": payload,
        }
        fields.update(overrides)
        return DecisionInput(**fields)

    return make


@pytest.fixture
def key(tmp_path: Path) -> SigningKey:
    return load_or_create_key(tmp_path / "keys" / "audit-key")


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SqliteStore]:
    store = SqliteStore(tmp_path / "audit.db")
    yield store
    store.close()


# -- PostgreSQL -------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_postgres_user() -> list[str]:
    """initdb and postgres refuse to run as root: use an unprivileged `mcpi` user when we are root."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam(_PG_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", _PG_USER], check=True)
    return ["runuser", "-u", _PG_USER, "--"]


def start_postgres(timeout: float = 60.0) -> tuple[str, Callable[[], None]]:
    """Start a throwaway PostgreSQL from the Debian package; return its base URL and a stop function.

    Skips when no server binary is installed, unless MCPI_REQUIRE_POSTGRES is set (CI), where it fails.
    """
    initdbs = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not initdbs:
        reason = "PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin/initdb); apt-get install postgresql"
        if os.environ.get("MCPI_REQUIRE_POSTGRES"):
            pytest.fail(f"MCPI_REQUIRE_POSTGRES is set but {reason}")
        pytest.skip(reason)
    bindir = Path(initdbs[-1]).parent
    prefix = _as_postgres_user()
    base = Path(tempfile.mkdtemp(prefix="mcpi-pg-"))
    if prefix:
        shutil.chown(base, user=_PG_USER)
    data = base / "data"
    subprocess.run(
        [*prefix, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"],
        check=True,
        capture_output=True,
    )
    port = _free_port()
    log = (base / "server.log").open("wb")
    server = subprocess.Popen(
        [*prefix, str(bindir / "postgres"), "-D", str(data), "-k", str(base), "-p", str(port), "-h", "127.0.0.1"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"postgresql://postgres@127.0.0.1:{port}"

    def stop() -> None:
        # The whole process group: with runuser in front, signalling only our child would miss postgres.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGINT)  # PostgreSQL's "fast" shutdown
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
        shutil.rmtree(base, ignore_errors=True)

    _wait_ready(url, server, base / "server.log", timeout, stop)
    return url, stop


def _wait_ready(url: str, server: subprocess.Popen[bytes], log: Path, timeout: float, stop: Callable[[], None]) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        if server.poll() is not None:
            text = log.read_text(errors="replace")[-2000:]
            stop()
            pytest.fail(f"PostgreSQL exited during startup:\n{text}")
        try:
            with psycopg.connect(f"{url}/postgres", connect_timeout=2):
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                stop()
                pytest.fail(f"PostgreSQL not ready after {timeout} s")
            time.sleep(0.1)  # polling interval for readiness, not a wait for an outcome


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    url, stop = start_postgres()
    try:
        yield url
    finally:
        stop()


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """A fresh, empty database on the session's server, as a SQLAlchemy-style URL."""
    import psycopg

    name = f"audit_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{postgres_server}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{postgres_server}/{name}"
