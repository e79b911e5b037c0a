"""The body of an HTTP front's POST, read once and shape-checked before anything else looks at it.

The Streamable HTTP endpoint (`http.py`) and the legacy `/messages/` endpoint (`sse.py`) call
`shape_checked` first: a JSON-RPC message that fails `framing.refusal` gets its -32600 (HTTP 400) there, a
client that went away before its body was whole gets nothing (mcp would log an error with a traceback for
each), and everything else goes on to mcp's transport with a `receive` that replays the body.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.responses import Response

from mcp_interceptors.gateway.jsonrpc.framing import loads, refusal

#: A body not read whole (past the limit), or not JSON: mcp answers it.
UNREAD = object()
#: What `shape_checked` returns for a message it answered itself, or that no one is left to answer.
REFUSED = object()
#: What `read_body` gives for the rest of a body whose client disconnected first.
GONE = object()


async def shape_checked(scope: Any, receive: Any, send: Any, limit: int) -> tuple[Any, Any]:
    """(the parsed JSON-RPC message, a `receive` replaying the body) of a POST; `REFUSED` when it failed the
    shape check (answered here: 400 with the -32600 naming the field) or its client went away while sending
    it, `UNREAD` when mcp must answer it."""
    body, replay = await read_body(receive, limit)
    if replay is GONE:
        return REFUSED, receive
    message = parsed(body) if replay is None else UNREAD
    refused = refusal(message) if message is not UNREAD else None
    if refused is not None:
        await json_response(400, refused)(scope, receive, send)
        return REFUSED, receive
    return message, replay or replaying(body, receive)


def json_response(status: int, message: Any) -> Response:
    return Response(orjson.dumps(message), status_code=status, media_type="application/json")


async def read_body(receive: Any, limit: int) -> tuple[bytes, Any]:
    """The request body, with None; with `GONE` when the client disconnected before it was whole; or, past
    `limit` bytes or on another ASGI message, what was read so far and a `receive` that replays it then goes
    on reading (mcp answers those as it would have)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            return b"".join(chunks), GONE
        if message.get("type") != "http.request":
            return b"".join(chunks), replaying(b"".join(chunks), receive, more=True, first=message)
        chunk = bytes(message.get("body", b""))
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), None
        if size > limit:
            return b"".join(chunks), replaying(b"".join(chunks), receive, more=True)


def replaying(body: bytes, receive: Any, *, more: bool = False, first: Any = None) -> Any:
    """A `receive` that yields `body` first (as one chunk, then `first` if given), then reads on."""
    queued: list[Any] = [{"type": "http.request", "body": body, "more_body": more}]
    if first is not None:
        queued.append(first)

    async def replay() -> Any:
        return queued.pop(0) if queued else await receive()

    return replay


def parsed(body: bytes) -> Any:
    """The JSON value of a request body, or `UNREAD` when it is not JSON (mcp answers that -32700)."""
    try:
        return loads(body)
    except ValueError:
        return UNREAD
