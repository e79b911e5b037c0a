"""An upstream that completes arguments and answers with the reference it was asked about, so a test
sees the name or URI the gateway forwarded. `COMPLETING_NAME` names it; its resource template has a
query part (`{?q}`), which no URI matches as written."""

from __future__ import annotations

import os

import mcp_types as types
from mcp.server.mcpserver import MCPServer

NAME = os.environ.get("COMPLETING_NAME", "completing")
server = MCPServer(NAME, version="1.0.0")


@server.prompt(description="Greet someone.")
def greet(who: str) -> str:
    return f"hello {who}"


@server.resource(NAME + "://search{?q}", description="Search by query.")
def search(q: str = "") -> str:
    return f"results for {q}"


@server.completion()
async def complete(
    ref: types.PromptReference | types.ResourceTemplateReference,
    argument: types.CompletionArgument,
    context: types.CompletionContext | None,
) -> types.Completion:
    asked = ref.name if isinstance(ref, types.PromptReference) else ref.uri
    return types.Completion(values=[f"{NAME}:{asked}:{argument.value}"])


if __name__ == "__main__":
    server.run("stdio")
