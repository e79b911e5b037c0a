"""Resumable streams (`streams.resumable`): mcp's Streamable HTTP transport gives every message it sends on a
handshake-era session's SSE streams an event id from its `event_store=`. `ScopedEvents` is that store, over
the gateway's (`state/events.py`): SQLite in the process, or the Redis the replicas share.

mcp's store is one for all sessions and names streams by request id, so each session's events are kept under a
scope of their own: the front draws it when the session opens and sets it (`scoped`) around each of its
requests; mcp's tasks for the session inherit it. A `GET` with `Last-Event-ID` is answered here, never by mcp
(`Resumer.resume`): the event must be kept and be this session's, else HTTP 400 (-32600, `data.reason:
unknown_event_id`); then what followed it on its stream is sent, and what follows, until the call's answer. A
session another replica held is resumed from a shared store alone: what was stored, then an error for a call
whose answer is not among it, since the replica running it is gone.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import orjson
from mcp.server.streamable_http import EventCallback, EventId, EventStore, StreamId
from mcp_types import JSONRPCMessage

from mcp_interceptors.gateway.fronts.bodies import json_response
from mcp_interceptors.gateway.jsonrpc.framing import INTERNAL_ERROR, INVALID_REQUEST, error_response
from mcp_interceptors.gateway.session_slots import Slot
from mcp_interceptors.protocol.errors import StateUnavailableError
from mcp_interceptors.state.events import EventStore as Events
from mcp_interceptors.state.events import Replay, Retention, SqliteEvents, new_scope
from mcp_interceptors.state.redis import RedisState
from mcp_interceptors.state.redis_events import RedisEvents

if TYPE_CHECKING:
    from mcp_interceptors.gateway.config import GatewayConfig

logger = logging.getLogger(__name__)

#: The scope (session) the messages mcp stores in this context belong to.
_SCOPE: contextvars.ContextVar[str | None] = contextvars.ContextVar("mcpi_stream_scope", default=None)
#: mcp's name of a session's GET stream (`streamable_http.GET_STREAM_KEY`): no answer ends it.
GET_STREAM = "_GET_stream"


@contextlib.contextmanager
def scoped(scope: str | None) -> Iterator[None]:
    token = _SCOPE.set(scope)
    try:
        yield
    finally:
        _SCOPE.reset(token)


class ScopedEvents(EventStore):
    """mcp's `EventStore` over ours. A store that fails does not stop delivery: the message goes out with an id
    nothing was kept under, and a resume from it is refused. Replays are the front's (`Resumer.resume`), which
    follows the stream from the store itself: mcp's replay can miss an event sent while it switches to the live
    stream."""

    def __init__(self, resumer: Resumer) -> None:
        self.resumer = resumer

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        scope = _SCOPE.get()
        if scope is None:  # outside any session's requests: kept under a scope no session resumes
            scope = new_scope()
        text = message.model_dump_json(by_alias=True, exclude_unset=True) if message is not None else None
        try:
            event_id = await self.resumer.events.append(scope, stream_id, text)
        except StateUnavailableError as exc:
            logger.warning("an SSE event was sent but not kept for resumption: %s", exc)
            return f"{new_scope()}-0"
        self.resumer.appended(scope, stream_id)
        return event_id

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        return None  # never asked: the front answers every `Last-Event-ID` when streams are resumable


def resumer_for(config: GatewayConfig, state: Any) -> Resumer | None:
    """The event store `streams` asks for (None: streams are not resumable). `state` is the gateway's
    `RedisState` when `state.redis_url` is set: its connection pool carries the events too."""
    streams = config.streams
    if not streams.resumable:
        return None
    retention = Retention(streams.max_events_per_stream, streams.max_events_per_session, streams.max_age_seconds)
    store = streams.store or ("redis" if config.state.redis_url else "sqlite")
    if store == "sqlite":
        path = streams.sqlite_path
        if path is not None and config.base_dir is not None:
            path = str(Path(config.base_dir) / Path(path).expanduser())  # an absolute path stays as it is
        return Resumer(SqliteEvents(path, retention), shared=False)
    owned = None
    if not isinstance(state, RedisState):
        s = config.state
        assert s.redis_url is not None  # the config's check
        state = owned = RedisState(
            s.redis_url, key_prefix=s.key_prefix, max_connections=s.max_connections, timeout_s=s.timeout_seconds
        )
    return Resumer(RedisEvents(state, retention), shared=True, owned=owned)


def owner_key(owner: Any) -> str:
    """A session owner (`session_slots.owner_of`) as the store keeps it."""
    return json.dumps(owner)


class Resumer:
    """The front's side: a scope per session, the check of a `Last-Event-ID`, and the resumed stream."""

    def __init__(self, events: Events, *, shared: bool, owned: Any = None) -> None:
        self.events = events
        #: Whether other replicas write to the same store (Redis): then a session held elsewhere can be resumed.
        self.shared = shared
        self._owned = owned  # what `aclose` closes besides the store: a Redis client opened for it
        #: (scope, stream) -> set when an event of that stream is kept: a resumed stream waiting for more
        self._changed: dict[tuple[str, str], anyio.Event] = {}

    async def aclose(self) -> None:
        await self.events.aclose()
        if self._owned is not None:
            await self._owned.aclose()

    def appended(self, scope: str, stream: str) -> None:
        changed = self._changed.pop((scope, stream), None)
        if changed is not None:
            changed.set()

    async def bind(self, scope: str, session: str, owner: Any) -> None:
        try:
            await self.events.bind(scope, session, owner_key(owner))
        except StateUnavailableError as exc:
            logger.warning("session %s cannot be resumed on another replica: %s", session, exc)

    async def forget(self, scope: str) -> None:
        try:
            await self.events.forget(scope)
        except StateUnavailableError as exc:
            logger.warning("the events of an ended session stay until they expire: %s", exc)

    async def resume(
        self, last_event_id: str, session: str, slot: Slot | None, owner: Any, scope: Any, receive: Any, send: Any
    ) -> bool:
        """Answer a `GET` with `Last-Event-ID` of `session` (`slot`: this replica holds it, for this caller): a
        refusal, or the stream resumed. False: mcp answers it (404), as a session held nowhere here whose event
        no shared store names."""
        local = slot.stream_scope if slot is not None else None
        if local is None and not self.shared:
            return False
        try:
            replay = await self.events.after(last_event_id)
        except StateUnavailableError as exc:
            data = {"reason": "state_unavailable", "field": "Last-Event-ID"}
            refused = error_response(None, INTERNAL_ERROR, f"the stream cannot be resumed now: {exc}", data)
            await json_response(503, refused)(scope, receive, send)
            return True
        if local is None and (replay is None or (replay.session, replay.owner) != (session, owner_key(owner))):
            return False
        if replay is None or (local is not None and replay.scope != local):
            message = (
                f"Last-Event-ID {last_event_id[:80]!r} names no event this session can resume: unknown, expired "
                "(see streams.max_age_seconds), or another session's; what was missed cannot be sent"
            )
            data = {"field": "Last-Event-ID", "reason": "unknown_event_id"}
            await json_response(400, error_response(None, INVALID_REQUEST, message, data))(scope, receive, send)
            return True
        headers = [
            (b"content-type", b"text/event-stream"),
            (b"cache-control", b"no-cache, no-transform"),
            (b"mcp-session-id", session.encode("latin-1")),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        with contextlib.suppress(OSError):  # the client went away
            async with anyio.create_task_group() as tg:
                tg.start_soon(_cancel_on_disconnect, receive, tg.cancel_scope)
                await self._follow(replay, last_event_id, slot if local is not None else None, send)
                tg.cancel_scope.cancel()
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return True

    async def _follow(self, replay: Replay, last: str, slot: Slot | None, send: Any) -> None:
        """Send `replay`'s events, then (a session of this replica) each later one of its stream as it is kept,
        until the request's answer. The store is the one source: nothing is lost between the replay and what
        follows. A stream of another replica's session ends after what was stored."""
        key = (replay.scope, replay.stream)
        while True:
            changed = self._changed.setdefault(key, anyio.Event())  # before reading: no append goes unseen
            for event in replay.events:
                last = event.event_id
                if event.message is not None:
                    await _send(send, _frame(event.event_id, event.message))
                    if _is_answer(event.message):
                        return
            if slot is None or slot.released:
                if replay.stream != GET_STREAM:
                    why = "the gateway replica that ran this call is gone" if slot is None else "the session ended"
                    await _send(send, _gone(replay.stream, why))
                return
            with anyio.move_on_after(_PING_S):
                await changed.wait()
            if not changed.is_set():
                await _send(send, b": ping\n\n")  # a comment: keeps proxies from closing an idle stream
            try:
                later = await self.events.after(last)
            except StateUnavailableError:
                later = None
            if later is None:  # trimmed while it waited (or the store is gone): no later event can be sent whole
                await _send(send, _gone(replay.stream, "the events that followed were not kept"))
                return
            replay = later


#: How long a resumed stream stays silent before a keep-alive comment (and a look at whether its session ended).
_PING_S = 5.0


async def _cancel_on_disconnect(receive: Any, scope: anyio.CancelScope) -> None:
    while (await receive()).get("type") != "http.disconnect":
        pass
    scope.cancel()


async def _send(send: Any, body: bytes) -> None:
    await send({"type": "http.response.body", "body": body, "more_body": True})


def _gone(stream: str, why: str) -> bytes:
    """The error ending a request's resumed stream whose answer will never be kept (no event id: none is)."""
    message = f"{why}, and the call's answer was not kept: call again"
    error = error_response(_request_id(stream), INTERNAL_ERROR, message, {"reason": "stream_not_resumable"})
    return _frame(None, orjson.dumps(error).decode())


def _frame(event_id: str | None, data: str) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: message\ndata: {data}\n\n".encode()


def _is_answer(message: str) -> bool:
    parsed = orjson.loads(message)
    return isinstance(parsed, dict) and "method" not in parsed and ("result" in parsed or "error" in parsed)


def _request_id(stream: str) -> Any:
    """mcp names a request's stream `str(id)`; a client matches the answer to its request by the stream anyway."""
    return int(stream) if stream.isdecimal() else stream
