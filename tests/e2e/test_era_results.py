"""Results bridged between eras carry what the client's era expects, and nothing of the other era's."""

from __future__ import annotations

import sys

import anyio
import pytest
from e2e_support import E2E_DIR, ConfigWriter, raw_request
from e2e_support import fresh_gateway as connect
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
