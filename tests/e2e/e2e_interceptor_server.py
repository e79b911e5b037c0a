"""A remote interceptor server (stdio) whose validator crashes or hangs on demand.

`watchdog` validates `tools/call` requests: text "crash" kills the process mid-invocation,
"hang" sleeps far past any deadline the tests configure, anything else is valid.
"""

from __future__ import annotations

import os

import anyio

from mcp_interceptors import InterceptorHost, Invocation

host = InterceptorHost("e2e-remote")


@host.validator("watchdog", events=["tools/call"], phase="request", description="Crashes or hangs on demand.")
async def watchdog(inv: Invocation) -> bool:
    text = ((inv.payload.get("params") or {}).get("arguments") or {}).get("text")
    if text == "crash":
        os._exit(4)
    if text == "hang":
        await anyio.sleep(60)
    return True


if __name__ == "__main__":
    host.create_server().run("stdio")
