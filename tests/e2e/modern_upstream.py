"""The e2e upstream, speaking only the 2026-07-28 era: `initialize` is refused.

A handshake-era client reaches it through the gateway's bridge (its `input_required` rounds become
server requests to the client).
"""

from __future__ import annotations

from typing import Any

from e2e_upstream import server
from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.server.context import CallNext, HandlerResult


async def modern_era_only(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    if ctx.method == "initialize":
        raise MCPError(-32601, "Method not found", ctx.method)
    return await call_next(ctx)


server.middleware.insert(0, modern_era_only)

if __name__ == "__main__":
    server.run("stdio")
