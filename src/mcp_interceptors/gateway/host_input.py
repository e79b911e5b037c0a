"""What the gateway takes from a client of its own interceptor-host methods, all of it untrusted (spec §7).

`Gateway` (server.py) answers `interceptor/invoke` and `interceptor/executeChain` with these: the
context the gateway vouches for instead of the client's, the payloads too deeply nested to answer,
and results turned into wire bodies or precise errors naming the interceptor.
"""

from __future__ import annotations

from typing import Any

from mcp_interceptors.executor import ChainResult
from mcp_interceptors.protocol.errors import InterceptorExecutionError, InterceptorsError
from mcp_interceptors.protocol.invoke import MAX_PAYLOAD_DEPTH, InvocationContext, is_too_deep
from mcp_interceptors.protocol.results import InterceptorResult, MutationResult

#: Context fields the gateway knows from its own request, in every spelling a host might read.
_VOUCHED = frozenset({"principal", "sessionid", "server"})


def vouched_context(own: InvocationContext, supplied: InvocationContext | None) -> InvocationContext:
    """`own` (principal, session and server as the gateway's own legs set them), with the client's
    correlation fields: a client must not act as another principal or session."""
    if supplied is None:
        return own
    extra = {k: v for k, v in (supplied.model_extra or {}).items() if k.replace("_", "").lower() not in _VOUCHED}
    return InvocationContext(
        **extra,
        principal=own.principal,
        session_id=own.session_id,
        server=own.server,
        trace_id=supplied.trace_id or own.trace_id,
        span_id=supplied.span_id,
        timestamp=supplied.timestamp or own.timestamp,
    )


def result_body(result: InterceptorResult, name: str) -> dict[str, Any]:
    """The wire body of interceptor `name`'s result, or `-32603` naming it when the result cannot be sent."""
    _check_result_depth(result, name)
    try:
        return result.to_wire()
    except ValueError as exc:  # pydantic's serialization errors (not JSON, too deep) are ValueErrors
        raise InterceptorExecutionError(name, f"result is not JSON-serialisable: {exc}") from None


def chain_body(result: ChainResult) -> dict[str, Any]:
    """The `ChainExecutionResult` body; a result that cannot be sent fails as in `result_body`."""
    for each in result.results:
        _check_result_depth(each, each.interceptor or "")  # the final payload is the last applied mutator's
    try:
        return result.to_wire()
    except ValueError as exc:
        for each in result.results:
            result_body(each, each.interceptor or "")  # raises naming the interceptor whose result it was
        reason = f"chain result is not JSON-serialisable: {exc}"
        raise InterceptorsError("Interceptor chain result cannot be sent", data={"reason": reason}) from None


def _check_result_depth(result: InterceptorResult, name: str) -> None:
    if isinstance(result, MutationResult) and is_too_deep(result.payload):
        reason = f"result payload is nested more than {MAX_PAYLOAD_DEPTH} levels deep"
        raise InterceptorExecutionError(name, reason)
