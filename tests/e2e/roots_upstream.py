"""A handshake-era-only upstream that asks its client for roots right after the handshake, as the
filesystem reference server does, and again on `notifications/roots/list_changed`.

Raw JSON lines on stdio, so it can send a request outside of any request it serves. Its tool `roots`
answers what the last `roots/list` returned; `capabilities`, the client capabilities of its handshake.
With `--pids FILE` each process appends its pid.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from typing import Any

state: dict[str, Any] = {"roots": "pending", "wants_roots": False, "capabilities": None}
ids = itertools.count(1)


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def ask_for_roots() -> None:
    if state["wants_roots"]:
        send({"id": f"roots-{next(ids)}", "method": "roots/list"})


def answer(message: dict[str, Any]) -> None:
    method, request_id = message["method"], message["id"]
    params = message.get("params") or {}
    if method == "initialize":
        state["capabilities"] = params.get("capabilities")
        state["wants_roots"] = "roots" in (state["capabilities"] or {})
        result: dict[str, Any] = {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "roots-upstream", "version": "1.0.0"},
        }
    elif method == "tools/list":
        result = {
            "tools": [
                {"name": name, "description": f"the client's {name}", "inputSchema": {"type": "object"}}
                for name in ("roots", "capabilities")
            ]
        }
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": json.dumps(state[params.get("name", "roots")])}]}
    elif method == "ping":
        result = {}
    else:  # server/discover included: this server only speaks the handshake era
        send({"id": request_id, "error": {"code": -32601, "message": f"Method not found: {method}"}})
        return
    send({"id": request_id, "result": result})


def main() -> None:
    if "--pids" in sys.argv:
        with open(sys.argv[sys.argv.index("--pids") + 1], "a") as pids:
            pids.write(f"{os.getpid()}\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        message = json.loads(line)
        if "method" not in message:  # an answer to our roots/list, told on stderr as the filesystem server does
            state["roots"] = message.get("result", {}).get("roots", message.get("error"))
            said = state["roots"]
            told = f"{len(said)} roots" if isinstance(said, list) else f"Failed to request roots: {said}"
            sys.stderr.write(f"roots-upstream: {told}\n")
            sys.stderr.flush()
        elif "id" in message:
            answer(message)
        elif message["method"] in ("notifications/initialized", "notifications/roots/list_changed"):
            ask_for_roots()


if __name__ == "__main__":
    main()
