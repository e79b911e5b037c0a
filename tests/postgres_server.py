"""A throwaway PostgreSQL server from the Debian package, for tests and the audit bench.

`start_postgres()` runs `initdb` and `postgres` on a free loopback port (as an unprivileged user when we
are root) and returns a base URL and a stop function. The pytest fixtures around it live in
tests/conftest.py; `bench/audit_overhead.py` imports this module directly.
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
from collections.abc import Callable
from pathlib import Path

_PG_USER = "mcpi"


class PostgresUnavailableError(RuntimeError):
    """No PostgreSQL server binary is installed (a failed start-up raises a plain `RuntimeError`)."""


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

    Raises `PostgresUnavailableError` when no server binary is installed, `RuntimeError` if it does not start.
    """
    initdbs = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not initdbs:
        raise PostgresUnavailableError(
            "PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin/initdb); apt-get install postgresql"
        )
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
            raise RuntimeError(f"PostgreSQL exited during startup:\n{text}")
        try:
            with psycopg.connect(f"{url}/postgres", connect_timeout=2):
                return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                stop()
                raise RuntimeError(f"PostgreSQL not ready after {timeout} s") from None
            time.sleep(0.1)  # polling interval for readiness, not a wait for an outcome


def create_database(base_url: str, prefix: str = "audit") -> str:
    """A fresh, empty database on the server at `base_url`; returns its URL."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{base_url}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{base_url}/{name}"
