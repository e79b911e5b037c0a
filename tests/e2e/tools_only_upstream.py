"""An upstream that serves tools only (no resources or prompts), so several copies can sit behind one gateway
without exposing one resource URI twice: `echo`, `sleep` and `pid`."""

from __future__ import annotations

import os

import anyio
from mcp.server.mcpserver import MCPServer

server = MCPServer("tools-only", version="1.0.0")


@server.tool(description="Echo text back.")
async def echo(text: str) -> str:
    return text


@server.tool(description="Sleep `seconds`, then answer.")
async def sleep(seconds: float) -> str:
    await anyio.sleep(seconds)
    return "awake"


@server.tool(description="This process's id (tells a replaced upstream from the one before).")
async def pid() -> str:
    return str(os.getpid())


if __name__ == "__main__":
    server.run("stdio")
