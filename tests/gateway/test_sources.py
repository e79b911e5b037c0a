"""`gateway/sources.py`: a remote interceptor host behind the gateway's supervised connection."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakes import descriptor
from mcp_types import CONNECTION_CLOSED

from mcp_interceptors import Chain
from mcp_interceptors.executor import Call
from mcp_interceptors.gateway.config import ConfigError, load_config, parse_config
from mcp_interceptors.gateway.interceptor_servers import ConnectionSource
from mcp_interceptors.gateway.sources import chain_for, populate_chain
from mcp_interceptors.gateway.upstream.connection import UpstreamConnection
from mcp_interceptors.gateway.upstream.errors import UpstreamUnavailableError
from mcp_interceptors.guards.pinning import pin_document
from mcp_interceptors.protocol.errors import InterceptorTimeoutError

pytestmark = pytest.mark.anyio

CALL = {"method": "tools/call", "params": {"name": "echo"}}
MISBEHAVING_HOST = str(Path(__file__).resolve().parent.parent / "misbehaving_host.py")


class GoneConnection:
    """Stands in for an `UpstreamConnection` whose interceptor host has just crashed."""

    name = "remote"
    up = True  # it has not noticed yet: the request finds it gone

    async def request(self, method: str, params: Any, **_: Any) -> dict[str, Any]:
        raise UpstreamUnavailableError(
            CONNECTION_CLOSED, "upstream 'remote' closed the connection", {"upstream": "remote"}
        )


async def test_r60_a_crashed_interceptor_host_behind_the_gateway_is_a_failure_not_a_deadline() -> None:
    chain = Chain(role="server")
    source = ConnectionSource(GoneConnection())  # type: ignore[arg-type]
    chain.add_source(source, [descriptor("watchdog", phase="request")], name="remote")
    result = await chain.execute("tools/call", "request", CALL, timeout_ms=5000)
    # The connection's error is -32000 with data, which used to read as the host's timeout: `status: timeout`.
    assert result.status == "validation_failed"
    assert result.aborted_at is not None
    assert (result.aborted_at.interceptor, result.aborted_at.type) == ("watchdog", "validation")
    assert result.aborted_at.reason == "invocation failed: interceptor host connection closed"
    assert [(f.code, f.timeout) for f in result.failures] == [(-32603, False)]


async def test_r62_a_widening_hook_override_names_the_config_file_and_field() -> None:
    raw = {
        "upstreams": {"a": {"command": "server"}},
        "interceptors": {
            "guards": [{"name": "sampling-guard"}],
            "overrides": {"sampling-guard": {"hooks": [{"events": ["tools/call"], "phase": "request"}]}},
        },
    }
    config = parse_config(raw, file="gateway.yaml")
    async with anyio.create_task_group() as tg:
        with pytest.raises(ConfigError) as error:
            await populate_chain(chain_for(config), config, tg, file="gateway.yaml")
    assert (error.value.file, error.value.path) == ("gateway.yaml", "interceptors.overrides.sampling-guard.hooks")
    assert "adds (tools/call, request)" in error.value.problem


async def test_guard_files_in_gateway_yaml_are_relative_to_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    echo = {"name": "echo", "inputSchema": {"type": "object"}}
    folder, elsewhere = tmp_path / "conf", tmp_path / "elsewhere"
    for each in (folder, elsewhere):
        (each / "logs").mkdir(parents=True)
    (folder / "pins.json").write_text(json.dumps(pin_document([echo])))
    (elsewhere / "pins.json").write_text(json.dumps(pin_document([{**echo, "description": "changed"}])))
    (folder / "gateway.yaml").write_text(
        "upstreams: {a: {command: server}}\n"
        "chain: {sinks: true}\n"
        "interceptors:\n"
        "  guards:\n"
        "    - {name: tool-pinning, config: {pin_file: pins.json}}\n"
        "    - {name: audit-log, config: {path: logs/audit.jsonl}}\n"
    )
    monkeypatch.chdir(elsewhere)  # the gateway's working folder holds other files of the same names
    config = load_config(folder / "gateway.yaml")
    chain = chain_for(config)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await populate_chain(chain, config, tg, file="gateway.yaml")
        result = await chain.execute("tools/list", "response", {"tools": [echo]})
    assert result.status == "success", result.aborted_at  # conf/pins.json pins echo as listed
    assert (folder / "logs" / "audit.jsonl").read_text().count("\n") == 1
    assert not (elsewhere / "logs" / "audit.jsonl").exists()


async def test_a_guard_detector_module_beside_gateway_yaml_is_importable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # undo the config folder's entry afterwards
    (tmp_path / "beside_gateway_yaml_detector.py").write_text(
        "from mcp_interceptors.guards.injection import Signal\n"
        "class Canary:\n"
        "    def detect(self, text):\n"
        "        return [Signal('canary', 1.0, 'canary word')] if 'canary' in text else []\n"
        "detector = Canary()\n"
    )
    (tmp_path / "gateway.yaml").write_text(
        "upstreams: {a: {command: server}}\n"
        "interceptors:\n"
        "  guards:\n"
        "    - {name: prompt-injection, config: {detectors: ['beside_gateway_yaml_detector:detector']}}\n"
    )
    monkeypatch.chdir(tmp_path.parent)
    config = load_config(tmp_path / "gateway.yaml")
    chain = chain_for(config)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await populate_chain(chain, config, tg, file="gateway.yaml")
        result = await chain.execute("tools/call", "response", {"content": [{"type": "text", "text": "a canary"}]})
    assert result.aborted_at is not None and result.aborted_at.interceptor == "prompt-injection"


def remote_host_config(server: dict[str, Any], overrides: dict[str, Any] | None = None) -> Any:
    interceptors: dict[str, Any] = {"servers": [{"name": "remote", **server}]}
    if overrides:
        interceptors["overrides"] = overrides
    return parse_config({"upstreams": {"a": {"command": "server"}}, "interceptors": interceptors}, file="gateway.yaml")


def pin(name: str) -> dict[str, Any]:
    return {"name": name, "type": "validation", "events": ["tools/call"], "phase": "request"}


async def test_r66_pinned_interceptors_run_on_their_host_after_its_listing_failed_at_start() -> None:
    # The host is up but its interceptors/list answer is malformed: its pins stand in for the listing and
    # are invoked there, as for a host down at start, so they pass once it answers them (they used to
    # fail closed for the gateway's whole life) and fail closed while it cannot.
    server = {"command": sys.executable, "args": [MISBEHAVING_HOST], "env": {"LISTING": "array"}}
    config = remote_host_config({**server, "required": [pin("ok"), pin("not-hosted")]})
    chain = chain_for(config)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            await populate_chain(chain, config, tg, file="gateway.yaml")
            answered = await chain.execute("tools/call", "request", CALL, interceptors=["ok"])
            unknown = await chain.execute("tools/call", "request", CALL, interceptors=["not-hosted"])
            tg.cancel_scope.cancel()
    assert answered.status == "success", answered.aborted_at
    assert unknown.aborted_at is not None and unknown.aborted_at.interceptor == "not-hosted"
    assert [(f.interceptor, f.code) for f in unknown.failures] == [("not-hosted", -32602)]


async def test_r61_overrides_of_pinned_interceptors_apply_while_their_host_is_down_at_start() -> None:
    down = {"command": sys.executable, "args": ["-c", "raise SystemExit(3)"]}
    overrides = {"watchdog": {"fail_open": True, "timeout_ms": 250}}
    config = remote_host_config({**down, "required": [pin("watchdog")]}, overrides)
    chain = chain_for(config)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            await populate_chain(chain, config, tg, file="gateway.yaml")
            result = await chain.execute("tools/call", "request", CALL)
            tg.cancel_scope.cancel()
    [entry] = chain.entries
    assert entry.overrides is not None and (entry.overrides.fail_open, entry.overrides.timeout_ms) == (True, 250)
    assert result.status == "success"  # failOpen: the host being down is recorded, not blocking
    assert [f.interceptor for f in result.failures] == ["watchdog"]


async def test_r59_an_invoke_on_a_silent_remote_host_times_out_at_its_timeout_ms_not_the_connection_s() -> None:
    # The gateway's own interceptor/invoke sends a client's `timeoutMs` on; a host that never answers
    # held it for the connection's timeout (60 s by default), with no timeoutMs or phase in the error.
    config = remote_host_config({"command": sys.executable, "args": [MISBEHAVING_HOST]})
    conn = UpstreamConnection("remote", config.interceptors.servers[0])
    call = Call("silent", "validation", "tools/call", "request", CALL, timeout_ms=100)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            await tg.start(conn.run)
            started = anyio.current_time()
            with pytest.raises(InterceptorTimeoutError) as error:
                await ConnectionSource(conn).invoke(call)
            waited = anyio.current_time() - started
            tg.cancel_scope.cancel()
    assert waited < 5
    assert error.value.code == -32000
    assert error.value.data == {"interceptor": "silent", "reason": "timeout", "timeoutMs": 1100.0, "phase": "request"}


async def test_r66_a_listing_that_hangs_at_start_is_given_up_on_as_add_server_does() -> None:
    # A host that never answers interceptors/list held the gateway's start for its per-request timeout_ms
    # (60 s by default); discovery now waits what `Chain.add_server` waits (10 s), then its pins stand in.
    server = {"command": sys.executable, "args": [MISBEHAVING_HOST], "env": {"LISTING": "silent"}}
    config = remote_host_config({**server, "required": [pin("ok")]})
    chain = chain_for(config)
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            started = anyio.current_time()
            await populate_chain(chain, config, tg, file="gateway.yaml")
            waited = anyio.current_time() - started
            tg.cancel_scope.cancel()
    assert 9 < waited < 20
    assert [entry.descriptor.name for entry in chain.entries] == ["ok"]


async def test_errors_about_an_interceptor_server_call_it_one_not_an_upstream() -> None:
    down = {"command": sys.executable, "args": ["-c", "raise SystemExit(3)"]}
    config = remote_host_config(down)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            with pytest.raises(ConfigError) as refused:
                await populate_chain(chain_for(config), config, tg, file="gateway.yaml")
            tg.cancel_scope.cancel()
    assert "interceptor server 'remote' failed to start" in str(refused.value)
    assert "upstream" not in str(refused.value)


async def test_a_server_whose_command_cannot_run_is_named_with_its_command(tmp_path: Path) -> None:
    """What the OS says (`FileNotFoundError`) names neither the command nor the server: the error does."""
    config = remote_host_config({"command": str(tmp_path / "no-such-guard")})
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            with pytest.raises(ConfigError) as refused:
                await populate_chain(chain_for(config), config, tg, file="gateway.yaml")
            tg.cancel_scope.cancel()
    assert f"interceptor server 'remote' failed to start: command '{tmp_path / 'no-such-guard'}' not found" in str(
        refused.value
    )
