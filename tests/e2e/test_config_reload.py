"""Config reload through the real CLI: SIGHUP (and `--watch`) puts a changed policy in force for new calls while
four clients keep calling, with no call lost or failed; a broken config is refused, logged, and the old policy
stays.
"""

from __future__ import annotations

import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from e2e_support import UPSTREAM, ConfigWriter, gateway_env, text_of, upstream_entry, write_yaml
from helpers import Child, cli_argv, free_tcp_port, running, spawn, stop, until, wait_http_ready
from mcp import Client, MCPError

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

WORKERS = 4
BROKEN = "upstreams:\n  e2e: {command: python}\ninterceptors:\n  guards: [{name: no-such-guard}]\n"


def denying(*tools: str) -> dict[str, Any]:
    return {
        "upstreams": {"e2e": upstream_entry()},
        "interceptors": {"guards": [{"name": "tool-policy", "config": {"deny": list(tools)}}]},
    }


@dataclass
class Outcome:
    started: float
    ended: float
    what: str  # "ok", "blocked", or what went wrong


class Load:
    """`WORKERS` clients, each calling `echo` in a loop until `stop`; every call's outcome is kept."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.outcomes: list[Outcome] = []
        self.in_flight = 0
        self.stop = anyio.Event()

    async def worker(self, n: int) -> None:
        async with Client(self.url, mode="legacy") as client:
            while not self.stop.is_set():
                started = anyio.current_time()
                self.in_flight += 1
                try:
                    result = await client.call_tool("echo", {"text": f"worker {n}"})
                    what = "ok" if text_of(result) == f"worker {n}" else f"wrong answer: {result}"
                except MCPError as exc:
                    data = exc.error.data if isinstance(exc.error.data, dict) else {}
                    what = "blocked" if data.get("interceptor") == "tool-policy" else f"error: {exc.error}"
                finally:
                    self.in_flight -= 1
                self.outcomes.append(Outcome(started, anyio.current_time(), what))

    def since(self, moment: float) -> list[Outcome]:
        return [o for o in self.outcomes if o.started > moment]


async def reloaded(child: Child, line: str, count: int) -> float:
    """Wait until the gateway's stderr holds `line` `count` times; the moment it did."""
    await until(lambda: child.stderr_tail(400).count(line) >= count)
    return anyio.current_time()


async def test_sighup_reloads_the_policy_under_load_and_refuses_a_broken_config(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    config = write_config(denying("delete_everything"))
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}", "--log-level", "INFO")
    async with running(argv, port=port, env=gateway_env(), label="HTTP gateway") as child:
        load = Load(f"http://127.0.0.1:{port}/mcp")
        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for n in range(WORKERS):
                    tg.start_soon(load.worker, n)
                await until(lambda: len(load.outcomes) >= 5 * WORKERS and load.in_flight > 0)
                write_yaml(config, denying("echo"))
                sent = anyio.current_time()
                child.popen.send_signal(signal.SIGHUP)
                applied = await reloaded(child, "config reloaded from", 1)
                await until(lambda: len(load.since(applied)) >= 5 * WORKERS)

                config.write_text(BROKEN)
                child.popen.send_signal(signal.SIGHUP)
                refused = await reloaded(child, "config reload (SIGHUP) refused, the running config stays", 1)
                await until(lambda: len(load.since(refused)) >= 5 * WORKERS)
                load.stop.set()
        log = child.stderr_tail(400)
        assert child.popen.poll() is None  # still serving
    assert sorted({o.what for o in load.outcomes}) == ["blocked", "ok"]  # nothing failed, nothing else came back
    before = [o.what for o in load.outcomes if o.ended < sent]
    assert before and set(before) == {"ok"}
    assert {o.what for o in load.since(applied)} == {"blocked"}  # the new policy, for every call after the reload
    assert {o.what for o in load.since(refused)} == {"blocked"}  # the broken config changed nothing
    assert "interceptors.guards[0].name: unknown guard 'no-such-guard'" in log
    assert "take effect at the next start" not in log  # the first reload changed the policy only


async def test_watch_reloads_when_the_file_changes_and_names_what_waits_for_a_restart(
    write_config: ConfigWriter,
) -> None:
    config = write_config(denying("delete_everything"))
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(config), "--watch", "--http", f"127.0.0.1:{port}", "--log-level", "INFO")
    async with (
        running(argv, port=port, env=gateway_env(), label="HTTP gateway") as child,
        Client(f"http://127.0.0.1:{port}/mcp", mode="2026-07-28") as client,
    ):
        with anyio.fail_after(60):
            assert text_of(await client.call_tool("echo", {"text": "before"})) == "before"
            changed = {**denying("echo"), "upstreams": {"e2e": upstream_entry(timeout_ms=40_000)}, "name": "renamed"}
            write_yaml(config, changed)
            await reloaded(child, "config reloaded from", 1)
            with pytest.raises(MCPError) as blocked:
                await client.call_tool("echo", {"text": "after"})
        log = child.stderr_tail(400)
    assert isinstance(blocked.value.error.data, dict)
    assert blocked.value.error.data.get("interceptor") == "tool-policy"
    assert f"config reload ({config} changed): name changed in {config}; they take effect at the next start" in log
    assert f"config reload ({config} changed): upstreams changed 'e2e'" in log  # the upstream set is reloaded


#: The e2e upstream, started only once the gateway's child has slept `_SLOW_S` (the gateway is still starting).
_SLOW_S = 3
_SLOW_START = (
    f"import runpy, sys, time; time.sleep({_SLOW_S}); sys.argv = [{UPSTREAM!r}]; "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


async def test_a_sighup_while_the_gateway_starts_reloads_once_it_serves_and_does_not_end_it(
    write_config: ConfigWriter,
) -> None:
    slow = {"command": sys.executable, "args": ["-c", _SLOW_START]}
    config = write_config({"upstreams": {"e2e": slow}})
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}", "--log-level", "INFO")
    child = spawn(argv, env=gateway_env(), label="HTTP gateway")
    try:
        with anyio.fail_after(60):
            # The upstream sleeps: the gateway is connecting it, and no reload listens for SIGHUP yet.
            await until(lambda: "gateway starting on the" in child.stderr_tail(50))
            write_yaml(
                config, {"upstreams": {"e2e": slow}, **{k: v for k, v in denying("echo").items() if k != "upstreams"}}
            )
            child.popen.send_signal(signal.SIGHUP)
            await wait_http_ready(child, port)
            await reloaded(child, "config reloaded from", 1)
            async with Client(f"http://127.0.0.1:{port}/mcp", mode="2026-07-28") as client:
                with pytest.raises(MCPError) as blocked:
                    await client.call_tool("echo", {"text": "after"})
        log = child.stderr_tail(400)
        assert child.popen.poll() is None  # SIGHUP did not end it
    except BaseException as exc:
        exc.add_note(child.describe())
        raise
    finally:
        stop(child)
    assert isinstance(blocked.value.error.data, dict)
    assert blocked.value.error.data.get("interceptor") == "tool-policy"  # the config written before the SIGHUP
    assert "(SIGHUP while starting)" in log
