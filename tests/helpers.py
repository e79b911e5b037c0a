"""Helpers for tests that run real processes: the CLI as a child, free ports, readiness, teardown.

A `Child` is a subprocess in its own process group with stderr captured to a file; `stop()`
terminates it, then kills the whole group. `running()` spawns, polls readiness under
`anyio.fail_after`, and adds the child's stderr tail to any exception raised while it runs.
Module-scoped children register in `LIVE`, so a conftest hook can show their stderr on failure.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
import httpx2
from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

#: How long a child may take to start listening (imports and upstream start-ups on a noisy machine).
START_TIMEOUT_S = 30.0
#: How long a child may take to exit after SIGTERM before its group is killed.
STOP_TIMEOUT_S = 10.0
#: Children currently running, for the failure report hook.
LIVE: list[Child] = []
#: Where children's stderr logs go: one folder per test run, removed when the run ends (a failure has the
#: tail in its report already), so runs do not pile logs up in the system's temp folder.
LOG_DIR = tempfile.mkdtemp(prefix="mcp-interceptors-test-logs-")
atexit.register(shutil.rmtree, LOG_DIR, ignore_errors=True)


async def until(check: Callable[[], bool]) -> None:
    """Poll `check` until it holds (another process's state: nothing to wait on); the caller bounds the wait."""
    while True:
        if check():
            return
        await anyio.sleep(0.05)


def cli_argv(*args: str) -> list[str]:
    """The real CLI, as the same interpreter running the tests."""
    return [sys.executable, "-m", "mcp_interceptors", *args]


def free_tcp_port() -> int:
    """A loopback port nothing listens on right now (bound and released by the OS)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def child_env(extra: Mapping[str, str] | None = None, *, pythonpath: Sequence[str | Path] = ()) -> dict[str, str]:
    """The test's environment plus `extra`, with `pythonpath` entries prepended to PYTHONPATH."""
    env = dict(os.environ)
    env.update(extra or {})
    paths = [str(p) for p in pythonpath]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def tail(path: str | Path, lines: int = 40) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "<no stderr captured>"
    return "\n".join(text.splitlines()[-lines:]) or "<empty stderr>"


@dataclass
class Child:
    """A running subprocess in its own process group, its stderr going to `stderr_path`."""

    argv: list[str]
    popen: subprocess.Popen[bytes]
    stderr_path: Path
    label: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stderr_tail(self, lines: int = 40) -> str:
        return tail(self.stderr_path, lines)

    def describe(self) -> str:
        status = "running" if self.popen.poll() is None else f"exited with {self.popen.returncode}"
        return f"{self.label or self.argv[0]} (pid {self.pid}, {status}); stderr tail:\n{self.stderr_tail()}"


def spawn(
    argv: Sequence[str],
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    label: str = "",
    stdin: int | IO[Any] | None = subprocess.DEVNULL,
) -> Child:
    """Start `argv` in a new session (so `stop` can kill the whole group); stderr goes to a temp file."""
    handle, name = tempfile.mkstemp(prefix="child-stderr-", suffix=".log", dir=LOG_DIR)
    try:
        popen = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=stdin,
            stdout=subprocess.DEVNULL,
            stderr=handle,
            start_new_session=True,
        )
    finally:
        os.close(handle)
    child = Child(list(argv), popen, Path(name), label=label)
    LIVE.append(child)
    return child


def stop(child: Child, timeout: float = STOP_TIMEOUT_S) -> int | None:
    """SIGTERM the child, wait up to `timeout`, then SIGKILL its whole process group. Returns its exit code."""
    try:
        if child.popen.poll() is None:
            child.popen.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.popen.wait(timeout)
        return child.popen.returncode
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signal.SIGKILL)
        if child.popen.poll() is None:
            child.popen.wait()
        if child in LIVE:
            LIVE.remove(child)


async def wait_http_ready(child: Child, port: int, limit_s: float = START_TIMEOUT_S) -> None:
    """Poll until `127.0.0.1:port` accepts connections; fail early (with stderr) if the child exits."""
    with anyio.fail_after(limit_s):
        while True:
            if child.popen.poll() is not None:
                raise AssertionError(f"child exited before listening on {port}: {child.describe()}")
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.05)  # readiness poll: nothing to wait on but the port
                continue
            await stream.aclose()
            return


@asynccontextmanager
async def running(
    argv: Sequence[str],
    *,
    port: int | None = None,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    label: str = "",
) -> AsyncIterator[Child]:
    """Spawn, wait for `port` (if given), yield; on any error add the child's stderr tail; always stop it."""
    child = spawn(argv, cwd=cwd, env=env, label=label)
    try:
        if port is not None:
            await wait_http_ready(child, port)
        yield child
    except BaseException as exc:
        exc.add_note(child.describe())
        raise
    finally:
        stop(child)


@contextlib.contextmanager
def sync_running(
    argv: Sequence[str],
    *,
    port: int | None = None,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    label: str = "",
) -> Iterator[Child]:
    """`running` for synchronous (e.g. module-scoped) fixtures: readiness is polled in its own event loop."""
    child = spawn(argv, cwd=cwd, env=env, label=label)
    try:
        if port is not None:
            anyio.run(wait_http_ready, child, port)
        yield child
    except BaseException as exc:
        exc.add_note(child.describe())
        raise
    finally:
        stop(child)


@dataclass
class StderrLog:
    """A temp file to pass as a stdio client's `errlog`, shown when the block fails."""

    path: Path
    file: IO[str]

    def tail(self, lines: int = 40) -> str:
        if not self.file.closed:
            self.file.flush()
        return tail(self.path, lines)


@contextlib.contextmanager
def stderr_log(label: str = "child") -> Iterator[StderrLog]:
    handle, name = tempfile.mkstemp(prefix="stdio-stderr-", suffix=".log", dir=LOG_DIR)
    with os.fdopen(handle, "w+", encoding="utf-8") as file:
        log = StderrLog(Path(name), file)
        try:
            yield log
        except BaseException as exc:
            exc.add_note(f"{label} stderr tail:\n{log.tail()}")
            raise


def stdio_transport(
    argv: Sequence[str],
    errlog: StderrLog,
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Any:
    """An mcp client transport that spawns `argv` (stdio_client kills its process tree on exit)."""
    params = StdioServerParameters(
        command=argv[0], args=list(argv[1:]), cwd=str(cwd) if cwd else None, env=dict(env) if env else None
    )
    return stdio_client(params, errlog=errlog.file)


@asynccontextmanager
async def http_transport(url: str, *, headers: Mapping[str, str] | None = None) -> AsyncIterator[Any]:
    """An mcp Streamable HTTP client transport with extra headers (e.g. Authorization); closes its client."""
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with (
        httpx2.AsyncClient(headers=dict(headers or {}), timeout=timeout) as client,
        streamable_http_client(url, http_client=client) as streams,
    ):
        yield streams


async def run_cli(
    *args: str, cwd: str | Path | None = None, env: Mapping[str, str] | None = None, limit_s: float = 60.0
) -> subprocess.CompletedProcess[bytes]:
    """Run the CLI to completion (for commands that exit: --check, config-schema, bad configs)."""
    with anyio.fail_after(limit_s):
        return await anyio.run_process(cli_argv(*args), cwd=cwd, env=env, check=False)


def pid_alive(pid: int) -> bool:
    """Whether `pid` is a live (non-zombie) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state not in ("Z", "X")


class WatchedOutput(io.StringIO):
    """An output stream another thread can wait on until some text has been written to it."""

    def __init__(self) -> None:
        super().__init__()
        self._changed = threading.Condition()

    def write(self, text: str) -> int:
        with self._changed:
            written = super().write(text)
            self._changed.notify_all()
        return written

    def wait_for(self, needle: str, timeout: float = 10.0) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: needle in self.getvalue(), timeout)


#: A `sitecustomize.py` for a child Python: it records every span started on the OpenTelemetry API's no-op
#: and proxy tracers, and at exit writes them and the SDK modules it loaded to `$TRACING_SPY_REPORT` as JSON.
TRACING_SPY = """
import atexit, json, os, sys
from opentelemetry import trace

started = []
for cls in (trace.NoOpTracer, trace.ProxyTracer):
    for name in ("start_span", "start_as_current_span"):
        def spy(self, *args, _original=getattr(cls, name), **kwargs):
            started.append(args[0] if args else kwargs.get("name"))
            return _original(self, *args, **kwargs)
        setattr(cls, name, spy)


@atexit.register
def report():
    sdk = sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk"))
    with open(os.environ["TRACING_SPY_REPORT"], "w") as out:
        json.dump({"started": started, "sdk": sdk}, out)
"""


def call_records(folder: Path) -> list[dict[str, Any]]:
    """The tools/call decision records of `folder`/audit.db, in store order."""
    import orjson

    from mcp_interceptors.audit import SqliteStore

    store = SqliteStore(folder / "audit.db", create=False)
    try:
        bodies = [orjson.loads(raw)["body"] for _, raw in store.iter_records()]
    finally:
        store.close()
    return [body for body in bodies if body.get("event") == "tools/call" and "decision" in body]
