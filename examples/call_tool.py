"""Call an MCP server's tools from the shell, as an agent would (the README quick start's client).

python examples/call_tool.py -- COMMAND [ARG ...]                   list the tools of a stdio server
python examples/call_tool.py TOOL '{"k": "v"}' -- COMMAND [ARG ...]  call one tool with JSON arguments
python examples/call_tool.py --url http://127.0.0.1:8080/mcp [--bearer TOKEN] [TOOL [JSON]]

The command is typically the gateway: `-- mcp-interceptors gateway --config gateway.yaml`. Prints the
tool's text, or the JSON-RPC error the gateway answered with (exit 1).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import anyio
import httpx2
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    own, command = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tool", nargs="?", help="tool to call (none: list the tools)")
    parser.add_argument("arguments", nargs="?", default="{}", help="the tool's arguments as a JSON object")
    parser.add_argument("--url", help="a Streamable HTTP endpoint instead of a command after --")
    parser.add_argument("--bearer", help="bearer token for --url")
    args = parser.parse_args(own)
    if bool(args.url) == bool(command):
        parser.error("give either --url or a server command after --")
    return args, command


def connect(args: argparse.Namespace, command: list[str]) -> Client:
    if args.url:
        headers = {"Authorization": f"Bearer {args.bearer}"} if args.bearer else {}
        return Client(streamable_http_client(args.url, http_client=httpx2.AsyncClient(headers=headers)))
    return Client(StdioServerParameters(command=command[0], args=command[1:]))


def text_of(result: Any) -> str:
    texts = [getattr(block, "text", None) for block in result.content]
    if texts and all(text is not None for text in texts):
        return "\n".join(texts)
    return json.dumps(result.model_dump(mode="json", exclude_none=True)["content"], indent=2)


async def main(argv: list[str]) -> int:
    args, command = parse(argv)
    async with connect(args, command) as client:
        if args.tool is None:
            for tool in (await client.list_tools()).tools:
                print(f"{tool.name}: {(tool.description or '').splitlines()[0] if tool.description else ''}")
            return 0
        try:
            result = await client.call_tool(args.tool, json.loads(args.arguments))
        except MCPError as error:
            print(f"refused: {error.code} {error.message} {json.dumps(error.data)}")
            return 1
        print(text_of(result))
        return 1 if result.is_error else 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[1:]))
