"""What the executor takes and gives: a `Call` for one invocation, the `Source` it goes to, the `ChainResult`.

`Source` is the executor's one-method seam (httpx's transport is the model): an in-process host and a
remote MCP host connection both implement it, and a test fakes it with a plain function.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from mcp_interceptors.planning import Escalated, Plan, is_lifted
from mcp_interceptors.protocol.chain import (
    AbortedAt,
    ChainExecutionResult,
    ChainStatus,
    InvocationFailure,
    ValidationSummary,
)
from mcp_interceptors.protocol.events import Direction, Phase
from mcp_interceptors.protocol.invoke import InvocationContext, InvokeParams
from mcp_interceptors.protocol.results import InterceptorResult


@dataclass(frozen=True, init=False)
class Call:
    """One invocation as a source receives it. `timeout_ms` is the budget the host should enforce.

    Frozen, with a hand-written `__init__` that fills `__dict__` in one step: one is built per invocation,
    and the generated frozen `__init__` (a guarded `setattr` per field) costs twice as much (`bench/chain_overhead.py`).
    """

    name: str
    type: str
    event: str
    phase: Phase
    payload: Any
    config: Mapping[str, Any] | None = None
    timeout_ms: float | None = None
    context: InvocationContext | None = None

    def __init__(
        self,
        name: str,
        type: str,
        event: str,
        phase: Phase,
        payload: Any,
        config: Mapping[str, Any] | None = None,
        timeout_ms: float | None = None,
        context: InvocationContext | None = None,
    ) -> None:
        fields = {
            "name": name,
            "type": type,
            "event": event,
            "phase": phase,
            "payload": payload,
            "config": config,
            "timeout_ms": timeout_ms,
            "context": context,
        }
        object.__setattr__(self, "__dict__", fields)

    @classmethod
    def for_params(cls, params: InvokeParams, type: str) -> Call:
        """The call an `interceptor/invoke` request asks for, for an interceptor declared as `type`."""
        return cls(
            name=params.name,
            type=type,
            event=params.event,
            phase=params.phase,
            payload=params.payload,
            config=params.config,
            timeout_ms=params.timeout_ms,
            context=params.context,
        )


#: A local source's invocation of one interceptor at one point, prepared once per plan (see `Source`):
#: called with the payload, the interceptor's config and the context, it answers as `Source.invoke` does.
Runner = Callable[[Any, Mapping[str, Any] | None, InvocationContext | None], Awaitable[InterceptorResult]]


class Source(Protocol):
    """Where interceptors run: an in-process host or a remote MCP host connection.

    `call.payload` is the chain's own object, shared with the other validators of its pass: a source must not
    change it in place (a mutation answers with a new payload). In-process sources may say more
    (`InterceptorHost` says all three):

    | Optional attribute | Says | The executor then |
    |---|---|---|
    | `local = True` | it runs in this process | sends it no `timeoutMs`: its own cancel scopes bound it |
    | `concurrent = False` | its invocations never suspend | runs its validators one after another |
    | `prepare(name, event, phase)` | a `Runner` per interceptor and point (or None) | runs a plan of them in one loop |
    """

    async def invoke(self, call: Call) -> InterceptorResult:
        """Return the parsed, stamped result, or raise (an `InterceptorsError` carries its code)."""
        ...


@dataclass
class ChainResult:
    """The outcome of one chain execution (R67). `final_payload` is set only on success."""

    status: ChainStatus
    event: str
    phase: Phase
    direction: Direction
    final_payload: Any
    results: list[InterceptorResult]
    failures: list[InvocationFailure]
    validation_summary: ValidationSummary
    aborted_at: AbortedAt | None
    total_duration_ms: float
    plan: Plan = field(repr=False)
    #: Blocked only by these escalations (a validator asked for a person's approval): see `approved`.
    escalations: tuple[Escalated, ...] = ()
    #: The payload a yes to every escalation lets through (withheld from `final_payload` until then).
    pending_payload: Any = field(default=None, repr=False)

    @property
    def allowed(self) -> bool:
        return self.status == "success"

    def approved(self, interceptors: Iterable[str]) -> ChainResult | None:
        """This result as it is once a person approved the escalations of `interceptors`: allowed, with the
        withheld payload, if that lifts every escalation that blocked it; else None (it stays blocked)."""
        if not is_lifted(self.escalations, interceptors):
            return None
        return replace(self, status="success", final_payload=self.pending_payload, aborted_at=None, escalations=())

    def to_wire(self) -> dict[str, Any]:
        """The camelCase `ChainExecutionResult` body (for logs and `interceptor/executeChain`)."""
        return ChainExecutionResult(
            status=self.status,
            event=self.event,
            phase=self.phase,
            results=tuple(result.to_wire() for result in self.results),
            final_payload=self.final_payload,
            validation_summary=self.validation_summary,
            total_duration_ms=self.total_duration_ms,
            aborted_at=self.aborted_at,
            failures=tuple(self.failures),
        ).to_wire()
