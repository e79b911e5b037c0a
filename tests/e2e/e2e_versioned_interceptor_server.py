"""A remote interceptor server whose listing depends on a file read at start: a new version of it.

The file named by `VERSION_FILE` holds `v1` or `v2`; the server lists one validator named after it, on
`tools/call` requests, that blocks a call whose `text` is `block <version>` (and lets the rest through).
`--http PORT` serves Streamable HTTP instead of stdio; the process id goes to `PID_FILE` if set.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mcp_interceptors import InterceptorHost, Invocation

VERSION = Path(os.environ["VERSION_FILE"]).read_text().strip()
if pid_file := os.environ.get("PID_FILE"):
    Path(pid_file).write_text(str(os.getpid()))

host = InterceptorHost(f"e2e-versioned-{VERSION}")


@host.validator(VERSION, events=["tools/call"], phase="request", description=f"Version {VERSION}'s validator.")
async def validate(inv: Invocation) -> bool:
    text = ((inv.payload.get("params") or {}).get("arguments") or {}).get("text")
    return text != f"block {VERSION}"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        host.create_server().run("streamable-http", port=int(sys.argv[2]))
    else:
        host.create_server().run("stdio")
