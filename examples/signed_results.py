"""Signed validation results: a host signs its verdicts; an invoker holding the host's public key checks them.

python examples/signed_results.py

The host and the invoker talk over an in-memory mcp connection here; over stdio or HTTP it is the same.
An invoker configured with another key treats every verdict of this host as an invocation failure.
"""

from __future__ import annotations

import anyio
from mcp import Client

from mcp_interceptors import Chain, InterceptorHost, Invocation, ValidationResult
from mcp_interceptors.signatures import generate_signing_key, public_key_text

# A real host keeps its key in a file: load_signing_key("host-key.pem", create=True) (PEM, mode 0600).
host = InterceptorHost("policy", signing_key=generate_signing_key())


@host.validator("no-shell", events=["tools/call"], phase="request")
async def no_shell(inv: Invocation) -> bool:
    tool: str = inv.payload["params"]["name"]
    return tool != "shell"


CALL = {"method": "tools/call", "params": {"name": "echo", "arguments": {"text": "hi"}}}


async def main() -> None:
    print("host public key:", host.public_key)  # what invokers configure (gateway: servers[].public_key)
    async with Client(host.create_server()) as client:
        chain = Chain(role="client")
        await chain.add_server(client, verify_key=host.public_key)
        result = await chain.execute("tools/call", "request", CALL)
        verdict = result.results[0]
        assert isinstance(verdict, ValidationResult) and verdict.signature is not None
        print(f"with the host's key: {result.status}, {verdict.signature.algorithm} signature checked")

        stranger = Chain(role="client")
        await stranger.add_server(client, verify_key=public_key_text(generate_signing_key()))
        refused = await stranger.execute("tools/call", "request", CALL)
        failure = refused.failures[0]
        print(f"with another key: {refused.status}, {failure.interceptor}: {failure.reason}")


if __name__ == "__main__":
    anyio.run(main)
