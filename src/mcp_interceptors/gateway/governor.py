"""Run the gateway's chain on one leg of a message and turn a block into the client's JSON-RPC error.

Every message a gateway handles crosses it: the gateway receives it from one side and sends it on
to the other. Each leg has a receiving point (validate, then mutate) and a sending point (mutate,
then validate) (§5.1). By default the chain runs at the sending point, so validators and policy see
exactly the payload that is dispatched, after every mutation; `chain.points: [receive, send]` runs
it at both (the receiving point gates raw input first), `[receive]` only on arrival.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from logging import INFO
from typing import TYPE_CHECKING, Any

import anyio
from mcp import MCPError

from mcp_interceptors.gateway.approvals.verdicts import ApprovalDenied, Approver, Granted
from mcp_interceptors.gateway.logs import decisions, log_blocked, log_changed, log_refused_payload
from mcp_interceptors.gateway.recording import CallRecord, Leg
from mcp_interceptors.invoker import Chain, chain_error, invalid_payload_error, payload_problem
from mcp_interceptors.planning import Plan
from mcp_interceptors.protocol.events import CLIENT_INITIATED_EVENTS, SERVER_INITIATED_EVENTS, Direction, Phase
from mcp_interceptors.protocol.invoke import InvocationContext

if TYPE_CHECKING:
    from mcp_interceptors.gateway.metrics import GatewayMetrics

#: The lifecycle events the gateway governs (spec §1.2 table, minus `llm/completion`).
GOVERNED_EVENTS = CLIENT_INITIATED_EVENTS | SERVER_INITIATED_EVENTS


class BlockedError(MCPError):
    """The client's error for a leg the chain blocked (R70): its own type, so a block is told apart from an
    upstream's error (the metrics' `blocked` outcome)."""

    @classmethod
    def of(cls, error: MCPError) -> BlockedError:
        return cls(error.error.code, error.error.message, error.error.data)


@dataclass
class Governor:
    """Applies the configured chain to gateway legs."""

    chain: Chain
    deadline_ms: float | None = None
    include_details: bool = False
    config: Mapping[str, Mapping[str, Any]] | None = None
    directions: tuple[Direction, ...] = ("sending",)
    metrics: GatewayMetrics | None = None
    #: Calls running on this governor (`hold`/`release`): a reload retires it once they are done (`drained`).
    users: int = field(default=0, init=False, repr=False)
    _idle: anyio.Event | None = field(default=None, init=False, repr=False)

    def hold(self) -> Governor:
        """One more call runs on this governor until it calls `release`; returns it."""
        self.users += 1
        return self

    def release(self) -> None:
        self.users -= 1
        if self.users == 0 and self._idle is not None:
            self._idle.set()

    async def drained(self) -> None:
        """Until no call holds it (a config reload replaced it for new calls)."""
        while self.users:
            self._idle = anyio.Event()
            await self._idle.wait()

    def is_governed(self, event: str, phase: Phase) -> bool:
        """Whether any interceptor would run: lets the hot path skip building payloads."""
        return self._plans(event, phase) is not None

    def _plans(self, event: str, phase: Phase) -> list[Plan] | None:
        """The plan at each configured point in turn, or None when no interceptor would run at any."""
        if event not in GOVERNED_EVENTS:
            return None
        plan = self.chain.plan
        plans = []
        governed = False
        # Loops: a comprehension or any() over a generator is one more frame, on every message
        # (`bench/gateway_overhead.py`).
        for direction in self.directions:
            each = plan(event, phase, direction=direction)
            plans.append(each)
            governed = governed or bool(each.batches)
        return plans if governed else None

    async def govern_request(
        self,
        event: str,
        params: Mapping[str, Any] | None,
        context: InvocationContext,
        record: CallRecord | None = None,
        approver: Approver | None = None,
    ) -> dict[str, Any] | None:
        """Run the request chain on `{method, params}`; returns the governed params, which are what is sent.

        `params._meta` is part of the payload (spec §1.2: the request minus JSON-RPC framing): it is forwarded,
        so the chain sees it and may redact or block what it carries, like any other field.
        With a `record`, the approved leg waits there for its dispatch; a denial is recorded at once.
        With an `approver`, a chain that only escalations blocked goes on if a person approves them.
        """
        payload = {"method": event, "params": dict(params) if params is not None else {}}
        plans = self._plans(event, "request")
        if plans is None:
            if record is not None and record.enabled:
                record.approved_request(Leg(event, "request", None, payload))
            return dict(params) if params is not None else None
        governed = await self._run(plans, event, "request", payload, context, record, approver)
        # `type(...) is dict` first: an ABC's isinstance costs more, and the payload is a dict all but always
        # (`bench/gateway_overhead.py`).
        out = governed.get("params") if type(governed) is dict or isinstance(governed, Mapping) else None
        return dict(out) if type(out) is dict or isinstance(out, Mapping) else {}

    async def govern_response(
        self, event: str, result: dict[str, Any], context: InvocationContext, record: CallRecord | None = None
    ) -> dict[str, Any]:
        """Run the response chain on a success result (errors are never intercepted)."""
        plans = self._plans(event, "response")
        if plans is None:
            if record is not None and record.enabled:
                await record.answered(Leg(event, "response", None, result), result)
            return result
        governed = await self._run(plans, event, "response", result, context, record)
        return dict(governed)

    async def _run(
        self,
        plans: list[Plan],
        event: str,
        phase: Phase,
        payload: Any,
        context: InvocationContext,
        record: CallRecord | None,
        approver: Approver | None = None,
    ) -> Any:
        """The chain at each configured point (`plans`) in turn; the first block stops the message."""
        approvals: Granted = {}
        for plan in plans:
            given = payload  # what the last point's chain was given: the leg's recorded input
            result = await self.chain.run_plan(
                plan, payload, config=self.config, context=context, timeout_ms=self.deadline_ms
            )
            if result.escalations and approver is not None:
                result = await self._approved(approver, Leg(event, phase, result, payload), record, approvals)
            if self.metrics is not None:
                self.metrics.chain_ran(result)
            if not result.allowed:
                log_blocked(result, record.call_id if record is not None else "")
                if record is not None:
                    await record.denied(Leg(event, phase, result, payload, approvals or None))
                raise BlockedError.of(chain_error(result, include_details=self.include_details))
            # The payload a leg is given is one of its event (the gateway builds it): only a replacement is checked.
            problem = (
                payload_problem(event, phase, result.final_payload) if result.final_payload is not payload else None
            )
            if problem is not None:  # a mutator's replacement must be a payload of the same event and phase
                log_refused_payload(result, problem, record.call_id if record is not None else "")
                if record is not None:
                    await record.denied(Leg(event, phase, result, payload))
                raise BlockedError.of(invalid_payload_error(result, problem))
            if result.final_payload is not payload and decisions.isEnabledFor(INFO):
                log_changed(result, record.call_id if record is not None else "")
            payload = result.final_payload
        if record is not None:
            leg = Leg(event, phase, result, given, approvals or None)
            if phase == "request":
                record.approved_request(leg)
            else:
                await record.answered(leg, payload)
        return payload

    async def _approved(self, approver: Approver, leg: Leg, record: CallRecord | None, approvals: Granted) -> Any:
        """`leg`'s chain result once a person approved its escalations (or as blocked, if that lifts nothing);
        a refusal is recorded with the answers and becomes the client's error."""
        assert leg.result is not None
        try:
            approvals.update(await approver(leg, record))
        except ApprovalDenied as denied:
            if record is not None:
                approved = {**approvals, **denied.approvals}
                await record.denied(Leg(leg.event, leg.phase, leg.result, leg.payload_in, approved), denied.error)
            raise BlockedError.of(denied.error) from None
        return leg.result.approved(approvals) or leg.result
