"""A lean JSON-RPC peer over newline-delimited byte streams: the gateway's fast stdio path, both ways.

Messages stay dicts end to end (one parse and one dump per message), with no per-message model
validation, tracing span or extra task hop. It offers the subset of mcp's dispatcher API the gateway
uses (`run`, `send_raw_request`, `notify`), with ids, progress and cancellation. `run` is where every
message from a stdio peer is read; `_serve` is where every answer to it is written.

One piece (past ~400 lines): reading, the table of our requests awaiting answers and the table of the
peer's requests being served are one connection's state, which `run`, `take_now` and `_drain` share.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from contextlib import nullcontext, suppress
from typing import Any

import anyio
import anyio.abc
from mcp import MCPError
from mcp.shared.dispatcher import CallOptions

from mcp_interceptors.gateway.jsonrpc.framing import (
    CONNECTION_CLOSED,
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MAX_LINE_BYTES,
    INTERNAL_ERROR,
    INVALID_REQUEST,
    PARSE_ERROR,
    REQUEST_TIMEOUT,
    LineBuffer,
    LineTooLongError,
    Message,
    encode_line,
    error_response,
    id_in_use,
    is_answer_shaped,
    is_request_id,
    loads,
    refusal,
    too_many_in_flight,
)

logger = logging.getLogger(__name__)

OnRequest = Callable[[Any, str, dict[str, Any] | None], Awaitable[Any]]
OnNotify = Callable[[Any, str, dict[str, Any] | None], Awaitable[None]]
#: Messages this peer does not handle itself (answers to someone else's requests, say).
OnForeign = Callable[[Message], Awaitable[None]]
#: Claims a message before the peer looks at it (True: someone else answers it).
Divert = Callable[[Message], Awaitable[bool]]
#: Whether a `Divert` would leave a message to the peer, told without awaiting (False: ask the `Divert`).
Leaves = Callable[[Message], bool]
ReadChunk = Callable[[], Awaitable[bytes]]
WriteBytes = Callable[[bytes], Awaitable[None]]


class _Pending:
    """One of our requests awaiting its outcome."""

    __slots__ = ("_done", "on_progress", "outcome")

    def __init__(self, loop: asyncio.AbstractEventLoop | None, on_progress: Any = None) -> None:
        self.outcome: Message | None = None
        self.on_progress = on_progress
        # A bare future on asyncio: anyio's Event wraps asyncio's, one more future per wait (stdio cells of
        # `bench/gateway_overhead.py`).
        self._done: asyncio.Future[None] | anyio.Event = anyio.Event() if loop is None else loop.create_future()

    def settle(self, outcome: Message) -> None:
        """End the wait with `outcome`; the first one stands (an answer, the deadline or the connection closing)."""
        done = self._done
        if isinstance(done, asyncio.Future):
            if not done.done():
                self.outcome = outcome
                done.set_result(None)
        elif not done.is_set():
            self.outcome = outcome
            done.set()

    async def wait(self) -> None:
        done = self._done
        if isinstance(done, asyncio.Future):
            await done
        else:
            await done.wait()

    def time_out(self) -> None:
        self.settle(_TIMED_OUT)


#: The outcome of a request whose deadline passed first (its identity is what counts).
_TIMED_OUT: Message = {"error": {"code": REQUEST_TIMEOUT, "message": "timed out"}}


def asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop, or None on another backend (trio)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class JsonRpcPeer:
    """One side of a JSON-RPC connection. Our request ids are strings (`<prefix>-N`) so they never
    collide with a peer that numbers its own."""

    def __init__(
        self,
        read: ReadChunk,
        write: WriteBytes,
        *,
        id_prefix: str = "gw",
        max_line_bytes: int | None = DEFAULT_MAX_LINE_BYTES,
        limit_setting: str | None = None,
        max_in_flight: int | None = DEFAULT_MAX_IN_FLIGHT,
        in_flight_setting: str | None = None,
    ) -> None:
        self._read = read
        self._write = write
        self._prefix = id_prefix
        self._next = 0
        self._pending: dict[Any, _Pending] = {}
        self._handlers: dict[Any, anyio.CancelScope] = {}
        #: The handler tasks still running (on asyncio), each with its scope; see `_start_handler`.
        self._tasks: dict[asyncio.Task[None], anyio.CancelScope] = {}
        # Lines stay whole against our own writers; taking a free lock need not also yield to the loop (a
        # scheduling round trip on each of the two sends every forwarded call makes). asyncio's own lock where
        # it runs: anyio's adds a task lookup and a cancellation check to every free acquire
        # (`bench/gateway_overhead.py`, stdio cells).
        self._write_lock: asyncio.Lock | anyio.Lock = (
            anyio.Lock(fast_acquire=True) if asyncio_loop() is None else asyncio.Lock()
        )
        self._closed = False
        self._buffer = LineBuffer(max_line_bytes)
        #: What `run` was given, for `take_now`; None outside `run`.
        self._on_request: OnRequest | None = None
        self._leaves: Leaves | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._max_line_bytes = max_line_bytes
        #: The configuration key that sets `max_line_bytes`, named in the error a longer message gets.
        self._limit_setting = limit_setting
        #: Why we closed the connection ourselves (a message over the line limit), else None.
        self.close_reason: str | None = None
        self._max_in_flight = max_in_flight
        self._in_flight_setting = in_flight_setting
        #: Set while the requests read before end of input finish (`_drain`); `_idle` when none is left.
        self._draining = False
        self._idle: anyio.Event | None = None
        #: When a drained run read end of input (`anyio.current_time()`), else None.
        self.input_ended_at: float | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    async def run(
        self,
        on_request: OnRequest,
        on_notify: OnNotify,
        *,
        on_foreign: OnForeign | None = None,
        divert: Divert | None = None,
        leaves: Leaves | None = None,
        drain_s: float = 0.0,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Read and dispatch until end of input; then every pending request fails as closed.

        With `drain_s`, the peer's requests already read at end of input have that long to finish and
        be answered (see `_drain`); otherwise they are cancelled unanswered. With a `divert`, `leaves`
        lets `take_now` handle the messages it says `divert` would leave to the peer.
        """
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                self._on_request = on_request
                self._leaves = (lambda message: True) if divert is None else leaves
                task_status.started()
                buffer = self._buffer
                while True:
                    chunk = await self._read()
                    if not chunk:
                        if drain_s > 0:
                            await self._drain(drain_s)
                        break
                    lines, too_long = buffer.take(chunk)
                    for line in lines:
                        if line.strip():
                            await self._dispatch(line, on_request, on_notify, on_foreign, divert)
                    if too_long is not None:
                        await self._refuse_too_long(too_long)
                        break
                tg.cancel_scope.cancel()
        finally:
            self._on_request = self._leaves = None
            await self._end_handlers()
            self._close_pending()

    def _start_handler(self, coro: Coroutine[Any, Any, None], scope: anyio.CancelScope) -> None:
        """Run a handler in a task of its own: a bare asyncio task where asyncio runs (anyio's `start_soon`
        costs several times as much, on every request: `bench/gateway_overhead.py`, stdio cells), kept here
        so `run` cancels and awaits it as a task group would."""
        loop = asyncio_loop()
        if loop is None:
            assert self._tg is not None
            self._tg.start_soon(lambda: coro)
            return
        task = loop.create_task(coro)
        self._tasks[task] = scope
        task.add_done_callback(self._handler_done)

    def _handler_done(self, task: asyncio.Task[None]) -> None:
        del self._tasks[task]
        if not task.cancelled() and (exc := task.exception()) is not None:  # `_serve` lets only BaseExceptions out
            logger.error("request handler task failed", exc_info=exc)

    async def _end_handlers(self) -> None:
        """The handlers still running are cancelled (nobody waits for their answers now) and awaited."""
        if not self._tasks:
            return
        for scope in self._tasks.values():
            scope.cancel()
        with anyio.CancelScope(shield=True):
            await asyncio.wait(list(self._tasks))

    def _close_pending(self) -> None:
        """Nothing more can be read: our requests still waiting fail as closed, and so does any new one."""
        self._closed = True
        for pending in self._pending.values():
            pending.settle({"error": {"code": CONNECTION_CLOSED, "message": "Connection closed"}})

    def take_now(self, chunk: bytes) -> bool:
        """Handle at once a chunk of whole lines that are all answers to our requests in flight or requests
        to serve (each started in its handler task), and say so; anything else leaves the chunk, untouched,
        to `run` (False): a notification, a line to refuse, a request to refuse or to divert, a partial line.

        For a reader that calls it only while `run` waits for input with every line before dispatched: these
        messages then need no turn of the reading task, and are handled in the order `run` would.
        """
        leaves, on_request = self._leaves, self._on_request
        if leaves is None or on_request is None or self._closed or self._draining or not chunk.endswith(b"\n"):
            return False
        if not self._buffer.empty or (self._max_line_bytes is not None and len(chunk) > self._max_line_bytes):
            return False
        try:
            taken = self._takeable(chunk, leaves)
        except Exception:  # `run` handles the chunk instead, and fails the message that raised, logging it once
            logger.debug("a chunk was left to the reading task", exc_info=True)
            return False
        if taken is None:
            return False
        for message in taken:
            if "method" in message:
                params = message.get("params")
                self._start(message["id"], message["method"], params if isinstance(params, dict) else None, on_request)
            else:
                self._pending[message["id"]].settle(message)
        return True

    def _takeable(self, chunk: bytes, leaves: Leaves) -> list[Message] | None:
        """The messages of `chunk` if `take_now` may handle them all, else None. Each passes the shape
        check (`refusal`) before anything else looks at it."""
        taken: list[Message] = []
        ids: set[Any] = set()
        for line in chunk.split(b"\n")[:-1]:
            if not line.strip():
                continue
            try:
                message = loads(line)
            except ValueError:
                return None
            if refusal(message) is not None or not is_request_id(message.get("id")) or not leaves(message):
                return None
            if "method" in message:  # a request, if `run` would start it: else it answers it, in order
                request_id = message["id"]
                if request_id in ids or self._over_capacity(request_id, len(ids)):
                    return None
                ids.add(request_id)
            elif message["id"] not in self._pending:
                return None
            taken.append(message)
        return taken

    async def _drain(self, seconds: float) -> None:
        """End of input with the peer's requests in flight: a client that writes its requests and closes its
        input still gets every answer. What has not finished within `seconds` is cancelled and answered
        with -32000. Our own requests to the peer (a sampling request for one of its calls) fail at once:
        their answers could only come on the input that just ended."""
        self._close_pending()
        self._draining = True
        self.input_ended_at = anyio.current_time()
        if self._handlers:
            self._idle = anyio.Event()
            with anyio.move_on_after(seconds):
                await self._idle.wait()
        unfinished = list(self._handlers.items())
        self._handlers.clear()
        for request_id, scope in unfinished:
            scope.cancel()
            message = f"Connection closed: the input ended and this request did not finish within {seconds:g} s"
            with suppress(MCPError):
                await self._send(error_response(request_id, CONNECTION_CLOSED, message))

    async def _refuse_too_long(self, exc: LineTooLongError) -> None:
        """Answer a message over the line limit (its id unread, so with id null) and close: its end
        cannot be found without reading it all."""
        self.close_reason = str(exc)
        logger.warning("closing the connection: the peer sent %s", exc)
        data: dict[str, Any] = {"limitBytes": exc.limit}
        if self._limit_setting is not None:
            data["setting"] = self._limit_setting
        with anyio.move_on_after(1), suppress(MCPError):  # a peer that reads nothing cannot hold us
            await self._send(error_response(None, INVALID_REQUEST, f"Invalid Request: {exc}", data))

    async def _dispatch(
        self,
        line: bytes,
        on_request: OnRequest,
        on_notify: OnNotify,
        on_foreign: OnForeign | None,
        divert: Divert | None,
    ) -> None:
        try:
            message = loads(line)
        except ValueError:
            await self._send(error_response(None, PARSE_ERROR, "Parse error"))
            return
        refused = refusal(message)
        if refused is not None:
            if type(message) is dict and is_answer_shaped(message):
                self._malformed_answer(message, refused)  # never answered: it fails the request it names
            else:
                await self._send(refused)
            return
        try:
            await self._handle(message, on_request, on_notify, on_foreign, divert)
        except Exception as exc:
            if self._closed:
                raise  # our output is gone: the connection ends
            # Anything a message makes a handler raise fails that message alone; the connection lives.
            logger.exception("a message from the peer could not be handled")
            if "method" in message and "id" in message:
                data = {"reason": f"{type(exc).__name__}: {exc}"[:500]}
                await self._send(error_response(message["id"], INTERNAL_ERROR, "Internal error", data))

    def _malformed_answer(self, message: Message, refused: Message) -> None:
        pending = self._pending.get(message.get("id")) if is_request_id(message.get("id")) else None
        reason = refused["error"]["message"]
        if pending is None:
            logger.debug("dropping a malformed answer: %s", reason)
            return
        pending.settle({"error": {"code": INTERNAL_ERROR, "message": f"malformed answer: {reason}"}})

    async def _handle(
        self,
        message: Message,
        on_request: OnRequest,
        on_notify: OnNotify,
        on_foreign: OnForeign | None,
        divert: Divert | None,
    ) -> None:
        """One message that passed the shape check."""
        if "id" in message and not is_request_id(message["id"]):
            # an answer we cannot match (a peer's parse error carries id null): nothing to reply to
            logger.debug("dropping an answer with id %r", message["id"])
            return
        if divert is not None and await divert(message):
            return
        method = message.get("method")
        if not isinstance(method, str):
            pending = self._pending.get(message.get("id"))
            if pending is not None:
                pending.settle(message)
            elif on_foreign is not None:
                await on_foreign(message)
            return
        params = message.get("params")
        params = params if isinstance(params, dict) else None
        if "id" not in message:
            await self._on_notification(method, params, on_notify)
            return
        refused = self._over_capacity(message["id"])
        if refused is not None:
            await self._send(refused)
            return
        self._start(message["id"], method, params, on_request)

    def _start(self, request_id: Any, method: str, params: dict[str, Any] | None, on_request: OnRequest) -> None:
        # Registered before the handler task runs: a cancellation read in the same chunk still finds it.
        scope = self._handlers[request_id] = anyio.CancelScope()
        self._start_handler(self._serve(request_id, method, params, on_request, scope), scope)

    def _over_capacity(self, request_id: Any, starting: int = 0) -> Message | None:
        """The error answer to a request we must not start, else None: its id is one still in flight
        (its cancellation and answer would be ambiguous), or the peer has `max_in_flight` in flight
        (counting `starting` more about to start)."""
        if request_id in self._handlers:
            return id_in_use(request_id)
        if self._max_in_flight is not None and len(self._handlers) + starting >= self._max_in_flight:
            message, data = too_many_in_flight(self._max_in_flight, self._in_flight_setting)
            return error_response(request_id, INTERNAL_ERROR, message, data)
        return None

    async def _on_notification(self, method: str, params: dict[str, Any] | None, on_notify: OnNotify) -> None:
        if method == "notifications/cancelled":
            request_id = (params or {}).get("requestId")
            # Forgotten at once: its slot and its id are free for the peer's next request.
            scope = self._handlers.pop(request_id, None) if is_request_id(request_id) else None
            if scope is not None:
                scope.cancel()
            return
        if method == "notifications/progress":
            token = (params or {}).get("progressToken")
            pending = self._pending.get(token) if is_request_id(token) else None
            if pending is not None and pending.on_progress is not None:
                p = params or {}
                await pending.on_progress(p.get("progress", 0), p.get("total"), p.get("message"))
            return
        try:
            await on_notify(None, method, params)
        except Exception:  # a bad notification fails alone
            logger.exception("notification handler for %s raised", method)

    async def _serve(
        self,
        request_id: Any,
        method: str,
        params: dict[str, Any] | None,
        on_request: OnRequest,
        scope: anyio.CancelScope,
    ) -> None:
        reply: Message
        with scope:
            try:
                result = await on_request(request_id, method, params)
                reply = {"jsonrpc": "2.0", "id": request_id, "result": result if result is not None else {}}
            except MCPError as exc:
                reply = error_response(request_id, exc.code, exc.message, exc.data)
            except Exception as exc:  # one bad message never takes the connection down
                logger.exception("request handler for %s raised", method)
                reply = error_response(request_id, INTERNAL_ERROR, str(exc))
            finally:
                if self._handlers.get(request_id) is scope:  # not a later request that reuses the id
                    del self._handlers[request_id]
                if self._idle is not None and not self._handlers:
                    self._idle.set()
        if scope.cancelled_caught:
            return  # cancelled by the peer (it expects no answer), or at the end of a drain (answered there)
        # While draining, the peer may have closed its output too: nobody is left to tell.
        with suppress(MCPError) if self._draining else nullcontext():
            await self._send(reply)

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        """Send a request and await its result; a JSON-RPC error raises `MCPError` unchanged."""
        if self._closed:
            raise MCPError(CONNECTION_CLOSED, "Connection closed")
        opts = opts or {}
        self._next += 1
        request_id = f"{self._prefix}-{self._next}"
        loop = asyncio_loop()
        pending = _Pending(loop, opts.get("on_progress"))
        body = dict(params) if params is not None else None
        if pending.on_progress is not None:
            body = dict(body or {})
            body["_meta"] = {**(body.get("_meta") or {}), "progressToken": request_id}
        message: Message = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if body is not None:
            message["params"] = body
        self._pending[request_id] = pending
        timer: asyncio.TimerHandle | None = None
        try:
            await self._send(message)
            timeout = opts.get("timeout")
            if timeout is None:
                await pending.wait()
            elif loop is not None:
                # A timer that answers the request itself: a deadline cancel scope costs several times as much
                # (its own timer, task bookkeeping and a scope on each side of the wait), on every call
                # (`bench/gateway_overhead.py`, stdio cells).
                timer = loop.call_later(timeout, pending.time_out)
                await pending.wait()
            else:
                with anyio.fail_after(timeout):
                    await pending.wait()
            if pending.outcome is _TIMED_OUT:
                raise TimeoutError
        except TimeoutError:
            await self._cancel_remote(request_id, "timed out", opts)
            raise MCPError(REQUEST_TIMEOUT, f"Request {method!r} timed out") from None
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self._cancel_remote(request_id, "caller cancelled", opts)
            raise
        finally:
            if timer is not None:
                timer.cancel()
            self._pending.pop(request_id, None)
        outcome = pending.outcome or {}
        error = outcome.get("error")
        if error is not None:
            if isinstance(error, dict) and type(error.get("code")) is int and isinstance(error.get("message"), str):
                raise MCPError(error["code"], error["message"], error.get("data"))
            raise MCPError(INTERNAL_ERROR, f"malformed error answer to {method!r}", {"error": error})
        result = outcome.get("result")
        if not isinstance(result, dict):  # every MCP result is an object; a peer that says otherwise is broken
            kind = "no result" if "result" not in outcome else f"a result of type {type(result).__name__}"
            raise MCPError(INTERNAL_ERROR, f"malformed answer to {method!r}: {kind}, not an object")
        return result

    async def _cancel_remote(self, request_id: str, reason: str, opts: CallOptions) -> None:
        if opts.get("cancel_on_abandon", True) and not self._closed:
            with anyio.move_on_after(1):
                await self.notify("notifications/cancelled", {"requestId": request_id, "reason": reason})

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None) -> None:
        message: Message = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = dict(params)
        await self._send(message)

    async def send_message(self, message: Message) -> None:
        """Write an already-formed message (a response relayed from elsewhere)."""
        await self._send(message)

    async def send_line(self, data: bytes) -> None:
        """Write one already-encoded JSON line, keeping lines whole against our own writes."""
        async with self._write_lock:
            await self._write(data)

    def is_pending(self, request_id: Any) -> bool:
        """Whether `request_id` is one of our requests still awaiting its answer."""
        return is_request_id(request_id) and request_id in self._pending

    def is_serving(self, request_id: Any) -> bool:
        """Whether `request_id` is a request of the peer's that we are still handling."""
        return is_request_id(request_id) and request_id in self._handlers

    async def _send(self, message: Message) -> None:
        data = encode_line(message)
        async with self._write_lock:
            try:
                await self._write(data)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, BrokenPipeError, ConnectionError):
                self._closed = True
                raise MCPError(CONNECTION_CLOSED, "Connection closed") from None
