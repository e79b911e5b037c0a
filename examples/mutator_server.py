"""An interceptor server with a redacting mutator, runnable over stdio (default) or Streamable HTTP.

python examples/mutator_server.py                 # stdio
python examples/mutator_server.py --http 8002     # http://127.0.0.1:8002/mcp
"""

from __future__ import annotations

import re
import sys
from typing import Any

from mcp_interceptors import InterceptorHost, Invocation

host = InterceptorHost("example-mutators")
# An address starts where a run of its characters starts (the lookbehind), so a long run with no `@` is
# scanned once, not once from each of its characters (quadratic: 200 KB stalled the gateway for minutes).
EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[\w-]+\.[\w.-]+")


def scrub(value: Any) -> Any:
    if isinstance(value, str):
        return EMAIL.sub("[EMAIL]", value)
    if isinstance(value, dict):
        return {key: scrub(item) for key, item in value.items()}
    if isinstance(value, list):
        return [scrub(item) for item in value]
    return value


@host.mutator(
    "redact-emails",
    events=["tools/call"],
    phase="both",
    priority={"request": -50000, "response": 50000},
    description="Replaces e-mail addresses with [EMAIL] in tool calls and their results.",
)
async def redact_emails(inv: Invocation) -> Any:
    return scrub(inv.payload)  # returning the new payload; `modified` is computed by comparison


if __name__ == "__main__":
    server = host.create_server()
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", port=int(sys.argv[2]))
    else:
        server.run("stdio")
