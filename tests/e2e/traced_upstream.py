"""A stdio upstream whose `traceparent` tool answers with the `traceparent` of its own request's `_meta`
(what the gateway sent on), for the tracing tests."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server


async def list_tools(ctx: ServerRequestContext[Any], params: Any) -> types.ListToolsResult:
    schema = {"type": "object", "properties": {"text": {"type": "string"}}}
    return types.ListToolsResult(
        tools=[types.Tool(name="traceparent", description="Its traceparent.", input_schema=schema)]
    )


async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
    meta = (ctx.params or {}).get("_meta") or {}
    text = str(meta.get("traceparent", "none"))
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def main() -> None:
    server = Server("traced-upstream", version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
