"""The requests no chain governs: `logging/setLevel` sent to every upstream that logs, anything else passed
to the one upstream there is, and progress relayed to a client that asked for it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

from mcp import MCPError
from mcp_types import LoggingLevel

from mcp_interceptors.gateway.input_rounds import Progress
from mcp_interceptors.gateway.session import Downstream
from mcp_interceptors.gateway.upstream.connection import UpstreamConnection
from mcp_interceptors.protocol.errors import INVALID_PARAMS, METHOD_NOT_FOUND

LOG_LEVELS: tuple[str, ...] = get_args(LoggingLevel)


async def broadcast(
    conns: Mapping[str, UpstreamConnection], client_era: str, method: str, params: dict[str, Any] | None
) -> dict[str, Any]:
    """`logging/setLevel` to every upstream with the logging capability."""
    logging = [conn for conn in conns.values() if conn.info is not None and "logging" in conn.info.capabilities]
    if not logging:  # what a server without the logging capability answers (and the gateway advertises none)
        raise MCPError(METHOD_NOT_FOUND, "Method not found", method)
    # 2026-07-28 has no logging/setLevel: for a handshake-era client the level rides in each request's envelope.
    in_envelope = [conn for conn in logging if conn.era == "2026-07-28" and client_era == "legacy"]
    level = (params or {}).get("level")
    if in_envelope and level not in LOG_LEVELS:
        raise MCPError(INVALID_PARAMS, f"level must be one of {', '.join(LOG_LEVELS)}", {"field": "level"})
    for conn in logging:
        if conn in in_envelope:
            conn.log_level = level
        else:
            await conn.request(method, params)
    return {}


async def passthrough(
    conns: Mapping[str, UpstreamConnection], method: str, params: dict[str, Any] | None, downstream: Downstream
) -> dict[str, Any]:
    """A request of no governed kind, to the one upstream there is (its result still needs the scrubber, D18)."""
    if len(conns) != 1:
        raise MCPError(
            METHOD_NOT_FOUND,
            f"Method not found: {method} cannot be routed to one of {len(conns)} upstreams",
            method,
        )
    conn = next(iter(conns.values()))
    return await conn.request(
        method, params, on_progress=progress_relay(downstream, params), on_notify=downstream.notify_related
    )


def progress_relay(downstream: Downstream, params: Mapping[str, Any] | None) -> Progress | None:
    """Relay upstream progress to the client when it asked for progress."""
    meta = (params or {}).get("_meta")
    if not isinstance(meta, Mapping) or "progressToken" not in meta:
        return None

    async def relay(progress: float, total: float | None, message: str | None) -> None:
        await downstream.progress(progress, total, message)

    return relay
