"""How a governed call ends for its client: settled (its records durable, a receipt in `_meta`), or an error.

An error is recorded, refused (the gateway's own, before dispatch) or failed (the upstream's, after), and
scrubbed (`scrub.errors`) for the trail and the client alike. `forward` and `listings` end calls here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from mcp import MCPError

from mcp_interceptors.gateway.recording import RECEIPT_META_KEY, CallRecord, receipt_meta
from mcp_interceptors.gateway.scrub import Scrubber
from mcp_interceptors.gateway.session import DownstreamSession
from mcp_interceptors.gateway.upstream.errors import UpstreamTimeoutError, UpstreamUnavailableError
from mcp_interceptors.protocol.invoke import InvocationContext

if TYPE_CHECKING:
    from mcp_interceptors.audit import RecordWriter
    from mcp_interceptors.gateway.telemetry import Telemetry


class Replies:
    """The audit side and the scrub of every call's end. `writer` is the audit writer (None: no trail)."""

    def __init__(self, scrubber: Scrubber | None, *, receipts: bool, writer: RecordWriter | None = None) -> None:
        self.scrubber = scrubber
        self.receipts = receipts
        self.writer = writer
        #: Tracing (None: off): a record then carries its trace id, and the call's span its record's call id.
        self.telemetry: Telemetry | None = None

    def new_record(self, context: InvocationContext, target: str | None = None) -> CallRecord:
        """The audit record of one call (inert when auditing is off), naming its `target` (`call_target`)."""
        if self.writer is None:
            return CallRecord(None, context, call_id="")
        record = CallRecord(self.writer, context, target=target)
        if self.telemetry is not None:
            record.trace_id = self.telemetry.link_record(record.call_id)
        return record

    def continued_record(self, context: InvocationContext, call_id: str) -> CallRecord:
        """The record of a call opened earlier (a task's, its result fetched later): its next legs close it."""
        if self.writer is None or not call_id:
            return self.new_record(context)
        record = CallRecord(self.writer, context, call_id=call_id, opened=True)
        if self.telemetry is not None:
            record.trace_id = self.telemetry.link_record(call_id)
        return record

    async def settled(self, result: dict[str, Any], record: CallRecord) -> dict[str, Any]:
        """Wait for the call's records to be durable; an opted-in client gets its receipt in `_meta`."""
        if not record.enabled:
            return result
        receipts = await record.settle()
        meta = receipt_meta(receipts) if self.receipts else None
        if meta is None:
            return result
        return {**result, "_meta": {**(result.get("_meta") or {}), RECEIPT_META_KEY: meta}}

    async def refused(
        self,
        record: CallRecord | None,
        method: str,
        exc: MCPError,
        session: DownstreamSession,
        request_id: Any,
        target: str | None = None,
    ) -> NoReturn:
        """Record a governed request the gateway refused before dispatching it (unknown, not advertised,
        malformed, a task, an upstream it needed being down), unless a chain's verdict recorded it already,
        and raise it, scrubbed (a listing fetched to route a call may have failed upstream). Without a
        `record` yet, one is opened for `session`'s request, naming `target`."""
        scrubbed = self.scrub_error(exc)
        if record is None and self.writer is not None:
            record = self.new_record(session.context(None, request_id), target)
        if record is not None:
            upstream_failed = isinstance(exc, (UpstreamUnavailableError, UpstreamTimeoutError))
            await record.refused(method, scrubbed, upstream_failed=upstream_failed)
        reraise(exc, scrubbed)

    async def failed(self, record: CallRecord, method: str, exc: MCPError) -> NoReturn:
        """Record a call's error and raise it, scrubbed, for the trail and the client alike."""
        scrubbed = self.scrub_error(exc)
        await record.failed(method, scrubbed.code, scrubbed.message)
        await record.settle()
        reraise(exc, scrubbed)

    def scrub_error(self, exc: MCPError) -> MCPError:
        scrubber = self.scrubber
        return exc if scrubber is None else scrubber.error(exc)

    def scrub_result(self, result: dict[str, Any]) -> dict[str, Any]:
        scrubber = self.scrubber
        if scrubber is None:
            return result
        scrubbed: dict[str, Any] = scrubber.result(result)
        return scrubbed


def reraise(exc: MCPError, scrubbed: MCPError) -> NoReturn:
    """Raise `scrubbed` in place of `exc`, which is being handled."""
    if scrubbed is exc:
        raise exc
    raise scrubbed from None  # the original, chained, would carry what was scrubbed into tracebacks
