"""The stdio upstreams start early: once nothing can refuse the start, while the gateway builds the rest of itself
and before a stdio client's first message; each shared connection uses the process started for it (never a
second one), and a start refused, before or after they started, leaves none running.

Each upstream here appends its pid to a file of its own as it starts, so starts are counted and checked alive.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from e2e_support import UPSTREAM, ConfigWriter, gateway_env
from helpers import cli_argv, free_tcp_port, pid_alive, run_cli, until

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

#: Appends its pid to argv[1], then runs the script argv[2] as its `__main__`.
COUNTED = (
    "import os, runpy, sys; open(sys.argv[1], 'a').write(f'{os.getpid()}\\n'); sys.argv = sys.argv[2:]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)
#: Appends its pid to argv[1], then never answers and ignores the end of its input (only a signal stops it).
SILENT = "import os, sys, time; open(sys.argv[1], 'a').write(f'{os.getpid()}\\n'); time.sleep(3600)"


def counted(starts: Path) -> dict[str, Any]:
    """The e2e upstream, counting its starts in `starts` (its resources under a scheme of its own)."""
    return {
        "command": sys.executable,
        "args": ["-c", COUNTED, str(starts), UPSTREAM],
        "env": {"E2E_SCHEME": starts.stem},
    }


def pids_in(folder: Path) -> dict[str, list[int]]:
    """The pids each upstream's file lists, by upstream (the file's stem)."""
    return {path.stem: [int(line) for line in path.read_text().split()] for path in sorted(folder.glob("*.starts"))}


async def exchange(process: anyio.abc.Process, message: dict[str, Any]) -> dict[str, Any]:
    """Send one request on the gateway's stdin and read lines from its stdout until its answer."""
    assert process.stdin is not None and process.stdout is not None
    await process.stdin.send(json.dumps(message).encode() + b"\n")
    buffer = b""
    while True:
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            answer: dict[str, Any] = json.loads(line)
            if answer.get("id") == message["id"]:
                return answer
        buffer += await process.stdout.receive()


def call(request_id: int, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }


async def test_a_stdio_gateway_starts_its_upstreams_before_its_client_speaks_and_connects_to_those(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    """Started at once, they are connected when the client's `initialize` comes (they see the client's name: a
    gateway that started them only after `FIRST_MESSAGE_WAIT_S` of silence would have presented its own)."""
    # Handshake-era upstreams: a 2026-07-28 one would see the client in every request's envelope however late.
    upstreams = {name: {**counted(tmp_path / f"{name}.starts"), "era": "legacy"} for name in ("one", "two")}
    config = write_config({"upstreams": upstreams})
    process = await anyio.open_process(cli_argv("gateway", "--config", str(config)), env=gateway_env(), stderr=None)
    client = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "early-bird", "version": "1"}}
    try:
        with anyio.fail_after(60):
            await until(lambda: len(pids_in(tmp_path)) == 2)  # the client has not said a word yet
            await exchange(process, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": client})
            listed = await exchange(process, {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})
            echoed = await exchange(process, call(3, "two__echo", {"text": "hi"}))
            seen = await exchange(process, call(4, "one__whoami", {}))
            started = pids_in(tmp_path)
            assert process.stdin is not None
            await process.stdin.aclose()  # the stdio shutdown
            code = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert {"one__echo", "two__echo"} <= {tool["name"] for tool in listed["result"]["tools"]}
    assert echoed["result"]["content"][0]["text"] == "hi"
    assert json.loads(seen["result"]["content"][0]["text"])["client"] == "early-bird"
    assert [len(pids) for pids in started.values()] == [1, 1]  # the early processes serve: none started twice
    assert code == 0
    assert [pid for pids in started.values() for pid in pids if pid_alive(pid)] == []


async def refusal(config: Path, *options: str) -> tuple[int, str]:
    done = await run_cli("gateway", "--config", str(config), *options, env=gateway_env())
    lines = done.stderr.decode().strip().splitlines()
    return done.returncode, lines[-1] if lines else ""


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("later", ["interceptor config", "audit store"])
async def test_a_start_refused_by_a_later_setting_starts_no_upstream(
    write_config: ConfigWriter, tmp_path: Path, transport: str, later: str
) -> None:
    """Refused after the preflight checks, in the start itself (building the chain, opening the audit store):
    still before any upstream starts."""
    config: dict[str, Any] = {"upstreams": {"e2e": counted(tmp_path / "e2e.starts")}}
    if later == "interceptor config":
        config["interceptors"] = {"guards": [{"name": "secrets"}], "config": {"nothing-so-named": {}}}
        expected = "interceptors.config.nothing-so-named: no configured source advertises"
    else:
        (tmp_path / "audit.db").write_text("not a database\n" * 100)
        config["audit"] = {"enabled": True, "store": str(tmp_path / "audit.db"), "key_file": str(tmp_path / "key")}
        expected = "cannot open the audit database"
    options = ["--http", f"127.0.0.1:{free_tcp_port()}"] if transport == "http" else []
    code, line = await refusal(write_config(config), *options)
    assert (code, pids_in(tmp_path)) == (1, {})
    assert expected in line


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_start_that_fails_after_the_upstreams_started_leaves_none_running(
    write_config: ConfigWriter, tmp_path: Path, transport: str
) -> None:
    """The only upstream never answers its handshake: the start fails once they run, and the gateway stops
    it (it ignores the end of its input, so it is terminated) before it exits."""
    silent = {
        "command": sys.executable,
        "args": ["-c", SILENT, str(tmp_path / "silent.starts")],
        "timeout_ms": 1000,
        "era": "legacy",
    }
    options = ["--http", f"127.0.0.1:{free_tcp_port()}"] if transport == "http" else []
    code, line = await refusal(write_config({"upstreams": {"silent": silent}}), *options)
    started = pids_in(tmp_path)
    assert code == 1
    assert "upstream 'silent' failed to start" in line
    assert [len(pids) for pids in started.values()] == [1]
    assert [pid for pids in started.values() for pid in pids if pid_alive(pid)] == []
