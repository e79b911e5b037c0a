"""A remote interceptor server (stdio) whose validator crashes or hangs on demand.

`watchdog` validates `tools/call` requests: text "crash" kills the process mid-invocation,
"hang" sleeps far past any deadline the tests configure, "flood N" answers valid with a message of N
bytes, anything else is valid. `--http PORT` serves Streamable HTTP instead of stdio.
"""

from __future__ import annotations

import os
import sys

import anyio

from mcp_interceptors import InterceptorHost, Invocation

host = InterceptorHost("e2e-remote")


@host.validator("watchdog", events=["tools/call"], phase="request", description="Crashes or hangs on demand.")
async def watchdog(inv: Invocation) -> bool | tuple[bool, str]:
    text = ((inv.payload.get("params") or {}).get("arguments") or {}).get("text")
    if text == "crash":
        os._exit(4)
    if text == "hang":
        await anyio.sleep(60)
    if isinstance(text, str) and text.startswith("flood "):
        return True, "x" * int(text.removeprefix("flood "))
    return True


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        host.create_server().run("streamable-http", port=int(sys.argv[2]))
    else:
        host.create_server().run("stdio")
