"""A handshake-era-only upstream with resource subscriptions, as the reference servers have them.

It sends `notifications/resources/updated` only for what it was subscribed to: `touch` sends one for a
URI when it is subscribed and answers whether it was; `subscriptions` lists what is subscribed (once
nothing is, or after `wait` seconds); `crash` ends the process, as a crashing server does.
"""

from __future__ import annotations

import json
import os
from typing import Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("subscribing-upstream", version="1.0.0")
SUBSCRIBED: set[str] = set()
#: set whenever the last subscription goes
NONE_LEFT = [anyio.Event()]


async def subscribe(ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams) -> dict[str, Any]:
    SUBSCRIBED.add(str(params.uri))
    if NONE_LEFT[0].is_set():
        NONE_LEFT[0] = anyio.Event()
    return {}


async def unsubscribe(ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams) -> dict[str, Any]:
    SUBSCRIBED.discard(str(params.uri))
    if not SUBSCRIBED:
        NONE_LEFT[0].set()
    return {}


server._lowlevel_server.add_request_handler("resources/subscribe", types.SubscribeRequestParams, subscribe)
server._lowlevel_server.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, unsubscribe)


@server.resource("sub://doc", name="doc", description="A document that changes.")
async def doc() -> str:
    return "the document"


@server.resource("sub://other", name="other", description="Another document.")
async def other() -> str:
    return "the other document"


@server.tool(description="Change a resource: notify its subscribers.")
async def touch(uri: str, ctx: Context) -> str:
    if uri not in SUBSCRIBED:
        return "not subscribed"
    await ctx.session.send_resource_updated(uri)
    return "subscribed"


@server.tool(description="The URIs subscribed now, after waiting up to `wait` seconds for there to be none.")
async def subscriptions(wait: float = 0.0) -> str:
    if SUBSCRIBED:
        with anyio.move_on_after(wait):
            await NONE_LEFT[0].wait()
    return json.dumps(sorted(SUBSCRIBED))


@server.tool(description="Exit at once, as a crashing server does.")
async def crash() -> str:
    os._exit(3)


async def handshake_only(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    if ctx.method == "server/discover":
        raise MCPError(-32601, "Method not found", ctx.method)
    return await call_next(ctx)


if __name__ == "__main__":
    server.middleware.insert(0, handshake_only)
    server.run("stdio")
