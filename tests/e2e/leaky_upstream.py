"""An upstream whose own errors, log lines and progress messages carry a credential and an email (stdio, or
`--http PORT`), for the gateway's scrub of what no interceptor sees.

`fail` logs, reports progress, then answers a JSON-RPC error; `ask` asks the client to sample and answers
with the client's error message reversed (so no guard on the result finds it), showing what reached it.
"""

from __future__ import annotations

import sys

from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import SamplingMessage, TextContent

#: Assembled here, so it comes from the upstream and never crossed the request chain.
LEAK = "AKIA" + "IOSFODNN7EXAMPLQ at postgres://app:hunter2pw@db.internal, ask bob@" + "example.com"

server = MCPServer("leaky-upstream", version="1.0.0")


@server.tool(description="Log, report progress, then fail with an error that leaks.")
async def fail(ctx: Context) -> str:
    await ctx.info("log: " + LEAK, logger_name="leaky")
    await ctx.report_progress(1, 2, "progress: " + LEAK)
    raise MCPError(-32050, "boom: " + LEAK, {"detail": LEAK, "count": 3, "nested": [LEAK, 4111111111111111]})


@server.tool(description="Ask the client to sample; answer with its error message, reversed.")
async def ask(ctx: Context) -> str:
    message = SamplingMessage(role="user", content=TextContent(type="text", text="hello"))
    try:
        await ctx.session.create_message([message], max_tokens=5)
    except MCPError as exc:
        return f"{exc.error.code}:{exc.error.message[::-1]}"
    return "answered"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", port=int(sys.argv[2]))
    else:
        server.run("stdio")
