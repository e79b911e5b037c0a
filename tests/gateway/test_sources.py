"""`gateway/sources.py`: a remote interceptor host behind the gateway's supervised connection."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import descriptor
from mcp_types import CONNECTION_CLOSED

from mcp_interceptors import Chain
from mcp_interceptors.gateway.sources import ConnectionSource
from mcp_interceptors.gateway.upstream import UpstreamUnavailableError

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
