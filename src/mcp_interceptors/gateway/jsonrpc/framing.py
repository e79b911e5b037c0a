"""PURE: JSON-RPC messages as newline-delimited bytes: parse, encode, cut lines, refuse what no handler may see.

Both sides of the gateway read and write this way: the stdio front (`fronts/stdio.py`) and stdio upstreams
(`pipes.stdio_peer`), through `peer.JsonRpcPeer`; the HTTP front reuses the refusals and error shapes.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pydantic_core

Message = dict[str, Any]

CONNECTION_CLOSED = -32000
REQUEST_TIMEOUT = -32001
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INTERNAL_ERROR = -32603
#: The longest line (one message) a peer reads unless told otherwise: a longer one ends the connection,
#: so a peer that never sends a newline cannot grow our memory without bound.
DEFAULT_MAX_LINE_BYTES = 64 * 1024 * 1024
#: How many of the peer's requests we serve at once unless told otherwise; more are refused, not queued.
DEFAULT_MAX_IN_FLIGHT = 1000


def loads(line: bytes) -> Any:
    """One JSON text, parsed as mcp's own transports parse it (pydantic-core); raises `ValueError`.

    pydantic-core keeps integers of any size exact, where orjson turns one past 64 bits into a double
    (its low digits lost on the way upstream) and refuses one past the doubles (a valid request left
    unanswered). It stops at 200 levels of nesting, so deeper text goes to orjson (1024 levels): the
    gateway then answers a payload nested too deep with -32602 naming the field, not a parse error.
    """
    try:
        return pydantic_core.from_json(line, allow_inf_nan=False)
    except ValueError:
        return orjson.loads(line)


def is_request_id(value: object) -> bool:
    """MCP ids (and progress tokens) are strings or integers; anything else is refused, never looked up."""
    return type(value) is str or type(value) is int


def error_response(request_id: Any, code: int, message: str, data: Any = None) -> Message:
    """A JSON-RPC error answer (`data` only when there is some)."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def id_in_use(request_id: Any) -> Message:
    """The -32600 answer to a request reusing the id of one still in flight (its cancellation and answer
    would be ambiguous): every front, stdio, Streamable HTTP and `/sse`, answers it alike."""
    message = "Invalid Request: id already in use by a request in flight"
    return error_response(request_id, INVALID_REQUEST, message, {"field": "id"})


def too_many_in_flight(limit: int, setting: str | None) -> tuple[str, dict[str, Any]]:
    """The message and `data` of the -32603 refusing a request past a peer's `limit` of requests in flight
    (`setting` names the config key that sets it): the stdio front's and the HTTP front's, alike."""
    data: dict[str, Any] = {"reason": "too_many_requests_in_flight", "limit": limit}
    if setting is not None:
        data["setting"] = setting
    return f"too many requests in flight (the limit is {limit}); retry when one has ended", data


def refusal(message: Any) -> Message | None:
    """The -32600 answer to a parsed message no handler may see, else None: the one shape check every
    message read by a front or from a peer passes before anything looks at it.

    A JSON-RPC 2.0 message is an object whose `jsonrpc` is "2.0": a request (`method` and `id`), a
    notification (`method`, no `id`) or an answer (`result` or `error`, not both, and an `id`). MCP has no
    batches; an id is a string or an integer (an object id reads as a notification to mcp's models, and
    cannot key a table), a method a string, and the params of every MCP request or notification an object.
    The answer carries the message's id when it has a usable one (null otherwise) and names the field.
    """
    if type(message) is not dict:
        return _invalid(None, "a message must be a JSON object")
    request_id = message.get("id")
    usable_id = request_id if is_request_id(request_id) else None
    if "method" in message:
        if "id" in message and usable_id is None:
            return _invalid(None, "id must be a string or an integer", "id")
        if message.get("jsonrpc") != "2.0":
            return _invalid(usable_id, 'jsonrpc must be "2.0"', "jsonrpc")
        if type(message["method"]) is not str:
            return _invalid(usable_id, "method must be a string", "method")
        if not isinstance(message.get("params"), dict | None):
            # MCP's params are always an object; a string or list would reach code that reads its fields.
            return _invalid(usable_id, "params must be an object", "params")
        return None
    if is_answer_shaped(message):
        if message.get("jsonrpc") != "2.0":
            return _invalid(usable_id, 'jsonrpc must be "2.0"', "jsonrpc")
        if "result" in message and "error" in message:
            return _invalid(usable_id, "an answer carries a result or an error, not both", "result")
        return None
    return _invalid(usable_id, "a message needs a method (a request or notification) or a result or error", "method")


def is_answer_shaped(message: Message) -> bool:
    """Whether `message` (an object) means to be an answer: no method, and a result or an error. A bad
    one is never answered (an answer to an answer could start a loop); it fails the request it names."""
    return "method" not in message and ("result" in message or "error" in message)


def _invalid(request_id: Any, reason: str, field: str | None = None) -> Message:
    return error_response(
        request_id, INVALID_REQUEST, f"Invalid Request: {reason}", {"field": field} if field is not None else None
    )


class LineTooLongError(ValueError):
    """A line grew past a `LineBuffer`'s limit; `lines` are the complete lines read before it."""

    def __init__(self, limit: int, lines: list[bytes]) -> None:
        super().__init__(f"a message longer than the limit of {limit} bytes")
        self.limit = limit
        self.lines = lines


class LineBuffer:
    """Cuts a byte stream into newline-delimited lines. A line that spans many chunks is joined once,
    when its newline arrives, so a long message costs time linear in its size. A line longer than
    `max_line_bytes` (None: no limit) raises `LineTooLongError` as soon as the buffer holds more."""

    def __init__(self, max_line_bytes: int | None = None) -> None:
        self._parts: list[bytes] = []
        self._size = 0
        self._max = max_line_bytes

    @property
    def empty(self) -> bool:
        """Whether no part of a line is held (the next chunk starts a line)."""
        return not self._parts

    def take(self, chunk: bytes) -> tuple[list[bytes], LineTooLongError | None]:
        """`feed`, for a reader that serves the complete lines before it hangs up on one too long."""
        try:
            return self.feed(chunk), None
        except LineTooLongError as exc:
            return exc.lines, exc

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines `chunk` completes (blank ones included), in order."""
        if b"\n" not in chunk:
            self._parts.append(chunk)
            self._size += len(chunk)
            if self._max is not None and self._size > self._max:
                raise LineTooLongError(self._max, [])
            return []
        first, *lines, rest = chunk.split(b"\n")
        self._parts.append(first)
        completed = [b"".join(self._parts), *lines]
        self._parts = [rest] if rest else []
        self._size = len(rest)
        if self._max is not None:
            for index, line in enumerate(completed):
                if len(line) > self._max:
                    raise LineTooLongError(self._max, completed[:index])
            if self._size > self._max:
                raise LineTooLongError(self._max, completed)
        return completed


def encode_line(message: Message) -> bytes:
    """One JSON line; the stdlib encoder covers what orjson refuses (integers beyond 64 bits)."""
    try:
        return orjson.dumps(message) + b"\n"
    except TypeError:
        return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
