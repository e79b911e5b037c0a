"""Faults through the real CLI gateway: an upstream that dies mid-call, interceptor servers that crash,
hang or never start. Each test runs its own gateway, since it breaks one of its processes on purpose.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from e2e_support import (
    E2E_DIR,
    ERAS,
    INTERCEPTOR_SERVER,
    UPSTREAM,
    ConfigWriter,
    Target,
    gateway_env,
    raw_request,
    standard_config,
    text_of,
    upstream_entry,
)
from e2e_support import fresh_gateway as connect
from helpers import cli_argv, free_tcp_port, run_cli, running, spawn, stop, wait_http_ready
from mcp import Client, MCPError

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("era", ERAS)
async def test_upstream_crash_mid_call_fails_that_call_then_the_gateway_reconnects(
    write_config: ConfigWriter, transport: str, era: str
) -> None:
    config = write_config(standard_config())
    async with connect(transport, config, era) as client:
        with anyio.fail_after(30):
            before = text_of(await client.call_tool("pid", {}))
        with anyio.fail_after(10), pytest.raises(MCPError) as crashed:
            await client.call_tool("crash", {})
        with anyio.fail_after(30):
            after = text_of(await client.call_tool("pid", {}))  # waits for the reconnect
            echoed = text_of(await client.call_tool("echo", {"text": "back"}))
    assert crashed.value.code == -32000
    assert crashed.value.message == "upstream 'e2e' closed the connection"
    assert crashed.value.data == {"upstream": "e2e"}
    assert after != before  # a new upstream process answers
    assert echoed == "back"


def remote_watchdog_config(*, fail_open: bool) -> dict[str, Any]:
    return standard_config(
        interceptors={
            "servers": [{"name": "remote", "command": sys.executable, "args": [INTERCEPTOR_SERVER]}],
            "overrides": {"watchdog": {"fail_open": fail_open, "timeout_ms": 500}},
        }
    )


WATCHDOG_BLOCK = {
    "interceptor": "watchdog",
    "reason": "interceptor failed",
    "event": "tools/call",
    "phase": "request",
    "status": "validation_failed",
}


@pytest.mark.parametrize("fault", ["hang", "crash"])
@pytest.mark.parametrize("era", ERAS)
async def test_interceptor_server_fault_fails_closed_without_fail_open(
    write_config: ConfigWriter, fault: str, era: str
) -> None:
    config = write_config(remote_watchdog_config(fail_open=False))
    async with connect("stdio", config, era) as client:
        with anyio.fail_after(30):
            fine = text_of(await client.call_tool("echo", {"text": "fine"}))
        with anyio.fail_after(10), pytest.raises(MCPError) as blocked:
            await client.call_tool("echo", {"text": fault})  # 60 s hang against a 0.5 s timeoutMs
    assert fine == "fine"
    assert (blocked.value.code, blocked.value.message) == (-32602, "Blocked by interceptor validation")
    assert blocked.value.data == WATCHDOG_BLOCK


@pytest.mark.parametrize("fault", ["hang", "crash"])
@pytest.mark.parametrize("era", ERAS)
async def test_interceptor_server_fault_is_skipped_with_fail_open(
    write_config: ConfigWriter, fault: str, era: str
) -> None:
    config = write_config(remote_watchdog_config(fail_open=True))
    async with connect("stdio", config, era) as client:
        with anyio.fail_after(30):
            faulty = text_of(await client.call_tool("echo", {"text": fault}))
            later = text_of(await client.call_tool("echo", {"text": "later"}))
    assert (faulty, later) == (fault, "later")


@contextlib.asynccontextmanager
async def interceptor_server(
    transport: str, tmp_path: Path
) -> AsyncIterator[tuple[dict[str, Any], Callable[[], None]]]:
    """The watchdog server's config entry, and a toggle: kill it (SIGKILL) and keep it down (the stdio one
    exits at once while a file is missing; the HTTP one is not started again), then bring it back."""
    port = free_tcp_port()
    if transport == "http":
        argv = [sys.executable, INTERCEPTOR_SERVER, "--http", str(port)]
        children = [spawn(argv, env=gateway_env(), label="interceptor server")]
        try:
            await wait_http_ready(children[0], port)

            def toggle_http() -> None:
                if children[-1].popen.poll() is None:
                    children[-1].popen.kill()
                    children[-1].popen.wait()
                else:
                    children.append(spawn(argv, env=gateway_env(), label="interceptor server"))

            yield {"name": "remote", "url": f"http://127.0.0.1:{port}/mcp"}, toggle_http
        finally:
            for child in children:
                stop(child)
        return
    may_run, pid_file = tmp_path / "may-run", tmp_path / "pid"
    may_run.touch()
    script = (
        f"import os, runpy, sys\nif not os.path.exists({str(may_run)!r}): sys.exit(3)\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        f"runpy.run_path({INTERCEPTOR_SERVER!r}, run_name='__main__')"
    )

    def toggle_stdio() -> None:
        if may_run.exists():
            may_run.unlink()
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        else:
            may_run.touch()

    yield {"name": "remote", "command": sys.executable, "args": ["-c", script]}, toggle_stdio


async def echo_once_back(client: Client) -> str:
    """Call `echo` until the interceptor server is back (the gateway reconnects with its backoff); each
    call until then is blocked by the watchdog, failing closed."""
    with anyio.fail_after(30):
        while True:
            try:
                return text_of(await client.call_tool("echo", {"text": "after"}))
            except MCPError as exc:
                assert exc.data == WATCHDOG_BLOCK
            await anyio.sleep(0.2)  # nothing to wait on but the gateway's reconnect timer


@pytest.mark.parametrize("fail_open", [False, True])
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_an_interceptor_server_that_died_fails_its_interceptors_at_once_until_it_is_back(
    write_config: ConfigWriter, tmp_path: Path, transport: str, fail_open: bool
) -> None:
    """While a remote interceptor server is down (its process killed; the gateway reconnecting with backoff),
    its interceptors fail at once as invocation failures routed by failOpen. They waited for the reconnect
    instead, and failed as the chain's timeout after its whole deadline (10 s); once it is back they run there."""
    async with interceptor_server(transport, tmp_path) as (server, kill):
        overrides = {"watchdog": {"fail_open": fail_open}}
        config = write_config(standard_config(interceptors={"servers": [server], "overrides": overrides}))
        async with connect("stdio", config, "legacy") as client:
            with anyio.fail_after(30):
                before = text_of(await client.call_tool("echo", {"text": "before"}))
            kill()
            outcomes: list[str | dict[str, Any]] = []
            for attempt in range(3):
                with anyio.fail_after(5):  # the chain's deadline is 10 s
                    try:
                        outcomes.append(text_of(await client.call_tool("echo", {"text": f"down {attempt}"})))
                    except MCPError as exc:
                        assert (exc.code, exc.message) == (-32602, "Blocked by interceptor validation")
                        outcomes.append(exc.data)
            kill()  # it may run (stdio) or runs (HTTP) again
            after = await echo_once_back(client)
    assert (before, after) == ("before", "after")
    assert outcomes == (["down 0", "down 1", "down 2"] if fail_open else [WATCHDOG_BLOCK] * 3)


async def test_an_http_interceptor_server_restarted_between_calls_gets_a_new_session(
    write_config: ConfigWriter,
) -> None:
    """A handshake-era Streamable HTTP server that restarts between two calls answers the next one 404: it no
    longer knows the gateway's session, and the client must start a new one. The gateway kept it, so every
    later invocation failed closed (`-32600 Session not found`) until the gateway itself was restarted."""
    port = free_tcp_port()
    argv = [sys.executable, INTERCEPTOR_SERVER, "--http", str(port)]
    server = {"name": "remote", "url": f"http://127.0.0.1:{port}/mcp", "era": "legacy"}
    config = write_config(standard_config(interceptors={"servers": [server]}))
    first = spawn(argv, env=gateway_env(), label="interceptor server")
    try:
        await wait_http_ready(first, port)
        async with connect("stdio", config, "legacy") as client:
            with anyio.fail_after(30):
                before = text_of(await client.call_tool("echo", {"text": "before"}))
            stop(first)
            second = spawn(argv, env=gateway_env(), label="interceptor server again")
            try:
                await wait_http_ready(second, port)
                with anyio.fail_after(5), pytest.raises(MCPError) as lost:  # the call that finds the session gone
                    await client.call_tool("echo", {"text": "lost"})
                after = await echo_once_back(client)
            finally:
                stop(second)
    finally:
        stop(first)
    assert (before, after) == ("before", "after")
    assert lost.value.data == WATCHDOG_BLOCK


@pytest.mark.parametrize("era", ERAS)
async def test_required_interceptor_whose_server_cannot_start_fails_its_events_closed(
    write_config: ConfigWriter, era: str
) -> None:
    config = write_config(
        {
            "upstreams": {"e2e": upstream_entry()},
            "interceptors": {
                "servers": [
                    {
                        "name": "pinned",
                        "command": sys.executable,
                        "args": [str(E2E_DIR / "no_such_interceptor_server.py")],
                        "required": [
                            {"name": "must-check", "type": "validation", "events": ["tools/call"], "phase": "request"}
                        ],
                    }
                ]
            },
        }
    )
    async with connect("stdio", config, era) as client:
        with anyio.fail_after(30):
            tools = await client.list_tools()  # an event the pinned interceptor does not guard
            with pytest.raises(MCPError) as blocked:
                await client.call_tool("echo", {"text": "x"})
    assert "echo" in [tool.name for tool in tools.tools]
    assert (blocked.value.code, blocked.value.message) == (-32602, "Blocked by interceptor validation")
    assert blocked.value.data == {**WATCHDOG_BLOCK, "interceptor": "must-check"}


@pytest.mark.parametrize("era", ERAS)
async def test_r66_required_interceptor_server_down_at_start_is_used_once_it_comes_up(
    write_config: ConfigWriter, era: str, tmp_path: Path
) -> None:
    ready = tmp_path / "interceptor-server-may-start"
    late_server = (  # exits at once until `ready` exists, then serves the watchdog validator
        f"import os, runpy, sys\nif not os.path.exists({str(ready)!r}): sys.exit(3)\n"
        f"runpy.run_path({INTERCEPTOR_SERVER!r}, run_name='__main__')"
    )
    required = [{"name": "watchdog", "type": "validation", "events": ["tools/call"], "phase": "request"}]
    config = write_config(
        {
            "upstreams": {"e2e": upstream_entry()},
            "interceptors": {
                "servers": [
                    {"name": "late", "command": sys.executable, "args": ["-c", late_server], "required": required}
                ]
            },
        }
    )
    async with connect("stdio", config, era) as client:
        with anyio.fail_after(30), pytest.raises(MCPError) as blocked:
            await client.call_tool("echo", {"text": "too early"})
        ready.touch()
        with anyio.fail_after(30):
            while True:  # the gateway retries the server with its backoff: poll until a call gets through
                try:
                    result = await client.call_tool("echo", {"text": "now"})
                    break
                except MCPError as exc:
                    assert exc.data == {**WATCHDOG_BLOCK, "interceptor": "watchdog"}
                await anyio.sleep(0.2)  # nothing to wait on but the gateway's reconnect timer
    assert blocked.value.data == {**WATCHDOG_BLOCK, "interceptor": "watchdog"}
    assert text_of(result) == "now"


@pytest.mark.parametrize("era", ERAS)
async def test_upstream_that_does_not_answer_in_time_is_named_in_the_error(
    write_config: ConfigWriter, era: str
) -> None:
    config = write_config(standard_config(upstreams={"e2e": upstream_entry(timeout_ms=3000)}))
    async with connect("stdio", config, era) as client:
        with anyio.fail_after(30), pytest.raises(MCPError) as late:
            await client.call_tool("sleep", {"seconds": 30})
        with anyio.fail_after(30):
            after = text_of(await client.call_tool("echo", {"text": "still here"}))
    assert late.value.code == -32001
    assert late.value.message == "upstream 'e2e' did not answer tools/call within 3000 ms"
    assert late.value.data == {"upstream": "e2e", "timeoutMs": 3000}
    assert after == "still here"


@pytest.mark.parametrize("era", ERAS)
async def test_http_upstream_crash_mid_call_is_named_in_the_error(write_config: ConfigWriter, era: str) -> None:
    port = free_tcp_port()
    async with running([sys.executable, UPSTREAM, "--http", str(port)], port=port, label="HTTP upstream"):
        config = write_config(standard_config(upstreams={"e2e": {"url": f"http://127.0.0.1:{port}/mcp"}}))
        async with connect("stdio", config, era) as client:
            with anyio.fail_after(30), pytest.raises(MCPError) as crashed:
                await client.call_tool("crash", {})
    assert crashed.value.code == -32000
    assert crashed.value.message.startswith("upstream 'e2e' closed the connection")
    assert crashed.value.data == {"upstream": "e2e"}


async def test_http_upstream_that_refuses_the_gateways_token_is_reported_as_401(write_config: ConfigWriter) -> None:
    guarded = write_config(standard_config(auth={"tokens": ["right-token"]}))
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(guarded), "--http", f"127.0.0.1:{port}")
    async with running(argv, port=port, env=gateway_env(), label="guarded upstream gateway"):
        url = f"http://127.0.0.1:{port}/mcp"
        front = write_config({"upstreams": {"guarded": {"url": url, "bearer_token": "wrong-token"}}})
        done = await run_cli("gateway", "--config", str(front), "--http", f"127.0.0.1:{free_tcp_port()}")
    assert done.returncode == 1
    assert done.stderr.decode().strip().splitlines()[-1] == (
        "mcp-interceptors gateway: error: upstream 'guarded' failed to start: Server returned an error response "
        "(code -32603): HTTP 401 Unauthorized; check the upstream's bearer_token or headers"
    )


async def test_a_listing_with_one_upstream_down_lists_the_others_and_names_it_on_its_calls(
    write_config: ConfigWriter,
) -> None:
    """An upstream that goes down mid-life is left out of listings: calls to the others go on, and a call
    to one of its tools gets -32000 naming it, not "Unknown tool"."""
    port = free_tcp_port()
    remote_argv = [sys.executable, UPSTREAM, "--http", str(port)]
    env = gateway_env({"E2E_SCHEME": "remote"})  # resource URIs are not prefixed: two upstreams need two schemes
    async with running(remote_argv, port=port, env=env, label="HTTP upstream") as remote:
        config = write_config(
            standard_config(upstreams={"local": upstream_entry(), "remote": {"url": f"http://127.0.0.1:{port}/mcp"}})
        )
        async with connect("http", config, "legacy") as client:
            stop(remote)
            with anyio.fail_after(30):
                echoed = text_of(await client.call_tool("local__echo", {"text": "x"}))
                listed = {tool.name for tool in (await client.list_tools()).tools}
            with anyio.fail_after(30), pytest.raises(MCPError) as failed:
                await client.call_tool("remote__echo", {"text": "x"})
    assert echoed == "x"
    assert "local__echo" in listed
    assert not any(name.startswith("remote__") for name in listed)
    assert failed.value.code == -32000
    assert failed.value.data == {"upstream": "remote"}
    assert failed.value.message.startswith("upstream 'remote' is unavailable (")


#: A stdio upstream that exits at once until `flag` exists, then serves as the e2e upstream.
LATE_UPSTREAM = (
    "import os, runpy, sys\n"
    "if not os.path.exists(sys.argv[1]): sys.exit(3)\n"
    f"sys.argv = [{UPSTREAM!r}]\n"
    f"runpy.run_path({UPSTREAM!r}, run_name='__main__')\n"
)


def late_config(flag: Path) -> dict[str, Any]:
    late = upstream_entry(args=["-c", LATE_UPSTREAM, str(flag)], env={"E2E_SCHEME": "late"})
    return standard_config(upstreams={"e2e": upstream_entry(), "late": late})


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("era", ERAS)
async def test_an_upstream_down_at_start_leaves_the_others_serving(
    write_config: ConfigWriter, tmp_path: Path, transport: str, era: str
) -> None:
    config = write_config(late_config(tmp_path / "never"))
    async with connect(transport, config, era) as client:
        with anyio.fail_after(30):
            listed = {tool.name for tool in (await client.list_tools()).tools}
            echoed = text_of(await client.call_tool("e2e__echo", {"text": "served"}))
        with anyio.fail_after(30), pytest.raises(MCPError) as down:
            await client.call_tool("late__echo", {"text": "x"})
    assert "e2e__echo" in listed
    assert not any(name.startswith("late__") for name in listed)
    assert echoed == "served"
    assert down.value.code == -32000
    assert down.value.data == {"upstream": "late"}
    assert down.value.message.startswith("upstream 'late' is unavailable (")


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_an_upstream_that_comes_up_late_is_announced_and_listed(
    write_config: ConfigWriter, tmp_path: Path, transport: str
) -> None:
    flag = tmp_path / "up"
    config = write_config(late_config(flag))
    announced = anyio.Event()

    async def on_message(message: Any) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            announced.set()

    async with connect(transport, config, "legacy", message_handler=on_message) as client:
        with anyio.fail_after(30):
            before = {tool.name for tool in (await client.list_tools()).tools}
            flag.touch()
            await announced.wait()  # the gateway retries it with backoff, then announces its tools
            after = {tool.name for tool in (await client.list_tools()).tools}
            echoed = text_of(await client.call_tool("late__echo", {"text": "late"}))
    assert "late__echo" not in before
    assert "late__echo" in after
    assert echoed == "late"


async def test_every_upstream_down_at_start_still_stops_the_gateway(write_config: ConfigWriter, tmp_path: Path) -> None:
    late = upstream_entry(args=["-c", LATE_UPSTREAM, str(tmp_path / "never")])
    config = write_config({"upstreams": {"one": late, "two": late}})
    done = await run_cli("gateway", "--config", str(config), "--http", f"127.0.0.1:{free_tcp_port()}")
    assert done.returncode == 1
    last = done.stderr.decode().strip().splitlines()[-1]
    assert last.startswith("mcp-interceptors gateway: error: upstream 'one' failed to start: ")


@pytest.mark.parametrize("era", ERAS)
async def test_a_call_to_an_upstream_restarting_after_a_listing_without_it_waits_for_it(
    write_config: ConfigWriter, era: str
) -> None:
    """A listing made while an upstream restarts leaves it out; a call to one of its tools then waits for
    the restart, as any call to a restarting upstream does, instead of failing at once."""
    other = upstream_entry(env={"E2E_SCHEME": "other"})
    config = write_config(standard_config(upstreams={"e2e": upstream_entry(), "other": other}))
    async with connect("stdio", config, era) as client:
        with anyio.fail_after(30), pytest.raises(MCPError):
            await client.call_tool("e2e__crash", {})
        with anyio.fail_after(30):
            listed = {tool.name for tool in (await client.list_tools()).tools}
            echoed = text_of(await client.call_tool("e2e__echo", {"text": "back"}))
    assert "other__echo" in listed
    assert echoed == "back"


async def test_an_upstream_that_hangs_in_its_handshake_does_not_hold_the_others_back(
    write_config: ConfigWriter,
) -> None:
    """It would take two handshake timeouts (60 s each, one per era) to give up on it: the gateway serves
    the others 10 s after the first is up, and keeps connecting it in the background."""
    mute = {"command": sys.executable, "args": ["-c", "import time; time.sleep(600)"]}
    config = write_config(standard_config(upstreams={"e2e": upstream_entry(), "mute": mute}))
    with anyio.fail_after(45):
        async with connect("stdio", config, "legacy") as client:
            echoed = text_of(await client.call_tool("e2e__echo", {"text": "served"}))
            with pytest.raises(MCPError) as down:
                await client.call_tool("mute__echo", {"text": "x"})
    assert echoed == "served"
    assert down.value.code == -32000
    assert down.value.data == {"upstream": "mute"}


async def test_http_upstream_message_over_its_limit_fails_the_call_naming_it(write_config: ConfigWriter) -> None:
    """mcp's HTTP client reads a JSON answer or an SSE event whole: a 300 MB answer once took the gateway
    to 1.5 GB of memory."""
    port = free_tcp_port()
    async with running([sys.executable, UPSTREAM, "--http", str(port)], port=port, label="HTTP upstream"):
        upstream = {"url": f"http://127.0.0.1:{port}/mcp", "max_message_bytes": 65536}
        config = write_config(standard_config(upstreams={"e2e": upstream}))
        async with connect("stdio", config, "legacy") as client:
            with anyio.fail_after(30), pytest.raises(MCPError) as too_long:
                await client.call_tool("echo", {"text": "x" * 100_000})
            with anyio.fail_after(30):
                after = text_of(await client.call_tool("echo", {"text": "fits"}))
    reason = "an event longer than the limit of 65536 bytes"
    assert too_long.value.code == -32603
    assert too_long.value.message == f"upstream 'e2e' sent {reason}"
    assert too_long.value.data == {"upstream": "e2e", "reason": reason}
    assert after == "fits"


async def test_http_upstream_event_may_be_as_long_as_its_max_message_bytes(write_config: ConfigWriter) -> None:
    """mcp's Streamable HTTP client caps one SSE event at 1 MiB: a 3 MB answer failed ("upstream closed
    the connection") under the default 64 MiB `max_message_bytes`."""
    port = free_tcp_port()
    async with running([sys.executable, UPSTREAM, "--http", str(port)], port=port, label="HTTP upstream"):
        upstream = {"url": f"http://127.0.0.1:{port}/mcp", "max_message_bytes": 4_000_000}
        config = write_config(standard_config(upstreams={"e2e": upstream}))
        async with connect("stdio", config, "legacy") as client:
            with anyio.fail_after(30):
                fits = text_of(await client.call_tool("echo", {"text": "x" * 1_500_000}))
    assert fits == "x" * 1_500_000


async def test_sse_upstream_message_limit_is_its_max_message_bytes(write_config: ConfigWriter) -> None:
    """A `transport: sse` upstream's event may be as long as its `max_message_bytes`: mcp's SSE client
    capped it at 1 MiB whatever the setting, and dropped the connection with no reason given. One over
    the limit ends the event stream (a legacy SSE server has no other), so it fails the calls in flight
    naming the upstream and the limit, and the upstream reconnects."""
    port = free_tcp_port()
    async with running([sys.executable, UPSTREAM, "--sse", str(port), "/events"], port=port, label="SSE upstream"):
        upstream = {"url": f"http://127.0.0.1:{port}/events", "transport": "sse", "max_message_bytes": 4_000_000}
        config = write_config(standard_config(upstreams={"e2e": upstream}))
        async with connect("stdio", config, "legacy") as client:
            with anyio.fail_after(30):
                fits = text_of(await client.call_tool("echo", {"text": "x" * 1_500_000}))
            with anyio.fail_after(30), pytest.raises(MCPError) as too_long:
                await client.call_tool("echo", {"text": "x" * 4_000_000})
            with anyio.fail_after(30):
                after = text_of(await client.call_tool("echo", {"text": "fits"}))
    reason = "an event longer than the limit of 4000000 bytes"
    assert fits == "x" * 1_500_000
    assert too_long.value.code == -32000
    assert too_long.value.message == f"the gateway closed its connection to upstream 'e2e': it sent {reason}"
    assert too_long.value.data == {"upstream": "e2e", "reason": reason}
    assert after == "fits"


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_interceptor_server_message_over_its_max_message_bytes_fails_the_invocation_closed(
    write_config: ConfigWriter, transport: str
) -> None:
    """A remote interceptor server's answer is capped by its `max_message_bytes` as an upstream's is: there
    was no setting (a hostile host could send 64 MiB lines, and JSON answers or SSE events of any size over
    HTTP). One over it fails the invocation closed, naming the interceptor, and the host keeps serving."""
    port = free_tcp_port()
    args = [INTERCEPTOR_SERVER, "--http", str(port)] if transport == "http" else [INTERCEPTOR_SERVER]
    where = {"url": f"http://127.0.0.1:{port}/mcp"} if transport == "http" else {"command": sys.executable}
    server = {"name": "remote", **where, "max_message_bytes": 65536}
    if transport == "stdio":
        server["args"] = args
    config = write_config(
        standard_config(interceptors={"servers": [server], "overrides": {"watchdog": {"timeout_ms": 10_000}}})
    )
    async with contextlib.AsyncExitStack() as stack:
        if transport == "http":
            await stack.enter_async_context(running([sys.executable, *args], port=port, label="interceptor server"))
        async with connect("stdio", config, "legacy") as client:
            with anyio.fail_after(30):
                fits = text_of(await client.call_tool("echo", {"text": "flood 1000"}))
            with anyio.fail_after(30), pytest.raises(MCPError) as blocked:
                await client.call_tool("echo", {"text": "flood 100000"})
            with anyio.fail_after(30):
                while True:  # a stdio host is restarted: poll until a call gets through again
                    try:
                        after = text_of(await client.call_tool("echo", {"text": "fine"}))
                        break
                    except MCPError:
                        await anyio.sleep(0.2)
    assert (fits, after) == ("flood 1000", "fine")
    assert (blocked.value.code, blocked.value.message) == (-32602, "Blocked by interceptor validation")
    assert blocked.value.data == WATCHDOG_BLOCK


async def test_r61_the_gateways_interceptors_list_and_invoke_apply_the_configured_overrides(
    write_config: ConfigWriter,
) -> None:
    # `interceptors/list` shows what the gateway enforces: it listed remote and local interceptors as
    # their hosts advertise them, overrides ignored, and invoked one directly on a phase its narrowed
    # hooks exclude (the gateway never runs it there).
    narrowed = [{"events": ["tools/call"], "phase": "request"}]
    config = standard_config(
        interceptors={
            "servers": [{"name": "remote", "command": sys.executable, "args": [INTERCEPTOR_SERVER]}],
            "guards": [{"name": "secrets"}],
            "overrides": {
                "watchdog": {"mode": "audit", "fail_open": True, "priority": 7},
                "secrets": {"hooks": narrowed},
            },
        }
    )
    target = Target("stdio", write_config(config))
    request = {"event": "tools/call", "phase": "response", "payload": {"content": []}}
    with anyio.fail_after(30):
        async with target.client("legacy") as client:
            listed = (await raw_request(client, "interceptors/list", {}))["interceptors"]
            with pytest.raises(MCPError) as refused:
                await raw_request(client, "interceptor/invoke", {"name": "secrets", **request})
    by_name = {d["name"]: d for d in listed}
    watchdog, secrets = by_name["watchdog"], by_name["secrets"]
    assert (watchdog["mode"], watchdog["failOpen"], watchdog["priorityHint"]) == ("audit", True, 7)
    assert secrets["hooks"] == narrowed
    assert refused.value.code == -32602
    assert refused.value.data is not None
    assert (refused.value.data["interceptor"], refused.value.data["advertisedHooks"]) == ("secrets", narrowed)


async def test_a_session_ended_mid_call_cancels_the_call_on_its_http_upstream(write_config: ConfigWriter) -> None:
    """A handshake-era session ended while a call runs (its client DELETEs it, or its SSE stream drops) closes
    its own upstream sessions gracefully: the call is cancelled there, as a direct server would cancel it.
    The connection was cut at once, so the upstream kept the work (and its session: no DELETE went out)."""
    upstream_port, gateway_port = free_tcp_port(), free_tcp_port()
    config = write_config({"upstreams": {"e2e": {"url": f"http://127.0.0.1:{upstream_port}/mcp"}}})
    argv = cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{gateway_port}")
    url = f"http://127.0.0.1:{gateway_port}/mcp"
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}

    def message(request_id: int | None, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if request_id is not None:
            body["id"] = request_id
        return body if params is None else {**body, "params": params}

    async with (
        running([sys.executable, UPSTREAM, "--http", str(upstream_port)], port=upstream_port, label="HTTP upstream"),
        running(argv, port=gateway_port, env=gateway_env(), label="HTTP gateway"),
        httpx2.AsyncClient(timeout=30) as http,
    ):
        with anyio.fail_after(60):
            opened = await http.post(url, headers=headers, json=message(1, "initialize", hello))
            session = {**headers, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
            await http.post(url, headers=session, json=message(None, "notifications/initialized"))
            sleep = message(2, "tools/call", {"name": "sleep", "arguments": {"seconds": 60, "token": "cut"}})
            async with anyio.create_task_group() as tg:
                tg.start_soon(partial(http.post, url, headers=session, json=sleep))
                wait = message(3, "tools/call", {"name": "wait_started", "arguments": {"token": "cut"}})
                await http.post(url, headers=session, json=wait)
                ended = await http.delete(url, headers=session)  # no notifications/cancelled first
                tg.cancel_scope.cancel()
            async with Client(url, mode="legacy") as client:
                verdict = text_of(await client.call_tool("was_cancelled", {"token": "cut", "wait": 5}))
    assert ended.status_code == 200
    assert verdict == "cancelled"
