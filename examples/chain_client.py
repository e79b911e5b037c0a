"""A client that chains the validator and mutator example servers around a payload.

python examples/chain_client.py            # both servers as stdio subprocesses
python examples/chain_client.py --http     # both servers over Streamable HTTP (ports 8001, 8002)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

from mcp_interceptors import Chain, chain_error

HERE = Path(__file__).parent


def server(script: str, port: int, http: bool) -> Client:
    if http:
        return Client(f"http://127.0.0.1:{port}/mcp")
    return Client(StdioServerParameters(command=sys.executable, args=[str(HERE / script)]))


async def main(http: bool = False) -> None:
    async with (
        server("validator_server.py", 8001, http) as validators,
        server("mutator_server.py", 8002, http) as mutators,
    ):
        chain = Chain(role="client")  # a client sends requests: mutate first, then validate
        await chain.add_server(mutators, name="mutators")
        await chain.add_server(validators, name="validators")

        request = {"method": "tools/call", "params": {"name": "send_mail", "arguments": {"to": "ana@example.com"}}}
        result = await chain.execute("tools/call", "request", request)
        print("allowed:", result.allowed, "->", json.dumps(result.final_payload))

        blocked = {"method": "tools/call", "params": {"name": "shell", "arguments": {"cmd": "rm -rf /"}}}
        result = await chain.execute("tools/call", "request", blocked)
        error = chain_error(result)
        print("blocked:", result.status, "by", result.aborted_at.interceptor if result.aborted_at else None)
        print("error for the requester:", error.code, error.message, json.dumps(error.data))


if __name__ == "__main__":
    anyio.run(main, "--http" in sys.argv)
