"""An upstream for the guard-bypass tests (stdio, both eras): `echo` answers with the `text` it received
(so a test sees what got past the gateway's request chain), and `leak` answers with one of `LEAKS`, raw
results that hide a secret or a card in the ways an attacker would (`structuredContent`, an embedded
resource, encoded text).
"""

from __future__ import annotations

import base64
from typing import Any

import anyio
from mcp.server import Server
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.stdio import stdio_server

AWS = "AKIAQYLPMN5HHHFPZAM2"
TOOLS = [
    {"name": "echo", "inputSchema": {"type": "object"}},
    {"name": "leak", "inputSchema": {"type": "object"}},
]
LEAKS: dict[str, dict[str, Any]] = {
    "structured-float-card": {
        "content": [{"type": "text", "text": "ok"}],
        "structuredContent": {"customer": {"card": 4111111111111111.0}},
    },
    "embedded-resource-base64url": {
        "content": [
            {
                "type": "resource",
                "resource": {
                    "uri": "file:///app/.env",
                    "mimeType": "text/plain",
                    "text": base64.urlsafe_b64encode(f"AWS_ACCESS_KEY_ID={AWS}\n".encode()).decode().rstrip("="),
                },
            }
        ]
    },
    "zero-width-token": {"content": [{"type": "text", "text": f"key {AWS[:6]}\u200b{AWS[6:]}"}]},
}


async def respond(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    params = dict(ctx.params or {})
    if ctx.method == "tools/list":
        return {"tools": TOOLS}
    if ctx.method == "tools/call":
        arguments = params.get("arguments") or {}
        if params.get("name") == "echo":
            return {"content": [{"type": "text", "text": str(arguments.get("text"))}]}
        return LEAKS[str(arguments.get("case"))]
    return await call_next(ctx)


async def main() -> None:
    async def listing(ctx: Any, params: Any) -> Any:
        raise AssertionError("answered by the middleware")

    server = Server("bypass", version="1.0.0", on_list_tools=listing, on_call_tool=listing)
    server.middleware.append(respond)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
