"""A low-level upstream that declares `logging` and reports the log level each call asked for
(`--2026-only`: it refuses `initialize`).

Over 2026-07-28 the level rides in the request's `_meta` envelope; `logging/setLevel` (handshake era)
is remembered per connection. The `level` tool answers with whichever applies, so a test can see
what a handshake-era client's `logging/setLevel` became on the way through the gateway.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp_types import LOG_LEVEL_META_KEY as LOG_LEVEL_KEY

set_by_handshake_era: list[str] = []


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    schema = {"type": "object", "properties": {}}
    return types.ListToolsResult(
        tools=[types.Tool(name="level", description="The log level asked for.", input_schema=schema)]
    )


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    meta = params.meta or {}
    level = meta.get(LOG_LEVEL_KEY) or (set_by_handshake_era[-1] if set_by_handshake_era else "unset")
    return types.CallToolResult(content=[types.TextContent(type="text", text=str(level))])


async def set_level(ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
    set_by_handshake_era.append(params.level)
    return types.EmptyResult()


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # logging is deprecated as of 2026-07-28; this server still offers it
    server = Server(
        "logging-upstream", on_list_tools=list_tools, on_call_tool=call_tool, on_set_logging_level=set_level
    )


async def refuse_initialize(ctx: Any, call_next: Any) -> Any:
    if ctx.method == "initialize":
        raise MCPError(-32601, "Method not found", ctx.method)
    return await call_next(ctx)


if "--2026-only" in sys.argv:
    server.middleware.insert(0, refuse_initialize)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
