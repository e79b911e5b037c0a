"""An upstream whose tool listing may be cached and shared (`cacheScope: public`, 60 s), in either era."""

from __future__ import annotations

from mcp.server.caching import CacheHint
from mcp.server.mcpserver import MCPServer

server = MCPServer("hinted", version="1.0.0", cache_hints={"tools/list": CacheHint(ttl_ms=60_000, scope="public")})


@server.tool(description="Say hello.")
async def hello() -> str:
    return "hello"


@server.tool(description="Remove everything.")
async def wipe() -> str:
    return "wiped"


if __name__ == "__main__":
    server.run("stdio")
