"""The fuzz campaigns' peers of a real gateway, in raw JSON-RPC lines over stdio (no mcp, so they can say
anything): `upstream` (an MCP server) and `host` (an interceptor server), chosen by the first argument.

The client steers what they answer through a call's arguments, so one gateway serves every example:
- upstream tool `echo` answers its `text`; `answer` writes `arguments.line` raw (`$ID` replaced by the
  request's id), then a well-formed fallback answer (dropped by the gateway if the line answered already);
  `crash` exits at once; `hang` never answers; `progress` sends `arguments.count` progress notifications (when
  the call has a progress token), `arguments.pause_ms` apart, then answers. Every line it reads is appended to
  `$FUZZ_LOG` first.
- host interceptor `verdict` (a validator of `tools/call` requests) answers with `arguments.verdict` raw
  (`$ID` replaced) and then `valid: true`, or, without one, `valid: true` alone.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

TOOLS = [
    {"name": name, "description": f"{name}.", "inputSchema": {"type": "object"}}
    for name in ("echo", "answer", "crash", "hang", "progress")
]
VERDICT = {"name": "verdict", "type": "validation", "hooks": [{"events": ["tools/call"], "phase": "request"}]}


def ok(request_id: Any, result: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}).encode() + b"\n"


def raw(line: Any, request_id: Any) -> bytes:
    text = line if isinstance(line, str) else json.dumps(line)
    return text.replace("$ID", json.dumps(request_id)).encode("utf-8", "surrogatepass") + b"\n"


def initialized(message: dict[str, Any], role: str) -> bytes:
    params = message.get("params") or {}
    if role == "host":
        capabilities: dict[str, Any] = {"experimental": {"io.modelcontextprotocol/interceptors": {}}}
    else:
        capabilities = {"tools": {}}
    result = {
        "protocolVersion": params.get("protocolVersion", "2025-11-25"),
        "capabilities": capabilities,
        "serverInfo": {"name": f"fuzz-{role}", "version": "1"},
    }
    return ok(message["id"], result)


def upstream_call(request_id: Any, params: dict[str, Any]) -> bytes:
    arguments = params.get("arguments") or {}
    match params.get("name"):
        case "crash":
            os._exit(3)
        case "hang":
            return b""
        case "progress":
            send_progress(params, int(arguments.get("count", 1)), float(arguments.get("pause_ms", 0)) / 1000)
        case "answer":
            fallback = ok(request_id, {"content": [{"type": "text", "text": "fallback"}]})
            return raw(arguments.get("line", ""), request_id) + fallback
    return ok(request_id, {"content": [{"type": "text", "text": str(arguments.get("text"))}]})


def send_progress(params: dict[str, Any], count: int, pause_s: float) -> None:
    token = (params.get("_meta") or {}).get("progressToken")
    for step in range(min(count, 50)):
        if token is not None:
            note = {"method": "notifications/progress", "params": {"progressToken": token, "progress": step + 1}}
            os.write(1, json.dumps({"jsonrpc": "2.0", **note}).encode() + b"\n")
        time.sleep(min(pause_s, 0.5))


def host_invoke(request_id: Any, params: dict[str, Any]) -> bytes:
    payload = params.get("payload")
    request = payload.get("params") if isinstance(payload, dict) else None  # the payload is the whole request
    arguments = request.get("arguments") if isinstance(request, dict) else None
    passing = ok(request_id, {"interceptor": "verdict", "type": "validation", "phase": "request", "valid": True})
    if isinstance(arguments, dict) and "verdict" in arguments:
        return raw(arguments["verdict"], request_id) + passing
    return passing


def answer(message: Any, role: str) -> bytes:
    if not isinstance(message, dict) or "id" not in message or not isinstance(message.get("method"), str):
        return b""  # notifications and answers need no reply
    method, params = message["method"], message.get("params") or {}
    if method == "initialize":
        return initialized(message, role)
    if method == "ping":
        return ok(message["id"], {})
    if role == "upstream" and method == "tools/list":
        return ok(message["id"], {"tools": TOOLS})
    if role == "upstream" and method == "tools/call":
        return upstream_call(message["id"], params)
    if role == "host" and method == "interceptors/list":
        return ok(message["id"], {"interceptors": [VERDICT]})
    if role == "host" and method == "interceptor/invoke":
        return host_invoke(message["id"], params)
    error = {"code": -32601, "message": f"Method not found: {method}"}
    return json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": error}).encode() + b"\n"


def main() -> None:
    role = sys.argv[1]
    log = open(os.environ["FUZZ_LOG"], "ab") if role == "upstream" and os.environ.get("FUZZ_LOG") else None  # noqa: SIM115
    pending = b""
    while chunk := os.read(0, 65536):
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        for line in lines:
            if log is not None:
                log.write(line + b"\n")
                log.flush()
            if line.strip():
                reply = answer(json.loads(line), role)
                if reply:
                    os.write(1, reply)


if __name__ == "__main__":
    main()
