"""A stdio upstream whose `traceparent` and `tracestate` tools answer with that key of their own request's
`_meta` (what the gateway sent on), for the tracing tests."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server

TRACE_KEYS = ("traceparent", "tracestate")


async def list_tools(ctx: ServerRequestContext[Any], params: Any) -> types.ListToolsResult:
    schema = {"type": "object", "properties": {"text": {"type": "string"}}}
    return types.ListToolsResult(
        tools=[types.Tool(name=key, description=f"Its {key}.", input_schema=schema) for key in TRACE_KEYS]
    )


async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
    meta = (ctx.params or {}).get("_meta") or {}
    text = str(meta.get(params.name, "none"))
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def main() -> None:
    server = Server("traced-upstream", version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
