"""An upstream whose `grow` tool adds a tool at run time and announces it, in whichever era it is asked."""

from __future__ import annotations

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("growing", version="1.0.0")


@server.tool(description="Add a tool named `name` that returns `reply`, and announce the change.")
async def grow(name: str, reply: str, ctx: Context) -> str:
    async def grown() -> str:
        return reply

    server.add_tool(grown, name=name, description=f"grown at run time: {name}")
    await ctx.notify_tools_changed()  # 2026-07-28: to subscriptions/listen streams
    if ctx.request_context.protocol_version < "2026":  # handshake era: a notification on the session
        await ctx.request_context.session.send_tool_list_changed()
    return f"grew {name}"


@server.tool(description="Announce `count` tool list changes (nothing changes), then answer.")
async def storm(count: int, ctx: Context) -> str:
    for _ in range(count):
        await ctx.notify_tools_changed()
        if ctx.request_context.protocol_version < "2026":
            await ctx.request_context.session.send_tool_list_changed()
    return f"announced {count}"


@server.tool(description="Echo text back.")
async def echo(text: str) -> str:
    return text


if __name__ == "__main__":
    server.run("stdio")
