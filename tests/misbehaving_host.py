"""A non-conforming interceptor host speaking raw JSON-RPC over stdio (no mcp), for the invoker's tests.

Legacy handshake only. `interceptors/list` answers by the `LISTING` environment variable: `ok`
(the descriptors below), `array` (a bare array as the result), or `silent` (never answers).
`interceptor/invoke` misbehaves by interceptor name: `crash` exits mid-invocation, `silent` never
answers, `array-result` / `null-result` / `string-result` answer with a result that is not an
object, `host-timeout` sends G4's -32000 timeout error with its data, and `ok` answers `valid: true`.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

NAMES = ("ok", "crash", "silent", "array-result", "null-result", "string-result", "host-timeout")
DESCRIPTORS = [
    {"name": name, "type": "validation", "hooks": [{"events": ["tools/call"], "phase": "request"}]} for name in NAMES
]


def write(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def listing() -> Any:
    return {"ok": {"interceptors": DESCRIPTORS}, "array": DESCRIPTORS}.get(os.environ.get("LISTING", "ok"))


def invoke(params: dict[str, Any]) -> tuple[str, Any]:
    name, phase = params.get("name"), params.get("phase")
    match name:
        case "crash":
            os._exit(3)
        case "array-result":
            return "result", [{"interceptor": name, "type": "validation", "phase": phase, "valid": True}]
        case "null-result":
            return "result", None
        case "string-result":
            return "result", "valid"
        case "host-timeout":
            data = {"interceptor": name, "timeoutMs": 5, "phase": phase}
            return "error", {"code": -32000, "message": "Interceptor execution timeout", "data": data}
        case "ok":
            return "result", {"interceptor": name, "type": "validation", "phase": phase, "valid": True}
    return "error", {"code": -32602, "message": f"Unknown interceptor: {name}", "data": {"name": name}}


def answer(message: dict[str, Any]) -> tuple[str, Any] | None:
    method, params = message.get("method"), message.get("params") or {}
    if method == "initialize":
        capabilities = {"experimental": {"io.modelcontextprotocol/interceptors": {}}}
        info = {"name": "misbehaving-host", "version": "0"}
        return "result", {
            "protocolVersion": params.get("protocolVersion"),
            "capabilities": capabilities,
            "serverInfo": info,
        }
    if method == "interceptors/list":
        return None if os.environ.get("LISTING") == "silent" else ("result", listing())
    if method == "interceptor/invoke":
        return None if params.get("name") == "silent" else invoke(params)
    if method == "ping":
        return "result", {}
    return "error", {"code": -32601, "message": "Method not found"}


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message or "method" not in message:
            continue  # notifications and responses need no answer
        reply = answer(message)
        if reply is not None:
            kind, body = reply
            write({"jsonrpc": "2.0", "id": message["id"], kind: body})


if __name__ == "__main__":
    main()
