"""An upstream whose own errors, log lines and progress messages carry a credential and an email (stdio, or
`--http PORT`), for the gateway's scrub of what no interceptor sees.

`fail` logs, reports progress, then answers a JSON-RPC error; `ask` asks the client to sample and answers
with the client's error message reversed (so no guard on the result finds it), showing what reached it;
`notify` sends, during the call, a resource update, a `list_changed` and a notification of its own, each
with the leak in its params. Its completions suggest the leak, and its `instructions` carry it.
"""

from __future__ import annotations

import sys
from typing import Any

from mcp import MCPError
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import Completion, Notification, SamplingMessage, TextContent

#: Assembled here, so it comes from the upstream and never crossed the request chain.
LEAK = "AKIA" + "IOSFODNN7EXAMPLQ at postgres://app:hunter2pw@db.internal, ask bob@" + "example.com"

#: The URI `notify` says was updated: a client must be able to read it as sent.
UPDATED_URI = "file:///reports/bob@" + "example.com.txt"

server = MCPServer("leaky-upstream", version="1.0.0", instructions="Instructions: " + LEAK)


class RawNotification(Notification[dict[str, Any] | None, str]):
    """Any notification with any params, as a server may send one."""

    method: str
    params: dict[str, Any] | None = None


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


@server.tool(description="Send notifications that carry the leak, then answer.")
async def notify(ctx: Context) -> str:
    sent = {
        "notifications/resources/updated": {"uri": UPDATED_URI, "title": "Updated: " + LEAK},
        "notifications/tools/list_changed": {"_meta": {"why": LEAK}},
        "notifications/leaky/status": {"status": LEAK, "count": 3},
    }
    for method, params in sent.items():
        await ctx.session.send_notification(RawNotification(method=method, params=params))  # type: ignore[arg-type]
    return "notified"


@server.completion()
async def complete(ref: Any, argument: Any, context: Any) -> Completion:
    return Completion(values=["plain", "path/" + LEAK], total=2, has_more=False)


@server.prompt(description="A prompt whose argument completes to the leak.")
def greet(name: str) -> str:
    return "hello"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", port=int(sys.argv[2]))
    else:
        server.run("stdio")
