"""An upstream that misses the start window is not cut off: it goes on starting and is listed once up.

With several upstreams the gateway serves once one is up and waits 10 s more for the others. A filesystem
server started through `npx` under load missed that window: the gateway killed it mid-start, and 4 minutes
later, while its client kept listing tools, it was still not back (the docs said it was retried).
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from e2e_support import E2E_DIR, ConfigWriter, fresh_gateway, upstream_entry

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


# Shared connections: a handshake-era HTTP session opens upstream sessions (processes) of its own.
@pytest.mark.parametrize(("transport", "mode"), [("stdio", "legacy"), ("http", "2026-07-28")])
async def test_an_upstream_slow_to_start_is_listed_once_up_and_started_once(
    write_config: ConfigWriter, tmp_path: Path, transport: str, mode: str
) -> None:
    starts = tmp_path / "starts"
    slow = {
        "command": sys.executable,
        "args": [str(E2E_DIR / "slow_start_upstream.py")],
        "env": {"SLOW_STARTS": str(starts), "SLOW_FIRST_S": "13", "E2E_SCHEME": "slow"},
    }
    config = write_config({"upstreams": {"fast": upstream_entry(), "slow": slow}})
    with anyio.fail_after(120):
        async with fresh_gateway(transport, config, mode) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert "fast__echo" in names and "slow__echo" not in names  # served without it past the window
            while "slow__echo" not in names:
                await anyio.sleep(0.5)  # a client polling its tool list, as the one that reported it did
                names = {tool.name for tool in (await client.list_tools()).tools}
            result = await client.call_tool("slow__echo", {"text": "up"})
    assert result.content[0].text == "up"  # type: ignore[union-attr]
    assert len(starts.read_text().splitlines()) == 1  # never killed and started again
