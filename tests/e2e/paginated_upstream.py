"""A low-level upstream that lists its five tools two per page (`tools/list` with `nextCursor`)."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server

NAMES = [f"tool{index}" for index in range(5)]
PAGE = 2


async def list_tools(ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    start = int((params.cursor if params is not None and params.cursor else None) or 0)
    schema = {"type": "object", "properties": {}}
    tools = [types.Tool(name=name, description=f"page tool {name}", input_schema=schema) for name in NAMES]
    end = start + PAGE
    return types.ListToolsResult(tools=tools[start:end], next_cursor=str(end) if end < len(NAMES) else None)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"ran {params.name}")])


server = Server("paginated", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
