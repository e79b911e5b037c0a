"""An OTLP endpoint nobody answers, through the real CLI: a closed port (connections refused) and a silent one
(connections accepted, requests never answered). Calls stay fast, the failed exports are logged, never raised,
and on SIGTERM the gateway exits within its one shutdown deadline (`telemetry.export_timeout_ms`) although
many batches are still queued, each of which would wait its own export timeout."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest
from e2e_support import ConfigWriter, gateway_env, text_of
from helpers import cli_argv, free_tcp_port, spawn, stop, wait_http_ready
from mcp import Client

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

TRACED_UPSTREAM = str(Path(__file__).resolve().parent / "traced_upstream.py")
EXPORT_TIMEOUT_MS = 3000
CALLS = 30
#: A call whose span export sat in its path would wait out an export (3 s); these take milliseconds.
SLOW_CALL_S = 1.5
#: What stopping takes besides telemetry: the HTTP front, the upstream's subprocess, the audit writer.
STOP_SLACK_S = 4.0


@contextmanager
def silent_port() -> Iterator[int]:
    """A loopback port that accepts every connection and never sends a byte back."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    closing = threading.Event()

    def accept() -> None:
        while not closing.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        closing.set()
        listener.close()
        for conn in held:
            conn.close()


@pytest.mark.parametrize("endpoint", ["closed", "silent"])
async def test_an_unreachable_otlp_endpoint_never_slows_a_call_and_shutdown_keeps_one_deadline(
    write_config: ConfigWriter, endpoint: str
) -> None:
    with silent_port() as silent:
        otlp_port = free_tcp_port() if endpoint == "closed" else silent
        config = {
            "upstreams": {"traced": {"command": sys.executable, "args": [TRACED_UPSTREAM]}},
            "interceptors": {"guards": [{"name": "secrets"}]},
            "telemetry": {"endpoint": f"http://127.0.0.1:{otlp_port}", "export_timeout_ms": EXPORT_TIMEOUT_MS},
        }
        # Batches of 4 spans, sent every 50 ms: by SIGTERM dozens of batches wait, ~3 s each if each waited.
        env = gateway_env({"OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "4"})
        port = free_tcp_port()
        argv = cli_argv("gateway", "--config", str(write_config(config)), "--http", f"127.0.0.1:{port}")
        child = spawn(argv, env=env, label=f"gateway tracing to a {endpoint} port")
        try:
            with anyio.fail_after(60):
                await wait_http_ready(child, port)
                latencies = []
                async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                    for n in range(CALLS):
                        started = time.monotonic()
                        seen = text_of(await client.call_tool("traceparent", {"text": f"call {n}"}))
                        latencies.append(time.monotonic() - started)
                        assert seen.startswith("00-")  # traced, and the call went through
            assert max(latencies) < SLOW_CALL_S, latencies

            stopping = time.monotonic()
            child.popen.send_signal(signal.SIGTERM)
            try:
                code = await anyio.to_thread.run_sync(lambda: child.popen.wait(EXPORT_TIMEOUT_MS / 1000 + 15))
            except subprocess.TimeoutExpired:
                code = None
            took = time.monotonic() - stopping
            log = child.stderr_path.read_text(encoding="utf-8", errors="replace")
            assert code == 0, child.describe()
            assert took < EXPORT_TIMEOUT_MS / 1000 + STOP_SLACK_S, (took, child.describe())
            assert "Failed to export" in log or "Transient error" in log, log[-3000:]
            assert "Traceback" not in log, log[-3000:]
        finally:
            stop(child)
