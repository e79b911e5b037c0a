"""A lean MCP load driver: raw JSON-RPC over a stdio subprocess or Streamable HTTP, handshake era.

`bench/compare.py` drives every cell with it, so the client costs the same for every server measured
(direct, our gateway, FastMCP's proxy, mcp-proxy) and stays small next to them on a 2-core machine.
It speaks only what a `tools/call` load needs: `initialize` (protocol 2025-11-25, which every peer
understands), `notifications/initialized`, `tools/list` and `tools/call`, with distinct arguments per
call. Over HTTP each worker keeps one keep-alive connection (h11) and all share one MCP session;
over stdio all workers share the pipe and responses are matched by id.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import IO, Any
from urllib.parse import urlsplit

import anyio
import anyio.abc
import h11
from anyio.streams.buffered import BufferedByteReceiveStream
from gateway_overhead import Sample, percentile

try:
    import orjson

    def _dumps(message: Any) -> bytes:
        return orjson.dumps(message)

    _loads = orjson.loads
except ImportError:  # pragma: no cover - orjson is a dependency of mcp-interceptors

    def _dumps(message: Any) -> bytes:
        return json.dumps(message, separators=(",", ":")).encode()

    _loads = json.loads

PROTOCOL_VERSION = "2025-11-25"
_MAX_LINE = 1 << 24


class DriverError(RuntimeError):
    """The server answered with an error or something that is not the echo of what was sent."""


class _StaleConnection(Exception):
    """A kept-alive connection the server had closed; the request is sent again on a new one."""


def initialize_params() -> dict[str, Any]:
    return {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "mcp-interceptors-bench", "version": "1.0"},
    }


def result_of(message: dict[str, Any]) -> dict[str, Any]:
    if "error" in message:
        raise DriverError(f"error response: {message['error']}")
    result: dict[str, Any] = message["result"]
    return result


class Session:
    """One MCP session; `request` is safe to call from many tasks at once."""

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    async def call_echo(self, tool: str, text: str) -> None:
        result = await self.request("tools/call", {"name": tool, "arguments": {"text": text}})
        content = result.get("content") or [{}]
        if result.get("isError") or content[0].get("text") != text:
            raise DriverError(f"unexpected tools/call result: {str(result)[:300]}")


# --------------------------------------------------------------------------- stdio


class StdioSession(Session):
    """Newline-delimited JSON-RPC on a subprocess's stdin/stdout; a reader task routes responses by id."""

    def __init__(self, process: anyio.abc.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.pid = process.pid
        self._stdin = process.stdin
        self._stdout = BufferedByteReceiveStream(process.stdout)
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[anyio.Event, list[dict[str, Any]]]] = {}
        self._send_lock = anyio.Lock()

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = next(self._ids)
        done, slot = anyio.Event(), []
        self._pending[request_id] = (done, slot)
        await self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        await done.wait()
        return result_of(slot[0])

    async def notify(self, method: str) -> None:
        await self._send({"jsonrpc": "2.0", "method": method})

    async def _send(self, message: dict[str, Any]) -> None:
        async with self._send_lock:
            await self._stdin.send(_dumps(message) + b"\n")

    async def read_responses(self) -> None:
        while True:
            try:
                line = await self._stdout.receive_until(b"\n", _MAX_LINE)
            except (anyio.EndOfStream, anyio.IncompleteRead):
                for done, slot in self._pending.values():
                    slot.append({"error": "the server closed its stdout"})
                    done.set()
                return
            if not line.strip():
                continue
            message = _loads(line)
            if "method" in message:  # a server request or notification: answer requests, drop the rest
                if "id" in message:
                    await self._send({"jsonrpc": "2.0", "id": message["id"], "result": {}})
                continue
            waiter = self._pending.pop(message.get("id"), None)
            if waiter is not None:
                waiter[1].append(message)
                waiter[0].set()


@asynccontextmanager
async def stdio_session(argv: Sequence[str], errlog: IO[bytes]) -> AsyncIterator[StdioSession]:
    """Start `argv`, complete the handshake, and stop the process group when the block ends."""
    process = await anyio.open_process(list(argv), stderr=errlog, start_new_session=True)
    try:
        session = StdioSession(process)
        async with anyio.create_task_group() as tg:
            tg.start_soon(session.read_responses)
            with anyio.fail_after(60):
                await session.request("initialize", initialize_params())
            await session.notify("notifications/initialized")
            yield session
            tg.cancel_scope.cancel()
    finally:
        await _stop(process)


async def _stop(process: anyio.abc.Process) -> None:
    with suppress(Exception):
        if process.stdin is not None:
            await process.stdin.aclose()
    with anyio.move_on_after(10, shield=True):
        await process.wait()
    if process.returncode is None:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with anyio.CancelScope(shield=True):
            await process.wait()


# --------------------------------------------------------------------------- Streamable HTTP


@dataclass
class _Connection:
    stream: anyio.abc.ByteStream
    h11: h11.Connection = field(default_factory=lambda: h11.Connection(our_role=h11.CLIENT))


class HttpSession(Session):
    """One MCP session over Streamable HTTP; each concurrent request borrows a keep-alive connection."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 80
        self._path = parts.path or "/"
        self._authority = parts.netloc
        self._idle: list[_Connection] = []
        self._ids = itertools.count(1)
        self.session_id: str | None = None

    async def aclose(self) -> None:
        for connection in self._idle:
            await connection.stream.aclose()
        self._idle.clear()

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = next(self._ids)
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        status, headers, body = await self._post(message)
        if status != 200:
            raise DriverError(f"HTTP {status} for {method}: {body[:300]!r}")
        if method == "initialize":
            self.session_id = headers.get("mcp-session-id")
        return result_of(_response_in(body, headers.get("content-type", ""), request_id))

    async def notify(self, method: str) -> None:
        status, _, body = await self._post({"jsonrpc": "2.0", "method": method})
        if status not in (200, 202):
            raise DriverError(f"HTTP {status} for {method}: {body[:300]!r}")

    async def _post(self, message: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        body = _dumps(message)
        headers = [
            ("host", self._authority),
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("content-length", str(len(body))),
        ]
        if self.session_id is not None:
            headers += [("mcp-session-id", self.session_id), ("mcp-protocol-version", PROTOCOL_VERSION)]
        if self._idle:
            try:
                return await self._exchange(self._idle.pop(), headers, body)
            except _StaleConnection:
                pass  # the server closed it while idle (keep-alive timeout) before reading the request
        return await self._exchange(await self._connect(), headers, body)

    async def _exchange(
        self, connection: _Connection, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        conn = connection.h11
        data = conn.send(h11.Request(method="POST", target=self._path, headers=headers))
        data += conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())  # type: ignore[operator]
        status, response_headers, chunks = 0, {}, []
        try:
            await connection.stream.send(data)
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await connection.stream.receive(1 << 16))
                elif isinstance(event, h11.Response):
                    status = event.status_code
                    response_headers = {k.decode().lower(): v.decode() for k, v in event.headers}
                elif isinstance(event, h11.Data):
                    chunks.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    break
        except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError) as error:
            await connection.stream.aclose()
            if status == 0:
                raise _StaleConnection from error
            raise DriverError("the server closed the connection mid-response") from error
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
            self._idle.append(connection)
        else:
            await connection.stream.aclose()
        return status, response_headers, b"".join(chunks)

    async def _connect(self) -> _Connection:
        return _Connection(await anyio.connect_tcp(self._host, self._port))


def _response_in(body: bytes, content_type: str, request_id: int) -> dict[str, Any]:
    """The JSON-RPC response to `request_id` in a JSON body or an SSE stream of messages."""
    if not content_type.startswith("text/event-stream"):
        message: dict[str, Any] = _loads(body)
        return message
    for event in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = b"\n".join(line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:"))
        if data:
            candidate = _loads(data)
            if candidate.get("id") == request_id and "method" not in candidate:
                return dict(candidate)
    raise DriverError(f"no response to request {request_id} in the event stream: {body[:300]!r}")


@asynccontextmanager
async def http_session(url: str) -> AsyncIterator[HttpSession]:
    session = HttpSession(url)
    try:
        with anyio.fail_after(60):
            await session.request("initialize", initialize_params())
        await session.notify("notifications/initialized")
        yield session
    finally:
        await session.aclose()


# --------------------------------------------------------------------------- measuring


def payload_text(prefix: str, index: int, size: int) -> str:
    """Distinct per call; padded with prose to `size` characters (nothing any guard would redact)."""
    head = f"{prefix}-{index} payload for request number {index}"
    if len(head) >= size:
        return head
    filler = " the request carries a value for the server to return unchanged"
    return (head + filler * (size // len(filler) + 1))[:size]


async def measure(session: Session, tool: str, calls: int, concurrency: int, size: int = 0) -> Sample:
    """`calls` echo calls spread over `concurrency` workers, each with its own arguments."""
    latencies: list[float] = []
    # Letters only: a digit prefix such as "00492086-10" is a valid German phone number to the PII guards.
    prefix = "".join(chr(ord("a") + int(digit, 16)) for digit in uuid.uuid4().hex[:8])
    counter = iter(range(calls))

    async def worker() -> None:
        for index in counter:
            text = payload_text(prefix, index, size)
            started = time.perf_counter()
            await session.call_echo(tool, text)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)
    wall = time.perf_counter() - started
    return Sample(percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000, calls / wall)


async def warm(session: Session, tool: str, concurrency: int, size: int = 0) -> None:
    """List tools (the gateway learns schemas there), then a batch of untimed calls at this concurrency."""
    await session.request("tools/list", {})
    await measure(session, tool, max(50, 4 * concurrency), concurrency, size)


def median_sample(samples: Sequence[Sample]) -> Sample:
    return Sample(
        statistics.median(s.p50_ms for s in samples),
        statistics.median(s.p99_ms for s in samples),
        statistics.median(s.rate for s in samples),
    )
