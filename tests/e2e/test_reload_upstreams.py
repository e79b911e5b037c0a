"""A config reload that changes the upstream set, through the real CLI over HTTP (and once over stdio): an added
upstream is started,
listed and callable, and clients hear `list_changed`; a removed one drains (no call in flight is lost) and refuses
new calls naming it; a changed one is replaced by a new process; one that cannot start (or would expose a name
another exposes) is refused, and the running set keeps serving.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import psutil
import pytest
from e2e_support import E2E_DIR, UPSTREAM, ConfigWriter, gateway_env, text_of, write_yaml
from helpers import Child, cli_argv, free_tcp_port, running, stderr_log, stdio_transport, until
from mcp import Client, MCPError

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

WORKERS = 4
TOOLS_ONLY = str(E2E_DIR / "tools_only_upstream.py")
#: A stdio upstream that exits at once: it cannot start.
DEAD = {"command": sys.executable, "args": ["-c", "import sys; sys.exit(3)"]}


def upstream_entry(**extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [TOOLS_ONLY], **extra}


def upstreams(**entries: dict[str, Any]) -> dict[str, Any]:
    """A config of e2e upstreams, each with its name as its prefix (so adding one renames nothing)."""
    return {"upstreams": {name: {"prefix": name, **entry} for name, entry in entries.items()}}


@asynccontextmanager
async def gateway(config: Path) -> AsyncIterator[tuple[Child, str]]:
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}", "--log-level", "INFO")
    async with running(argv, port=port, env=gateway_env(), label="HTTP gateway") as child:
        yield child, f"http://127.0.0.1:{port}/mcp"


async def reload(child: Child, config: Path, new: dict[str, Any], line: str = "config reloaded from") -> None:
    """Write `new`, send SIGHUP, and wait for `line` once more in the gateway's log."""
    before = child.stderr_tail(1000).count(line)
    write_yaml(config, new)
    child.popen.send_signal(signal.SIGHUP)
    await until(lambda: child.stderr_tail(1000).count(line) > before)


async def tool_names(client: Client) -> set[str]:
    return {tool.name for tool in (await client.list_tools()).tools}


def error_data(exc: MCPError) -> dict[str, Any]:
    return exc.error.data if isinstance(exc.error.data, dict) else {}


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_sighup_adds_an_upstream_whose_tools_are_listed_and_callable_and_clients_hear_list_changed(
    write_config: ConfigWriter, mode: str
) -> None:
    config = write_config(upstreams(a=upstream_entry()))
    changed = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async with gateway(config) as (child, url), Client(url, mode=mode, message_handler=on_message) as client:
        with anyio.fail_after(60):
            assert text_of(await client.call_tool("a__echo", {"text": "before"})) == "before"
            assert "b__echo" not in await tool_names(client)
            if mode == "legacy":
                await reload(child, config, upstreams(a=upstream_entry(), b=upstream_entry()))
                await changed.wait()  # on the session's own stream
            else:
                async with client.listen(tools_list_changed=True) as subscription:
                    await reload(child, config, upstreams(a=upstream_entry(), b=upstream_entry()))
                    async for _event in subscription:
                        break
            tools = (await client.list_tools(**({} if mode == "legacy" else {"cache_mode": "refresh"}))).tools
            assert {"a__echo", "b__echo"} <= {tool.name for tool in tools}
            assert text_of(await client.call_tool("b__echo", {"text": "added"})) == "added"
            assert text_of(await client.call_tool("a__echo", {"text": "kept"})) == "kept"
        log = child.stderr_tail(400)
    assert "config reload (SIGHUP): upstreams added 'b'" in log
    assert "take effect at the next start" not in log


class Load:
    """`WORKERS` clients (half in each era) calling `b__sleep` in a loop until `stop`; every outcome is kept."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.outcomes: list[tuple[float, float, str]] = []
        #: When each worker's current call started, and how many of its calls succeeded.
        self.calling: dict[int, float] = {}
        self.ok = dict.fromkeys(range(WORKERS), 0)
        self.stop = anyio.Event()

    def settled(self) -> bool:
        """Every client serves (a handshake-era one has opened its own upstream sessions) and one call has been
        running upstream for a while: it is surely past routing when the reload comes."""
        now = anyio.current_time()
        return min(self.ok.values()) >= 2 and any(now - started > 0.1 for started in self.calling.values())

    async def worker(self, n: int) -> None:
        async with Client(self.url, mode="legacy" if n % 2 else "2026-07-28") as client:
            while not self.stop.is_set():
                started = self.calling[n] = anyio.current_time()
                try:
                    result = await client.call_tool("b__sleep", {"seconds": 0.3})
                    what = "ok" if not result.is_error else f"tool error: {result}"
                except MCPError as exc:
                    data = error_data(exc)
                    removed = data.get("upstream") == "b" and data.get("reason") == "upstream removed"
                    what = "refused" if removed else f"error: {exc.error}"
                finally:
                    del self.calling[n]
                self.outcomes.append((started, anyio.current_time(), what))
                self.ok[n] += what == "ok"
                if what != "ok":
                    await anyio.sleep(0.05)  # refused at once: do not spin


async def test_sighup_removes_an_upstream_under_load_no_call_in_flight_is_lost_and_new_calls_are_refused_naming_it(
    write_config: ConfigWriter,
) -> None:
    config = write_config(upstreams(a=upstream_entry(), b=upstream_entry()))
    async with gateway(config) as (child, url):
        load = Load(url)
        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for n in range(WORKERS):
                    tg.start_soon(load.worker, n)
                await until(load.settled)
                sent = anyio.current_time()
                await reload(child, config, upstreams(a=upstream_entry()))
                applied = anyio.current_time()
                await until(lambda: sum(1 for o in load.outcomes if o[0] > applied) >= 3 * WORKERS)
                load.stop.set()
            async with Client(url, mode="2026-07-28") as client:
                names = await tool_names(client)
                assert text_of(await client.call_tool("a__echo", {"text": "still"})) == "still"
                with pytest.raises(MCPError) as refused:
                    await client.call_tool("b__echo", {"text": "gone"})
        log = child.stderr_tail(400)
    whats = [what for _, _, what in load.outcomes]
    assert set(whats) == {"ok", "refused"}, [w for w in whats if w not in ("ok", "refused")]
    in_flight = [what for started, ended, what in load.outcomes if started < sent - 0.1 and ended > sent]
    assert in_flight and set(in_flight) == {"ok"}  # the calls in flight when the reload came finished
    assert {what for started, _, what in load.outcomes if started > applied} == {"refused"}
    assert "a__echo" in names and not any(name.startswith("b__") for name in names)
    assert "'b'" in refused.value.error.message and error_data(refused.value)["upstream"] == "b"
    assert "config reload (SIGHUP): upstreams removed 'b'" in log


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_sighup_replaces_a_changed_upstream_with_a_new_process(write_config: ConfigWriter, mode: str) -> None:
    config = write_config(upstreams(a=upstream_entry(), b=upstream_entry()))
    async with gateway(config) as (child, url), Client(url, mode=mode) as client:
        with anyio.fail_after(60):
            a_before = text_of(await client.call_tool("a__pid", {}))
            b_before = text_of(await client.call_tool("b__pid", {}))
            await reload(child, config, upstreams(a=upstream_entry(), b=upstream_entry(env={"CHANGED": "1"})))
            b_after = text_of(await client.call_tool("b__pid", {}))
            a_after = text_of(await client.call_tool("a__pid", {}))
        log = child.stderr_tail(400)
    assert b_after != b_before  # a new process, started with the new settings
    assert a_after == a_before  # the unchanged one kept its connection
    assert "config reload (SIGHUP): upstreams changed 'b'" in log


@pytest.mark.parametrize(
    ("added", "reason"),
    [
        ({"c": DEAD}, "the new upstream set was not put in force: upstream 'c' failed to start"),
        # Both start, and both list the resource template e2e://{name} (URIs are not prefixed).
        (
            {
                "c": {"command": sys.executable, "args": [UPSTREAM]},
                "d": {"command": sys.executable, "args": [UPSTREAM]},
            },
            "the new upstream set was not put in force: uriTemplate 'e2e://{name}' is exposed by both upstream 'c'",
        ),
        ({"c": {**upstream_entry(), "prefix": "b"}}, "give upstream 'b' or 'c' another `prefix`"),  # config check
    ],
    ids=["cannot-start", "name-collision", "prefix-clash"],
)
async def test_sighup_with_new_upstreams_that_cannot_serve_is_refused_and_the_old_set_still_serves(
    write_config: ConfigWriter, added: dict[str, Any], reason: str
) -> None:
    running_set = upstreams(a=upstream_entry(), b=upstream_entry())
    async with gateway(config := write_config(running_set)) as (child, url):
        async with Client(url, mode="2026-07-28") as client:
            with anyio.fail_after(60):
                assert text_of(await client.call_tool("b__echo", {"text": "before"})) == "before"
                new = {"upstreams": {**running_set["upstreams"], **added}}
                await reload(child, config, new, line="config reload (SIGHUP) refused, the running config stays")
                assert text_of(await client.call_tool("b__echo", {"text": "after"})) == "after"
                names = await tool_names(client)
        log = child.stderr_tail(400)
    assert {"a__echo", "b__echo"} <= names and not any(name.startswith("c__") for name in names)
    refusal = next(line for line in log.splitlines() if "refused, the running config stays" in line)
    assert reason in refusal


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_sighup_changes_the_upstream_set_behind_a_stdio_front(write_config: ConfigWriter, mode: str) -> None:
    config = write_config(upstreams(a=upstream_entry()))
    argv = cli_argv("gateway", "--config", str(config), "--log-level", "INFO")
    changed = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    def gateway_process() -> psutil.Process:
        """The stdio gateway is a child of this test process: found by its config path."""
        children = psutil.Process(os.getpid()).children(recursive=True)
        return next(child for child in children if str(config) in " ".join(child.cmdline()))

    def reloads(log_path: Path) -> int:
        return log_path.read_text(encoding="utf-8").count("config reloaded from")

    async def stdio_reload(log_path: Path, new: dict[str, Any]) -> None:
        before = reloads(log_path)
        write_yaml(config, new)
        gateway_process().send_signal(signal.SIGHUP)
        await until(lambda: reloads(log_path) > before)

    with anyio.fail_after(90), stderr_log("stdio gateway") as log:
        transport = stdio_transport(argv, log, env=gateway_env())
        async with Client(transport, mode=mode, message_handler=on_message) as client:
            assert text_of(await client.call_tool("a__echo", {"text": "before"})) == "before"
            await stdio_reload(log.path, upstreams(a=upstream_entry(), b=upstream_entry()))
            if mode == "legacy":
                await changed.wait()
            assert text_of(await client.call_tool("b__echo", {"text": "added"})) == "added"
            await stdio_reload(log.path, upstreams(b=upstream_entry()))
            with pytest.raises(MCPError) as refused:
                await client.call_tool("a__echo", {"text": "gone"})
            assert text_of(await client.call_tool("b__echo", {"text": "kept"})) == "kept"
        text = log.path.read_text(encoding="utf-8")
    assert error_data(refused.value)["upstream"] == "a"
    assert "config reload (SIGHUP): upstreams added 'b'" in text
    assert "config reload (SIGHUP): upstreams removed 'a'" in text
