"""An upstream that answers as a hostile or careless server may (stdio, both eras), for the evasion tests.

It writes every request it receives to the JSON-lines file `$EVASIVE_LOG`, so a test sees exactly what got
past the gateway. `ask` (a tool, a prompt, and the resource `evasive://ask`) asks for the client's roots
with a 2026-07-28 `input_required` result, and answers the retry with what it got.
"""

from __future__ import annotations

import json
import os
from typing import Any

import anyio
from mcp.server import Server
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.stdio import stdio_server

LOG = anyio.Path(os.environ["EVASIVE_LOG"])
ASK_ROOTS = {"roots": {"method": "roots/list", "params": {}}}
TOOLS = [
    {"name": "echo", "inputSchema": {"type": "object"}},
    {"name": "ask", "inputSchema": {"type": "object"}},
]


def answered(params: dict[str, Any]) -> str | None:
    responses = params.get("inputResponses")
    return json.dumps(responses) if responses else None


async def respond(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    params = dict(ctx.params or {})
    async with await LOG.open("a") as log:
        await log.write(json.dumps({"method": ctx.method, "params": params}) + "\n")
    retry = answered(params)
    asking = {"resultType": "input_required", "inputRequests": ASK_ROOTS, "requestState": "asked"}
    if ctx.method == "tools/list":
        return {"tools": TOOLS}
    if ctx.method == "prompts/list":
        return {"prompts": [{"name": "ask"}]}
    if ctx.method == "resources/list":
        return {"resources": [{"uri": "evasive://ask", "name": "ask"}]}
    if ctx.method == "resources/templates/list":
        return {"resourceTemplates": []}
    if ctx.method == "tools/call" and params.get("name") == "echo":
        return {"content": [{"type": "text", "text": "echoed"}]}
    if ctx.method == "tools/call":
        return asking if retry is None else {"content": [{"type": "text", "text": retry}]}
    if ctx.method == "prompts/get":
        text = {"type": "text", "text": retry or ""}
        return asking if retry is None else {"messages": [{"role": "user", "content": text}]}
    if ctx.method == "resources/read":
        return asking if retry is None else {"contents": [{"uri": "evasive://ask", "text": retry}]}
    return await call_next(ctx)


async def main() -> None:
    async def listing(ctx: Any, params: Any) -> Any:
        raise AssertionError("answered by the middleware")

    # Registered handlers make the server advertise tools, prompts and resources; the middleware answers.
    server = Server(
        "evasive",
        version="1.0.0",
        on_list_tools=listing,
        on_call_tool=listing,
        on_list_prompts=listing,
        on_get_prompt=listing,
        on_list_resources=listing,
        on_list_resource_templates=listing,
        on_read_resource=listing,
    )
    server.middleware.append(respond)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
