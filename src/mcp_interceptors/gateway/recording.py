"""Turn the gateway's chain results into audit records: one per governed leg, linked per call.

A `CallRecord` follows one call: its request leg is recorded once the payload is dispatched (so
intent and executed payloads can be compared), its response leg once the client's answer is
settled; a denial or an upstream error closes the call. `settle()` waits until every record of the
call is durable, so a client never sees a reply whose record could still be lost.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import anyio
from mcp import MCPError

from mcp_interceptors.canonical import CanonicalizationError
from mcp_interceptors.executor import ChainResult
from mcp_interceptors.gateway.record_entries import Approvals, error_entry, interceptor_entries
from mcp_interceptors.protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, REQUEST_CANCELLED, InterceptorsError
from mcp_interceptors.protocol.events import Phase
from mcp_interceptors.protocol.invoke import InvocationContext

if TYPE_CHECKING:
    from mcp_interceptors.audit import AuditReceipt, AuditWriteError, PendingRecord, RecordWriter

logger = logging.getLogger(__name__)

#: Where an opted-in client finds its receipt in a result's `_meta`.
RECEIPT_META_KEY = "io.github.mcp-interceptors/receipt"
#: How long a cancelled call may wait to queue its closing record (only a full writer queue makes it wait).
_CANCEL_RECORD_S = 5.0


def new_call_id() -> str:
    """A call id: an RFC 9562 UUIDv7 as 32 hex digits (a millisecond timestamp, then 74 random bits).

    Time first, so the ids a store indexes arrive in order: each insert lands at the end of the index, not
    on a random page of it (which, on a trail of millions of records, costs a page read per record).
    """
    random = int.from_bytes(os.urandom(10))
    rand_a, rand_b = (random >> 62) & 0xFFF, random & _LOW_62
    value = (time.time_ns() // 1_000_000) << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    return f"{value:032x}"


_LOW_62: Final = (1 << 62) - 1


@dataclass
class Leg:
    """One chain run waiting to be recorded."""

    event: str
    phase: Phase
    result: ChainResult | None
    payload_in: Any
    approvals: Approvals | None = None  # the approvals a person gave or refused (`approvals.asking`)


@dataclass(frozen=True)
class OpenInput:
    """An input request sent to a 2026-07-28 client, its answer awaited in a retry: its method (whose response
    chain the answer runs) and its audit call (none, `call_id` empty, when auditing is off)."""

    method: str
    call_id: str = ""
    context: InvocationContext | None = None


@dataclass
class CallRecord:
    """The audit side of one governed call. All methods are no-ops without a writer."""

    writer: RecordWriter | None
    context: InvocationContext
    call_id: str = field(default_factory=new_call_id)
    pending: list[PendingRecord] = field(default_factory=list)
    request: Leg | None = None
    #: The record of the call an embedded one belongs to: a denial there ends that call too.
    parent: CallRecord | None = None
    #: Set once a denial closed the call: the block then reaches the caller as an error, which is not
    #: the upstream's and must not close the call a second time.
    closed: bool = False
    #: Whether this call's allowed request was recorded, and whether a record closing the call was.
    opened: bool = False
    ended: bool = False
    #: Text the mutations of this call (and of the calls embedded in it) removed: no later record keeps it.
    redacted: set[str] = field(default_factory=set)
    #: The trace the call belongs to (tracing on): each of its records names it.
    trace_id: str | None = None
    #: The tool, resource uri or prompt the call names (`call_target`); none for an embedded call or a listing.
    target: str | None = None
    _principal: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def enabled(self) -> bool:
        return self.writer is not None

    def embedded(self, call_id: str | None = None) -> CallRecord:
        """A record for a request embedded in this call (an input request or its answer), settled with it.

        `call_id` continues an embedded call opened earlier: an answer arriving with the client's retry.
        """
        if self.writer is None:
            return self
        if call_id is None:
            return CallRecord(
                self.writer,
                self.context,
                pending=self.pending,
                parent=self,
                redacted=self.redacted,
                trace_id=self.trace_id,
            )
        return CallRecord(
            self.writer,
            self.context,
            call_id=call_id,
            pending=self.pending,
            parent=self,
            opened=True,
            redacted=self.redacted,
            trace_id=self.trace_id,
        )

    def for_server(self, server: str) -> CallRecord:
        """The same call, attributed to one upstream (a merged listing's per-upstream response)."""
        if self.writer is None:
            return self
        context = self.context.model_copy(update={"server": server})
        return CallRecord(
            self.writer,
            context,
            call_id=self.call_id,
            pending=self.pending,
            request=self.request,
            parent=self,
            redacted=self.redacted,
            trace_id=self.trace_id,
            target=self.target,
        )

    async def denied(self, leg: Leg, error: MCPError | None = None) -> list[AuditReceipt]:
        """A blocked leg: recorded (closing the call) and made durable before the client hears of it; `error`,
        the client's when it is not the chain's (an approval refused), is kept as the record's `error`."""
        entry = error_entry(error, "reason", "interceptor") if error is not None else None
        await self._submit(leg, intent=None, executed=None, decision="deny", error=entry)
        self.closed = True
        record = self.parent
        while record is not None:
            if record.opened and not record.ended and record.request is not None:
                # The call it is embedded in ends with it (its result never reaches the client): closed too,
                # naming the denied call, so it is not left open in the trail.
                ends = Leg(record.request.event, "response", None, None)
                status = leg.result.status if leg.result is not None else "validation_failed"
                why = {"message": f"its {leg.event} {leg.phase} was denied", "call_id": self.call_id}
                await record._submit(ends, intent=None, executed=None, decision="deny", status=status, error=why)
            record.closed = True
            record = record.parent
        return await self.settle()

    def approved_request(self, leg: Leg) -> None:
        self.request = leg

    async def dispatched(self, executed: Any, intent: Any) -> None:
        """The approved request went out: record intent (translated to the upstream) and what was sent (the
        writer compares them, off the event loop when it is a process of its own)."""
        if self.request is not None:
            await self._submit(self.request, intent=intent, executed=executed, decision="allow")

    async def answered(self, leg: Leg, final: Any) -> None:
        await self._submit(leg, intent=final, executed=final, decision="allow")

    async def chain_ran(self, leg: Leg, final: Any) -> None:
        """A chain run on its own (`interceptor/executeChain`) approved `final`: the gateway dispatched
        nothing, so the record has no executed payload (and cannot pass for a forwarded request)."""
        await self._submit(leg, intent=final, executed=None, decision="allow")

    async def failed(self, event: str, code: int, message: str) -> None:
        """The upstream failed after the request was allowed: an error record closes the call.

        Nothing is recorded for a call a denial already closed (its error is the gateway's own block).
        """
        if self.closed:
            return
        leg = Leg(event=event, phase="response", result=None, payload_in=None)
        await self._submit(leg, intent=None, executed=None, decision="error", error={"code": code, "message": message})

    async def refused(self, event: str, exc: MCPError, *, upstream_failed: bool = False) -> None:
        """The gateway refused the call before dispatching it, and no interceptor's verdict did: one record
        closes it (`deny`, status `refused`; `error`, status `upstream_error`, when the upstream it needed
        failed), with the request chain's interceptors if it ran, durable before the client hears of it.

        Nothing is recorded for a call already closed or dispatched: its own records say how it ended.
        """
        if self.writer is None or self.opened or self.ended or self.closed:
            return
        error = error_entry(exc, "reason", "field")
        decision, status = ("error", "upstream_error") if upstream_failed else ("deny", "refused")
        await self._close(self.request or Leg(event, "request", None, None), decision, status, error)
        await self.settle()

    async def withheld(self, event: str, stopped_by: CallRecord, why: MCPError | InterceptorsError) -> None:
        """An approved input request that never reached the client: `stopped_by`, another request of its
        `input_required` round, was denied or failed, and the round ended there. A refusal closes it, naming
        that call, with the interceptors of its own request chain."""
        if self.writer is None or self.opened or self.ended or self.closed:
            return
        error: dict[str, Any] = {
            "code": why.code if isinstance(why, InterceptorsError) else why.error.code,
            "message": f"not sent: its input_required round ended when another request in it was "
            f"{'denied' if stopped_by.closed else 'refused'}",
            "reason": "input_request_withheld",
        }
        if stopped_by.ended:  # else nothing of it is in the trail to name
            error["call_id"] = stopped_by.call_id
        await self._close(self.request or Leg(event, "request", None, None), "deny", "refused", error)
        await self.settle()

    async def cancelled(self, event: str, answered: MCPError | None = None) -> None:
        """The client cancelled the call (or ended its session, and was `answered` this error): a `cancelled`
        error record closes the call, so the trail shows what was started and not finished. After dispatch it
        is the response's record; before (the request chain ran, or was running), the request's, with the
        chain's interceptors if it finished. Shielded (the caller is being cancelled) and not awaited to
        durability: the writer commits it within its `max_delay`."""
        if self.writer is None or self.ended or self.closed:
            return
        from mcp_interceptors.audit import AuditWriteError

        leg = Leg(event=event, phase="response", result=None, payload_in=None)
        if not self.opened:
            leg = self.request or Leg(event, "request", None, None)
        error: dict[str, Any] = {"code": REQUEST_CANCELLED, "message": "Request cancelled"}
        if answered is not None:
            error = error_entry(answered, "reason")
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_RECORD_S):
            try:
                await self._close(leg, "error", "cancelled", error)
            except AuditWriteError as exc:  # the writer is gone (shutdown): the call stays open in the trail
                logger.warning("%s: the record of a cancelled call was not written: %s", event, exc)

    async def _close(self, leg: Leg, decision: str, status: str, error: Mapping[str, Any]) -> None:
        """Submit the record closing the call. A request leg whose chain entries hold a payload with no
        canonical form is recorded without them, rather than not at all."""
        try:
            await self._submit(leg, intent=None, executed=None, decision=decision, status=status, error=error)
        except MCPError:
            if leg.phase != "request" or leg.result is None:
                raise
            await self._submit(
                Leg(leg.event, "request", None, None),
                intent=None,
                executed=None,
                decision=decision,
                status=status,
                error=error,
            )

    async def settle(self) -> list[AuditReceipt]:
        """Wait until every record of this call is durable; returns their receipts.

        A record the store refused fails the call with -32603 naming the leg (`data.reason:
        audit_write_failed`); the store's own error, which quotes its SQL and the record, is logged for
        the operator and not sent to the client.
        """
        from mcp_interceptors.audit.writer import AuditWriteError

        receipts = []
        for pending in self.pending:
            if pending.settled and pending.error is None and pending.receipt is not None:
                receipts.append(pending.receipt)  # committed already (a request's record, often): no wait
                continue
            try:
                receipts.append(await pending.wait())
            except AuditWriteError as exc:
                raise unwritten(pending.event, pending.phase, pending.call_id, exc) from None
        self.pending.clear()
        return receipts

    async def _submit(
        self,
        leg: Leg,
        *,
        intent: Any,
        executed: Any,
        decision: str,
        status: str | None = None,
        error: Mapping[str, Any] | None = None,
    ) -> None:
        if self.writer is None:
            return
        # Imported here: a gateway without an audit trail never loads it. From the modules, not the package,
        # which a per-call `from package import` costs a lookup through `_handle_fromlist` (`bench/audit_overhead.py`).
        from mcp_interceptors.audit.records import DecisionInput, removed_texts
        from mcp_interceptors.audit.writer import AuditWriteError

        result = leg.result
        if status is None:
            status = result.status if result is not None else ("upstream_error" if decision == "error" else "success")
        principal = self._principal
        if principal is None and self.context.principal is not None:
            principal = self._principal = self.context.principal.to_wire()  # once per call, not per leg
        entries = interceptor_entries(result, leg.payload_in, leg.approvals) if result is not None else ()
        decision_input = DecisionInput(
            timestamp=datetime.now(UTC),
            event=leg.event,
            phase=leg.phase,
            direction=result.direction if result is not None else "sending",
            decision=decision,  # type: ignore[arg-type]
            status=status,  # type: ignore[arg-type]
            session_id=self.context.session_id,
            principal=principal,
            server=self.context.server,
            call_id=self.call_id,
            interceptors=entries,
            intent_payload=intent,
            executed_payload=executed,
            error=error,
            redacted=tuple(self.redacted),
            trace_id=self.trace_id,
            target=self.target,
        )
        try:
            self.pending.append(await self.writer.submit(decision_input))
        except CanonicalizationError as exc:
            raise unrecordable(leg, exc, from_client=self.parent is None and leg.phase == "request") from None
        except AuditWriteError as exc:  # the writer is gone (its process died, or the gateway is stopping)
            raise unwritten(leg.event, leg.phase, self.call_id, exc) from None
        if any(entry.get("modified") for entry in entries):  # what this leg removed stays out of the later ones
            removed_texts(entries, self.redacted)
        if leg.phase == "request" and decision == "allow":
            self.opened = True
            return
        record: CallRecord | None = self
        while record is not None and record.call_id == self.call_id:  # a merged listing's per-upstream part
            record.ended = True
            record = record.parent


def unrecordable(leg: Leg, exc: CanonicalizationError, *, from_client: bool) -> MCPError:
    """A leg whose payload has no canonical JSON form (an integer past the doubles, say) cannot be recorded,
    so it does not go on: -32602 for the client's own request (nothing was dispatched), else -32603."""
    data = {"reason": "unrecordable_payload", "event": leg.event, "phase": leg.phase, "detail": str(exc)}
    if exc.field is not None:
        data["field"] = exc.field
    where = f" at {exc.field}" if exc.field is not None else ""
    message = f"{leg.event} {leg.phase}: a value{where} has no canonical JSON form, so it cannot be audited"
    return MCPError(INVALID_PARAMS if from_client else INTERNAL_ERROR, message, data)


def unwritten(event: str, phase: str, call_id: str | None, exc: AuditWriteError) -> AuditWriteError:
    """The client's error for a record that was not made durable: which leg, not the store's internals."""
    from mcp_interceptors.audit.writer import AuditWriteError

    logger.error("%s %s: %s", event, phase, exc)
    data = {"reason": "audit_write_failed", "event": event, "phase": phase, "call_id": call_id}
    return AuditWriteError(f"{event} {phase}: the audit record was not written", data=data)


def receipt_meta(receipts: list[AuditReceipt]) -> dict[str, Any] | None:
    """The `_meta` entry an opted-in client gets: the records' ids and signatures, and the call's receipt."""
    if not receipts:
        return None
    records = [{"id": r.id, "hash": r.hash, "signature": r.signature, "keyId": r.key_id} for r in receipts]
    compound = next((r.compound for r in reversed(receipts) if r.compound is not None), None)
    meta: dict[str, Any] = {"records": records}
    if compound is not None:
        meta["receipt"] = compound.to_dict()
    return meta
