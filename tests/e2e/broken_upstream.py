"""A handshake-era upstream that breaks JSON-RPC in the ways real servers do: a banner on stdout,
stray lines, requests and notifications with ids that are not ids, and malformed answers per tool."""

from __future__ import annotations

import json
import sys
from typing import Any

ANSWERS: dict[str, dict[str, Any]] = {
    "string_result": {"result": "just a string"},
    "null_result": {"result": None},
    "list_result": {"result": [1, 2]},
    "bad_error": {"error": {"code": "x"}},
    "fine": {"result": {"content": [{"type": "text", "text": "fine"}]}},
}


def send(message: Any) -> None:
    sys.stdout.write((message if isinstance(message, str) else json.dumps(message)) + "\n")
    sys.stdout.flush()


def main() -> None:
    send("Starting the broken server v1.0 ...")  # servers that log to stdout exist
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        request_id, method = message.get("id"), message.get("method")
        if request_id is None or method is None:
            continue
        if method == "initialize":
            result = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "broken", "version": "1.0.0"},
            }
            send({"jsonrpc": "2.0", "id": request_id, "result": result})
        elif method == "tools/list":
            send("[]")
            send({"jsonrpc": "2.0", "id": {"not": "an id"}, "method": "roots/list"})
            send({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": [1]}})
            tools = [{"name": name, "inputSchema": {"type": "object"}} for name in ANSWERS]
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": tools}})
        elif method == "tools/call":
            send({"jsonrpc": "2.0", "id": request_id, **ANSWERS[message["params"]["name"]]})
        elif method == "server/discover":
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}})
        else:
            send({"jsonrpc": "2.0", "id": request_id, "result": {}})


if __name__ == "__main__":
    main()
