"""What a hostile client or upstream tries to get past the guards in the gateway: fields the chain did not see
(`params._meta`), answers it did not govern (`inputResponses` of every retried call, answers shaped like
another feature's), and tools left callable after a blocked listing. The real CLI gateway over stdio, fronting
`evasive_upstream.py` (which records what reached it) or `guards_upstream.py`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from guard_support import E2E_TIMEOUT_S, ERAS, gateway_client, gateway_config
from mcp import Client, MCPError
from pydantic import TypeAdapter

from mcp_interceptors.protocol.invoke import RawParams

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

EVASIVE = str(Path(__file__).resolve().parent / "evasive_upstream.py")
SECRET = "AKIAQYLPMN5HHHFPZAM2"
ALLOWED_ROOT = "file:///work/project"
ROOTS = {"roots": [{"uri": ALLOWED_ROOT}, {"uri": "file:///etc"}]}
_RAW: Any = TypeAdapter(dict[str, Any])


class RawRequest(types.Request[RawParams, str]):
    method: str
    params: RawParams


async def raw(client: Client, method: str, params: dict[str, Any]) -> dict[str, Any]:
    request = RawRequest(method=method, params=RawParams.model_validate(params))
    result: dict[str, Any] = await client.session.send_request(request, _RAW)
    return result


def evasive(tmp_path: Path, guards: list[dict[str, Any]]) -> tuple[dict[str, Any], Path]:
    log = tmp_path / "upstream.jsonl"
    entry = {"command": sys.executable, "args": [EVASIVE], "env": {"EVASIVE_LOG": str(log)}}
    return gateway_config(guards, upstreams={"evasive": entry}), log


def received(log: Path, method: str) -> list[dict[str, Any]]:
    """The params of every `method` request the upstream received."""
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    return [entry["params"] for entry in entries if entry["method"] == method]


@pytest.mark.parametrize("mode", ERAS)
async def test_request_meta_is_governed_like_the_rest_of_the_request(tmp_path: Path, mode: str) -> None:
    config, log = evasive(tmp_path, [{"name": "secrets"}])
    with anyio.fail_after(E2E_TIMEOUT_S):
        async with gateway_client(tmp_path, config, mode=mode) as client:
            await raw(client, "tools/call", {"name": "echo", "arguments": {}, "_meta": {"note": f"key {SECRET}"}})
    [sent] = received(log, "tools/call")
    assert sent["_meta"]["note"] == "key [REDACTED:aws_access_key]"


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("tools/call", {"name": "ask", "arguments": {}}),
        ("prompts/get", {"name": "ask"}),
        ("resources/read", {"uri": "evasive://ask"}),
    ],
)
@pytest.mark.parametrize("answer", [ROOTS, {**ROOTS, "action": "accept"}], ids=["roots", "roots-with-action"])
async def test_input_responses_of_every_retried_call_are_governed_whatever_their_shape(
    tmp_path: Path, method: str, params: dict[str, Any], answer: dict[str, Any]
) -> None:
    config, log = evasive(tmp_path, [{"name": "roots-guard", "config": {"allowed": [ALLOWED_ROOT]}}])
    with anyio.fail_after(E2E_TIMEOUT_S):
        async with gateway_client(tmp_path, config, mode="2026-07-28") as client:
            asked = await raw(client, method, params)
            assert asked["resultType"] == "input_required"
            retry = {**params, "inputResponses": {"roots": answer}, "requestState": asked["requestState"]}
            await raw(client, method, retry)
    [*_, sent] = received(log, method)
    assert sent["inputResponses"]["roots"]["roots"] == [{"uri": ALLOWED_ROOT}]


async def test_after_a_blocked_listing_no_tool_of_that_listing_stays_callable_in_either_era(tmp_path: Path) -> None:
    config = gateway_config([{"name": "tool-pinning"}])
    for mode in ERAS:
        with anyio.fail_after(E2E_TIMEOUT_S):
            async with gateway_client(tmp_path, config, mode=mode) as client:
                await client.list_tools()
                await client.call_tool("rug_pull", {})
                with pytest.raises(MCPError) as listing:
                    await client.list_tools()
                assert listing.value.data["interceptor"] == "tool-pinning"
                with pytest.raises(MCPError) as call:
                    await client.call_tool("add", {"a": 1, "b": 2})  # unchanged, but shown by no listing now
                assert call.value.data["interceptor"] == "tool-pinning", mode
