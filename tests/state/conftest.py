"""A real redis-server (Debian package) per test module, on a free loopback port with no persistence; skipped
when missing unless MCPI_REQUIRE_REDIS is set (CI), where it fails."""

from __future__ import annotations

import os
import shutil
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "guards"))  # guard_support.py, for these tests too

from helpers import START_TIMEOUT_S, free_tcp_port, spawn, stop


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """One server per test module (each test writes under a key prefix of its own)."""
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("MCPI_REQUIRE_REDIS"):
            pytest.fail("MCPI_REQUIRE_REDIS is set but redis-server is not installed (apt-get install redis-server)")
        pytest.skip("redis-server is not installed (apt-get install -y redis-server); set MCPI_REQUIRE_REDIS to fail")
    port = free_tcp_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    child = spawn(argv, label="redis-server")
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:  # readiness: nothing to wait on but the port (outside any event loop: a module fixture)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or child.popen.poll() is not None:
                    raise RuntimeError(f"redis-server did not start: {child.describe()}") from None
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop(child)
