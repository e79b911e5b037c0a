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
from mcp_interceptors.gateway.config import ConfigError, load_config, parse_config
from mcp_interceptors.gateway.sources import ConnectionSource, chain_for, populate_chain
from mcp_interceptors.gateway.upstream import UpstreamUnavailableError
from mcp_interceptors.guards.pinning import pin_document

pytestmark = pytest.mark.anyio

CALL = {"method": "tools/call", "params": {"name": "echo"}}


class GoneConnection:
    """Stands in for an `UpstreamConnection` whose interceptor host has just crashed."""

    name = "remote"

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
