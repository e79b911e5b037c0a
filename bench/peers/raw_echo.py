"""A minimal stdio MCP upstream with one `echo` tool, in raw JSON-RPC lines (both eras' `tools/call`).

For benches that measure the gateway rather than its neighbours: it spends a few tens of microseconds per
call, where the `mcp` server of `gateway_overhead.py serve-echo` spends most of a millisecond.
"""

import os

import orjson

TOOL = {
    "name": "echo",
    "description": "Echo.",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
}


def answer(message: dict) -> dict | None:
    if "id" not in message or "method" not in message:
        return None  # a notification or a stray response
    method, params = message["method"], message.get("params") or {}
    if method == "initialize":
        version = params.get("protocolVersion", "2025-11-25")
        info = {"name": "raw-echo", "version": "1"}
        result = {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info}
    elif method == "tools/list":
        result = {"tools": [TOOL]}
    elif method == "tools/call":
        text = str((params.get("arguments") or {}).get("text"))
        result = {"content": [{"type": "text", "text": text}], "isError": False}
    elif method == "ping":
        result = {}
    else:
        return {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": f"no method {method}"}}
    return {"jsonrpc": "2.0", "id": message["id"], "result": result}


def main() -> None:
    pending = b""
    while chunk := os.read(0, 65536):
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        replies = [reply for line in lines if line.strip() and (reply := answer(orjson.loads(line))) is not None]
        if replies:
            os.write(1, b"".join(orjson.dumps(reply) + b"\n" for reply in replies))


if __name__ == "__main__":
    main()
