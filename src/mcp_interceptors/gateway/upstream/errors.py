"""The errors of an upstream call, and how mcp's local failures are told apart from an upstream's own errors.

An upstream may answer any code (-32000 for anything, say): only the dispatcher's own words, with no
`data`, are read as a closed connection, a local timeout, an HTTP error status or a message cut off
(`transports._MessageLimitTransport`).
"""

from __future__ import annotations

from mcp import MCPError
from mcp_types import CONNECTION_CLOSED, INTERNAL_ERROR, PARSE_ERROR, REQUEST_TIMEOUT


class UpstreamUnavailableError(MCPError):
    """The upstream is down or reconnecting; in-flight and new calls get this instead of hanging."""


class UpstreamTimeoutError(MCPError):
    """The upstream did not answer within the request's timeout (-32001; the request there is cancelled)."""


def innermost(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def first_error(group: BaseExceptionGroup[MCPError]) -> MCPError:
    """The first `MCPError` of a task group's failures, to answer with as one error."""
    leaf: BaseException = group
    while isinstance(leaf, BaseExceptionGroup):
        leaf = leaf.exceptions[0]
    assert isinstance(leaf, MCPError)
    return leaf


def describe_exception(exc: BaseException) -> str:
    """One line for logs and errors, looking inside exception groups."""
    exc = innermost(exc)
    if isinstance(exc, MCPError):
        return f"{exc.message} (code {exc.code})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


#: a -32700 (a JSON answer) or -32000 (an SSE event) whose message ends with them.
MESSAGE_CUT = "a message longer than the limit of"
EVENT_CUT = "an event longer than the limit of"


def too_long(exc: MCPError) -> str | None:
    """The reason, if `exc` is mcp's report of a message our `_MessageLimitTransport` cut off."""
    if exc.code not in (PARSE_ERROR, CONNECTION_CLOSED) or exc.data is not None:
        return None
    for words in (MESSAGE_CUT, EVENT_CUT):
        at = exc.message.find(words)
        if at >= 0:
            return exc.message[at:]
    return None


def is_local_timeout(exc: MCPError, method: str) -> bool:
    """The dispatcher's own timeout (ours and mcp's word it alike), not an error the upstream sent."""
    return exc.code == REQUEST_TIMEOUT and exc.message == f"Request {method!r} timed out" and exc.data is None


def is_http_error(exc: MCPError) -> bool:
    """mcp's HTTP client's stand-in for a 4xx/5xx answer that carried no JSON-RPC error."""
    return exc.code == INTERNAL_ERROR and exc.message == "Server returned an error response" and exc.data is None


def is_lost_stream(exc: MCPError) -> bool:
    """mcp's HTTP client giving up on one request's response stream ("SSE stream ended without a response")."""
    return exc.code == CONNECTION_CLOSED and exc.data is None and exc.message.startswith("SSE stream ")


def is_local_close(exc: MCPError) -> bool:
    """The dispatcher's own "connection closed" outcome (an upstream may use -32000 for anything)."""
    return exc.code == CONNECTION_CLOSED and exc.message == "Connection closed" and exc.data is None
