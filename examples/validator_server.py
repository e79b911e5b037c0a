"""An interceptor server with two validators, runnable over stdio (default) or Streamable HTTP.

python examples/validator_server.py                 # stdio
python examples/validator_server.py --http 8001     # http://127.0.0.1:8001/mcp
"""

from __future__ import annotations

import json
import sys

from mcp_interceptors import InterceptorHost, Invocation, ValidationMessage, ValidationResult

host = InterceptorHost("example-validators")


@host.validator(
    "deny-dangerous-tools",
    events=["tools/call"],
    phase="request",
    description="Refuses calls to tools whose name is on the deny list.",
    config_schema={"type": "object", "properties": {"deny": {"type": "array", "items": {"type": "string"}}}},
)
async def deny_dangerous_tools(inv: Invocation) -> ValidationResult:
    denied = set(inv.config.get("deny", ["delete_everything", "shell"]))
    tool = inv.payload.get("params", {}).get("name")
    if tool in denied:
        message = ValidationMessage(path="$.params.name", message=f"tool {tool!r} is not allowed", severity="error")
        return ValidationResult(valid=False, severity="error", messages=[message])
    return ValidationResult(valid=True)


@host.validator(
    "max-size",
    events=["*"],
    phase="both",
    description="Warns about payloads over 64 KiB (never blocks: severity warn).",
)
def max_size(inv: Invocation) -> tuple[bool, list[ValidationMessage]]:
    size = len(json.dumps(inv.payload))
    if size > 65536:  # a plain string message would be an `info` (or an `error` with False)
        return True, [ValidationMessage(message=f"payload is {size} bytes", severity="warn")]
    return True, []


if __name__ == "__main__":
    server = host.create_server()
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", port=int(sys.argv[2]))
    else:
        server.run("stdio")
