"""The e2e upstream, speaking only the handshake era: `server/discover` is refused.

The gateway then talks `initialize` to it, and bridges its server-to-client requests for
2026-07-28 clients through `input_required` rounds (the case of every TypeScript-SDK server).
"""

from __future__ import annotations

from typing import Any

from e2e_upstream import server
from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.server.context import CallNext, HandlerResult


async def handshake_era_only(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    if ctx.method == "server/discover":
        raise MCPError(-32601, "Method not found", ctx.method)
    return await call_next(ctx)


server.middleware.insert(0, handshake_era_only)

if __name__ == "__main__":
    server.run("stdio")
