"""Results bridged between eras carry what the client's era expects, and nothing of the other era's."""

from __future__ import annotations

import sys

import anyio
import mcp_types as types
import pytest
from e2e_support import E2E_DIR, ConfigWriter, raw_request
from e2e_support import fresh_gateway as connect
from mcp.client import ClientRequestContext
from mcp_types import SERVER_INFO_META_KEY

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]
#: Fields only 2026-07-28 results have (`resultType` with the value `complete` is one, too).
MODERN_ONLY = {"resultType", "ttlMs", "cacheScope"}
CALLS = [
    ("tools/list", {}),
    ("tools/call", {"name": "echo", "arguments": {"text": "x"}}),
    ("resources/list", {}),
    ("prompts/get", {"name": "summarise", "arguments": {"name": "welcome"}}),
]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_handshake_era_client_gets_no_2026_fields_from_a_2026_upstream(
    write_config: ConfigWriter, transport: str
) -> None:
    upstream = {"command": sys.executable, "args": [str(E2E_DIR / "modern_upstream.py")]}
    config = write_config({"name": "era-gateway", "upstreams": {"modern": upstream}})
    async with connect(transport, config, "legacy") as client:
        with anyio.fail_after(30):
            results = {method: await raw_request(client, method, params) for method, params in CALLS}
    for method, result in results.items():
        assert not MODERN_ONLY & set(result), (method, result)
        assert SERVER_INFO_META_KEY not in (result.get("_meta") or {}), (method, result)
    assert results["tools/call"]["content"][0]["text"] == "x"


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_2026_client_gets_the_server_info_stamp_from_a_handshake_era_upstream(
    write_config: ConfigWriter, transport: str
) -> None:
    upstream = {"command": sys.executable, "args": [str(E2E_DIR / "handshake_upstream.py")]}
    config = write_config({"name": "era-gateway", "upstreams": {"legacy": upstream}})
    async with connect(transport, config, "2026-07-28") as client:
        with anyio.fail_after(30):
            results = {method: await raw_request(client, method, params) for method, params in CALLS}
    for method, result in results.items():
        assert result["resultType"] == "complete", (method, result)
        assert result["_meta"][SERVER_INFO_META_KEY]["name"] == "era-gateway", (method, result)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_handshake_era_client_gets_an_elicitation_id_for_a_2026_upstreams_url_elicitation(
    write_config: ConfigWriter, transport: str
) -> None:
    """2026-07-28 removed `elicitationId` from URL-mode elicitation; a handshake-era client requires it (mcp's
    refuses the request with -32602 and the call fails), so the bridge gives the request one."""
    upstream = {"command": sys.executable, "args": [str(E2E_DIR / "modern_upstream.py")], "era": "2026-07-28"}
    config = write_config({"name": "era-gateway", "upstreams": {"modern": upstream}})
    asked: list[types.ElicitRequestParams] = []

    async def elicit(ctx: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept")

    async with connect(transport, config, "legacy", elicitation_callback=elicit) as client:
        with anyio.fail_after(30):
            result = await client.call_tool("visit", {"url": "https://auth.example.com/sign-in"})
    assert not result.is_error, result
    assert [(p.mode, p.url) for p in asked if isinstance(p, types.ElicitRequestURLParams)] == [
        ("url", "https://auth.example.com/sign-in")
    ]
    assert isinstance(asked[0], types.ElicitRequestURLParams) and asked[0].elicitation_id
    assert result.content[0].text == "accept"  # type: ignore[union-attr]
