"""Requests a handshake-era upstream sends outside any call reach the client, over stdio and HTTP.

The filesystem and everything reference servers ask for `roots/list` again when the client says
its roots changed; no request of the client is in flight then. Over HTTP such a request must go on
the session's standalone (GET) stream: the stream of the client's last request closed with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from e2e_support import ConfigWriter, fresh_gateway
from test_upstream_requests_at_start import PROJECT, Roots, roots_config, roots_seen

pytestmark = pytest.mark.anyio


class AskedRoots(Roots):
    """Roots that also signal each time the client is asked for them."""

    def __init__(self, *uris: str) -> None:
        super().__init__(*uris)
        self.asked = anyio.Event()

    async def __call__(self, context: Any) -> types.ListRootsResult:
        self.asked.set()
        return await super().__call__(context)


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")  # roots, as of 2026-07-28
async def test_roots_asked_after_list_changed_with_no_call_in_flight_reach_the_client(
    write_config: ConfigWriter, tmp_path: Path, transport: str
) -> None:
    config = write_config(roots_config(tmp_path / "pids"))
    roots = AskedRoots(PROJECT)
    with anyio.fail_after(60):
        async with fresh_gateway(transport, config, "legacy", list_roots_callback=roots) as client:
            first = await roots_seen(client)
            roots.uris.append(PROJECT + "/sub")
            roots.asked = anyio.Event()
            await client.send_roots_list_changed()
            with anyio.fail_after(10):  # no call in flight: the upstream's roots/list needs the standalone stream
                await roots.asked.wait()
            second = await roots_seen(client, unlike=first)
    assert [root["uri"] for root in first] == [PROJECT]
    assert [root["uri"] for root in second] == [PROJECT, PROJECT + "/sub"]
