"""An ordinary MCP server to put behind the gateway: tools, a prompt, resources, progress and sampling.

python examples/upstream_server.py                 # stdio
python examples/upstream_server.py --http 8003     # http://127.0.0.1:8003/mcp
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context, MCPServer, Resolve, Sample
from mcp_types import CreateMessageResult, SamplingMessage, TextContent

#: Run two copies behind one gateway by giving each its own scheme (resource URIs are not prefixed).
SCHEME = os.environ.get("NOTES_SCHEME", "notes")
server = MCPServer(SCHEME, version="1.0.0", instructions="A small notes server for gateway demos.")
NOTES: dict[str, str] = {"welcome": "Hello from the notes server."}


@server.tool(description="Echo text back.")
async def echo(text: str) -> str:
    return text


@server.tool(description="Save a note.")
async def save_note(name: str, text: str) -> str:
    NOTES[name] = text
    return f"saved {name} ({len(text)} chars)"


@server.tool(description="Read a note.")
async def read_note(name: str) -> str:
    return NOTES.get(name, "")


@server.tool(description="Delete every note. Dangerous.")
async def delete_everything() -> str:
    NOTES.clear()
    return "deleted"


@server.tool(description="Count down with progress notifications.")
async def countdown(steps: int, ctx: Context) -> str:
    for step in range(steps):
        await ctx.report_progress(step + 1, steps, f"step {step + 1}")
    return "done"


@server.tool(description="Sleep for a while (for cancellation demos).")
async def sleep(seconds: float) -> str:
    await anyio.sleep(seconds)
    return "awake"


def ask_model(question: str) -> Sample:
    message = SamplingMessage(role="user", content=TextContent(type="text", text=question))
    return Sample([message], max_tokens=50)


@server.tool(description="Ask the client's model a question (sampling).")
async def ask(question: str, answer: Annotated[CreateMessageResult, Resolve(ask_model)]) -> str:
    content = answer.content
    return f"model says: {content.text if isinstance(content, TextContent) else content}"


@server.resource(SCHEME + "://{name}", description="A note by name.")
async def note(name: str) -> str:
    return NOTES.get(name, "")


@server.prompt(description="Summarise a note.")
async def summarise(name: str) -> str:
    return f"Summarise this note: {NOTES.get(name, '')}"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", port=int(sys.argv[2]))
    else:
        server.run("stdio")
