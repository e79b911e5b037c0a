"""The requester-facing error of a blocked chain (spec §3, R70), and of a chain whose mutators left no payload
of its event: JSON-RPC errors with the code and `data` naming the interceptor, the event and the phase.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from mcp import MCPError

from mcp_interceptors.executor import ChainResult
from mcp_interceptors.protocol.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    STATE_UNAVAILABLE,
)
from mcp_interceptors.protocol.events import Phase
from mcp_interceptors.protocol.results import MutationResult

#: How planning names the abort of an interceptor whose state store could not be reached.
_STATE_ABORT = f"invocation failed: {STATE_UNAVAILABLE}"


def chain_error(result: ChainResult, *, include_details: bool = False) -> MCPError:
    """The JSON-RPC error for a blocked chain (R70).

    Validation blocks get `-32602`, mutation and timeout blocks `-32603`, and so does a guard whose state store
    could not be reached (`reason: state_unavailable`: the request may succeed later). `data` names the
    interceptor, a generic reason, the event and phase; interceptor messages, suggestions and
    payloads are included only with `include_details=True`.
    """
    if result.allowed:
        raise ValueError("chain_error() needs a blocked result; this one succeeded")
    aborted = result.aborted_at
    interceptor = aborted.interceptor if aborted is not None else ""
    if aborted is not None and aborted.reason == _STATE_ABORT:
        code, message, reason = INTERNAL_ERROR, "Blocked: interceptor state unavailable", STATE_UNAVAILABLE
    elif result.status == "validation_failed":
        code, message = INVALID_PARAMS, "Blocked by interceptor validation"
        failed = aborted is not None and aborted.reason.startswith("validation failed")
        reason = "validation failed" if failed else "interceptor failed"
    elif result.status == "timeout":
        code, message, reason = INTERNAL_ERROR, "Blocked: interceptor chain timed out", "timeout"
    else:
        code, message, reason = INTERNAL_ERROR, "Blocked: interceptor mutation failed", "interceptor failed"
    data: dict[str, Any] = {
        "interceptor": interceptor,
        "reason": reason,
        "event": result.event,
        "phase": result.phase,
        "status": result.status,
    }
    retry_after = _retry_after(result, interceptor)
    if retry_after is not None:  # a rate limit's hint is no detail to hide: the client needs it to back off
        data["retryAfterSeconds"] = retry_after
    if include_details:
        data["abortedAt"] = aborted.to_wire() if aborted is not None else None
        data["validationErrors"] = [
            {"interceptor": r.interceptor, "severity": m.severity, "message": m.message}
            for r in result.results
            if r.type == "validation" and r.mode != "audit" and not getattr(r, "valid", True)
            for m in (getattr(r, "messages", None) or ())
        ]
    return MCPError(code, message, data)


def _retry_after(result: ChainResult, interceptor: str) -> float | None:
    """The `info.retryAfterSeconds` of the blocking validator's verdict (rate-limit gives one), if any."""
    for item in result.results:
        if item.interceptor == interceptor and item.type == "validation" and not getattr(item, "valid", True):
            value = (item.info or {}).get("retryAfterSeconds")
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
                return float(value)
    return None


def payload_problem(event: str, phase: Phase, payload: Any) -> str | None:
    """Why `payload` is no payload of `event` at `phase` (spec §1.2: `{method, params}` for a request, the
    result object for a response), or None."""
    if not isinstance(payload, Mapping):
        return f"the payload is {type(payload).__name__ if payload is not None else 'null'}, not an object"
    if phase == "request":
        if payload.get("method") != event:
            return f"the payload's method is {payload.get('method')!r}, not {event!r}"
        if payload.get("params") is not None and not isinstance(payload["params"], Mapping):
            return "the payload's params is not an object"
    return None


def invalid_payload_error(result: ChainResult, problem: str) -> MCPError:
    """The error for a chain whose mutators left no payload of its event: it names the last active mutator
    that changed the payload (the one whose output it is), never the client's request."""
    changed = [
        r.interceptor for r in result.results if isinstance(r, MutationResult) and r.modified and r.mode != "audit"
    ]
    data = {
        "interceptor": changed[-1] if changed else "",
        "reason": "invalid payload",
        "event": result.event,
        "phase": result.phase,
        "status": "mutation_failed",
        "detail": problem,
    }
    return MCPError(INTERNAL_ERROR, "Blocked: interceptor mutation produced an invalid payload", data)
