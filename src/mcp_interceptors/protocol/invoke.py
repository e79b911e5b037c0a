"""`interceptors/list` and `interceptor/invoke` params, and the invocation `context` (spec §2.1-§2.2)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from mcp_types import Request, RequestParams
from pydantic import ConfigDict, Field, Strict
from pydantic.alias_generators import to_camel

from mcp_interceptors.protocol._base import WireModel
from mcp_interceptors.protocol.errors import InvalidParamsError
from mcp_interceptors.protocol.events import Phase

LIST_METHOD = "interceptors/list"
INVOKE_METHOD = "interceptor/invoke"
EXECUTE_CHAIN_METHOD = "interceptor/executeChain"
#: Deepest nesting of lists and objects accepted in an invoked payload. pydantic's serializer stops at 255
#: levels and a payload sits a few levels down in a response, so deeper ones could not be answered.
MAX_PAYLOAD_DEPTH = 200


class Principal(WireModel):
    """Who the governed operation acts for; send only the claims an interceptor needs."""

    type: Literal["user", "service", "anonymous"]
    id: str | None = None
    claims: dict[str, Any] | None = None


class InvocationContext(WireModel):
    """The optional `context` of an invocation.

    `timestamp` is filled in when absent (senders always include it, hosts tolerate its absence).
    `server` is our addition: the upstream a gateway attributes the payload to. `interceptorState`
    is reserved and ignored.
    """

    model_config = ConfigDict(extra="allow")

    principal: Principal | None = None
    trace_id: str | None = None
    span_id: str | None = None
    timestamp: str | None = None
    session_id: str | None = None
    server: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """The `context` object to send; the reserved `interceptorState` never leaves the invoker."""
        body = super().to_wire()
        body.pop("interceptorState", None)
        body.pop("interceptor_state", None)
        return body

    def stamped(self) -> InvocationContext:
        """This context with `timestamp` set to now if it was missing."""
        if self.timestamp is not None:
            return self
        return self.model_copy(update={"timestamp": now_iso()})


def now_iso() -> str:
    """The UTC time now to the millisecond, as `2026-07-28T12:00:00.123Z`.

    One per message in a gateway: the date and time to the second are formatted once per second
    (`datetime.isoformat` costs ~1.5 us a call, this ~0.9 us: `bench/gateway_overhead.py`). The clock is
    read through `datetime`: the protocol layer imports no `time` (tests/test_layering.py).
    """
    global _second_text
    now = datetime.now(UTC)
    seconds = int(now.timestamp())
    second, text = _second_text
    if seconds != second:
        text = now.strftime("%Y-%m-%dT%H:%M:%S")
        _second_text = (seconds, text)
    return f"{text}.{now.microsecond // 1000:03d}Z"


#: The last second `now_iso` formatted, and its text.
_second_text: tuple[int, str] = (-1, "")


class InvokeParams(WireModel):
    """`interceptor/invoke` params. Mode and failOpen are invoker policy and never sent."""

    name: Annotated[str, Field(min_length=1)]
    event: Annotated[str, Field(min_length=1)]
    phase: Phase
    payload: Any
    config: dict[str, Any] | None = None
    #: A JSON number only: lax parsing read `true` as 1 ms, `"50"` as 50 and `"inf"` as no deadline.
    timeout_ms: Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)] | None = None
    context: InvocationContext | None = None

    def to_wire(self) -> dict[str, Any]:
        """The camelCase params; `payload` is required, so a JSON `null` payload is kept."""
        body = super().to_wire()
        body.setdefault("payload", None)
        return body


class ListParams(WireModel):
    event: str | None = None


class RawParams(RequestParams):
    """Params model for binding our methods on an mcp server: accepts anything so that we, not the
    SDK's generic validator, produce the precise `-32602` error naming the bad field."""

    model_config = ConfigDict(extra="allow", alias_generator=to_camel, populate_by_name=True)


class ListRequest(Request[RawParams, Literal["interceptors/list"]]):
    method: Literal["interceptors/list"] = "interceptors/list"
    params: RawParams


class InvokeRequest(Request[RawParams, Literal["interceptor/invoke"]]):
    method: Literal["interceptor/invoke"] = "interceptor/invoke"
    params: RawParams


class ExecuteChainRequest(Request[RawParams, Literal["interceptor/executeChain"]]):
    method: Literal["interceptor/executeChain"] = "interceptor/executeChain"
    params: RawParams


def is_too_deep(value: Any, limit: int = MAX_PAYLOAD_DEPTH) -> bool:
    """Whether `value` nests lists and objects more than `limit` levels; walked without recursion."""
    stack = [(value, 0)] if isinstance(value, dict | list) else []
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        depth += 1
        if depth > limit:
            return True
        stack.extend((child, depth) for child in children if isinstance(child, dict | list))
    return False


def check_payload(payload: Any, *, field: str = "payload", **data: Any) -> None:
    """Refuse a payload (or the `config` of the same params) too deep to answer with `-32602` naming the
    field; `data` says for what (interceptor, event). A deep `config` would crash the handler instead."""
    if is_too_deep(payload):
        reason = f"{field} is nested more than {MAX_PAYLOAD_DEPTH} levels deep"
        raise InvalidParamsError(f"Invalid params: {reason}", data={**data, "field": field, "reason": reason})


def is_timeout_ms(value: object) -> bool:
    """Whether `value` is a usable `timeoutMs`: a finite number of milliseconds > 0 (a bool is not one)."""
    if type(value) is int or type(value) is float:  # checked on every chain run: spared the isinstance tests
        return 0 < value < math.inf
    return not isinstance(value, bool) and isinstance(value, int | float) and 0 < value < math.inf


def check_timeout_ms(timeout_ms: object, **data: Any) -> None:
    """Refuse a `timeoutMs` the params cannot carry with `-32602` naming the field; `data` says for what.

    JSON has no NaN or Infinity: sent as is, an infinite one went out as `"timeoutMs": null`.
    """
    if timeout_ms is not None and not is_timeout_ms(timeout_ms):
        reason = f"timeoutMs must be a finite number of milliseconds > 0, got {timeout_ms!r}"
        raise InvalidParamsError(f"Invalid params: {reason}", data={**data, "field": "timeoutMs", "reason": reason})
