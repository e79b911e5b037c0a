"""Input requests sent to 2026-07-28 clients whose answers are awaited, each with its audit call.

An answer arrives with the client's retry, maybe much later: it closes the audit call its request opened,
so request and answer make one compound receipt. One never answered (its call ended, the gateway stops,
too many are open) has its call closed as cancelled.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from mcp import MCPError

from mcp_interceptors.gateway.bridge import BRIDGE_TIMEOUT_S
from mcp_interceptors.gateway.recording import CallRecord, OpenInput
from mcp_interceptors.gateway.reply import Replies
from mcp_interceptors.protocol.errors import REQUEST_CANCELLED

#: Input requests awaiting a 2026-07-28 client's answer that the audit trail keeps linkable (oldest go first).
_OPEN_INPUTS_KEPT = 10_000


class OpenInputs:
    """Input requests sent to 2026-07-28 clients whose answers are awaited, each with its audit call, keyed by
    `(session, requestState, key)`: an upstream's requestState may be the same for every call (a constant)."""

    def __init__(self, replies: Replies) -> None:
        self.replies = replies
        self._open: OrderedDict[tuple[str, str, str], OpenInput] = OrderedDict()

    async def open(self, session: str, request_state: str, key: str, opened: OpenInput) -> None:
        """Remember an input request sent to a client of downstream `session`, until its answer comes. The oldest
        is forgotten past `_OPEN_INPUTS_KEPT`, its audit call closed (an answer to it opens a call of its own)."""
        self._open[(session, request_state, key)] = opened
        while len(self._open) > _OPEN_INPUTS_KEPT:
            _, oldest = self._open.popitem(last=False)
            await self._unanswered(oldest, f"{_OPEN_INPUTS_KEPT} newer input requests were awaiting answers")

    def close(self, session: str, request_state: str, key: str) -> OpenInput | None:
        """The input request an answer in a retry of downstream `session` responds to, if one is open: never
        another session's, whose upstream call may have been given the same `requestState`."""
        return self._open.pop((session, request_state, key), None)

    async def forget(self, why: str, keys: Iterable[tuple[str, str, str]] | None = None) -> None:
        """Forget input requests still awaiting answers (those `(session, request_state, key)` names, else all): they
        will not be answered (`why`: their call ended, the gateway stops), so their audit calls are closed."""
        for key in list(self._open) if keys is None else keys:
            opened = self._open.pop(key, None)
            if opened is not None:
                await self._unanswered(opened, why)

    async def bridged_call_ended(self, token: str) -> None:
        """A bridged call is over (its result taken, or it expired): its questions can no longer be answered."""
        if self._open:
            ended = [key for key in self._open if key[1] == token]
            await self.forget(f"the bridged call ended (bridged calls last at most {BRIDGE_TIMEOUT_S:g} s)", ended)

    async def _unanswered(self, opened: OpenInput, why: str) -> None:
        writer = self.replies.writer
        if writer is not None and opened.call_id and opened.context is not None:
            record = CallRecord(writer, opened.context, call_id=opened.call_id, opened=True)
            message = f"never answered: {why}"
            await record.cancelled(opened.method, MCPError(REQUEST_CANCELLED, message, {"reason": "input_unanswered"}))
