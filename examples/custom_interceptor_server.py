"""A custom interceptor server: your own policy as MCP interceptors, for the gateway or any invoker.

python examples/custom_interceptor_server.py                 # stdio (custom-interceptor.yaml has the gateway start it)
python examples/custom_interceptor_server.py --http 8004     # http://127.0.0.1:8004/mcp

- `require-ticket` (validator): calls to the tools in its config's `tools` need a change ticket
  (`arguments.ticket` like `OPS-1234`); the gateway sends the config with every invocation.
- `hide-internal-hosts` (mutator): results never show `*.corp.example.com` host names to the model.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from mcp_interceptors import InterceptorHost, Invocation, ValidationMessage, ValidationResult

host = InterceptorHost("company-policy")
TICKET = re.compile(r"^[A-Z]{2,10}-\d+$")
INTERNAL_HOST = re.compile(r"\b[\w-]+(?:\.[\w-]+)*\.corp\.example\.com\b")


@host.validator(
    "require-ticket",
    events=["tools/call"],
    phase="request",
    description="Calls to the configured tools must carry a change ticket (arguments.ticket, e.g. OPS-1234).",
    config_schema={
        "type": "object",
        "properties": {"tools": {"type": "array", "items": {"type": "string"}}},
        "additionalProperties": False,
    },
)
async def require_ticket(inv: Invocation) -> ValidationResult:
    params = inv.payload.get("params", {})
    if params.get("name") not in inv.config.get("tools", []):
        return ValidationResult(valid=True)
    ticket = (params.get("arguments") or {}).get("ticket")
    if isinstance(ticket, str) and TICKET.match(ticket):
        return ValidationResult(valid=True)
    message = ValidationMessage(
        path="$.params.arguments.ticket", message="a change ticket such as OPS-1234 is required", severity="error"
    )
    return ValidationResult(valid=False, severity="error", messages=[message])


def hide_hosts(value: Any) -> Any:
    """`value` with every internal host name in its strings replaced."""
    if isinstance(value, str):
        return INTERNAL_HOST.sub("[internal-host]", value)
    if isinstance(value, list):
        return [hide_hosts(item) for item in value]
    if isinstance(value, dict):
        return {key: hide_hosts(item) for key, item in value.items()}
    return value


@host.mutator(
    "hide-internal-hosts",
    events=["tools/call", "resources/read"],
    phase="response",
    priority=60_000,  # after the built-in redactors (+50,000 on responses)
    description="Replaces *.corp.example.com host names in results.",
)
async def hide_internal_hosts(inv: Invocation) -> Any:
    return hide_hosts(inv.payload)  # an equal payload when nothing matched: `modified` is false


if __name__ == "__main__":
    server = host.create_server()
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", port=int(sys.argv[2]))
    else:
        server.run("stdio")
