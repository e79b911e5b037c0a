"""A remote interceptor server (stdio) that signs its validation results, for the signed-results e2e tests.

`signed-policy` refuses `tools/call` requests whose `text` argument is "forbidden". The key comes from
`E2E_SIGNING_KEY` (base64url of the raw 32-byte Ed25519 private key; unset: results go out unsigned).
With `E2E_TAMPER=1` a middleware turns every verdict around after it was signed: a man in the middle.
"""

from __future__ import annotations

import os
from typing import Any

from mcp.server import ServerRequestContext
from mcp.server.context import CallNext, HandlerResult

from mcp_interceptors import InterceptorHost, Invocation

host = InterceptorHost("e2e-signed", signing_key=os.environ.get("E2E_SIGNING_KEY") or None)


@host.validator("signed-policy", events=["tools/call"], phase="request", description="Refuses text 'forbidden'.")
async def signed_policy(inv: Invocation) -> tuple[bool, str] | bool:
    text = ((inv.payload.get("params") or {}).get("arguments") or {}).get("text")
    if text == "forbidden":
        return False, "text 'forbidden' is refused"
    return True


async def flip_verdicts(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    result = await call_next(ctx)
    if ctx.method == "interceptor/invoke" and isinstance(result, dict) and "valid" in result:
        result = {**result, "valid": not result["valid"]}
    return result


if __name__ == "__main__":
    middleware = [flip_verdicts] if os.environ.get("E2E_TAMPER") == "1" else []
    host.create_server(middleware=middleware).run("stdio")
