"""Clients that drop their connection anywhere in a Streamable HTTP exchange, as a hypothesis property of a real
HTTP gateway (the CLI with the fuzz upstream, `secrets` and a signed audit trail) on loopback sockets.

Hypothesis picks, for one to three connections at once, the request (a 2026-07-28 call, a call in a handshake-era
session, an `initialize`), the tool (`echo`, `hang`, or `progress`; with a progress token the answer is an SSE
stream), where the client lets go (inside the request's headers, inside its body, once it is sent, once the
answer's headers came, part-way into the answer) and how (a close, or a reset). After each example, within a
bound:

- the gateway still serves: a 2026-07-28 call and a call in the handshake-era session are answered, and a new
  session opens (`http.max_sessions` is small: a dropped `initialize` must give its slot back);
- no call is left pending: every call the audit trail shows begun is closed there, each dropped request's id is
  free again in its session, and the session's requests in flight are back under `http.max_requests_in_flight`;
- nothing leaks: the gateway's open file descriptors come back to what they were.

At the end the gateway stops with no traceback and `audit verify` passes with no open call. An `initialize` is
dropped only before its request is whole: one the gateway received opens a session, which lives until
`http.session_idle_s` by design.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import gateway_fuzz_targets as targets
import httpx2
import pytest
from anyio.abc import SocketAttribute
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.e2e

HANDSHAKE = "2025-11-25"
UPSTREAM_TIMEOUT_MS = 1500
#: How long an example's dropped calls may take to end and be recorded: the upstream timeout a `hang` waits
#: out, with room for a loaded machine.
SETTLE_S = 60.0
#: Descriptors the gateway may hold above its first count once an example settled (SQLite's journal, a
#: restarted upstream's pipes); a leak per dropped connection outgrows it within a few examples.
FD_SLACK = 4
REQUEST_CUTS = ("request-headers", "request-body")
ANSWER_CUTS = ("request-sent", "answer-headers", "answer-stream")
ACCEPT = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


@dataclass(frozen=True)
class Drop:
    """One connection a client lets go of: what it asked, where it stopped and whether it reset."""

    kind: str  # "modern", "session" or "initialize"
    tool: str
    token: bool
    where: str
    fraction: float
    reset: bool


_cut = {"fraction": st.floats(0, 1), "reset": st.booleans()}
calls = st.builds(
    Drop,
    kind=st.sampled_from(["modern", "session"]),
    tool=st.sampled_from(["echo", "hang", "progress"]),
    token=st.booleans(),
    where=st.sampled_from(REQUEST_CUTS + ANSWER_CUTS),
    **_cut,
)
initializes = st.builds(
    Drop,
    kind=st.just("initialize"),
    tool=st.just(""),
    token=st.just(False),
    where=st.sampled_from(REQUEST_CUTS),
    **_cut,
)


def answer_of(reply: httpx2.Response) -> dict[str, Any]:
    """The JSON-RPC answer in a reply's body, JSON or the last `data:` of an SSE stream."""
    if reply.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in reply.text.splitlines() if line.startswith("data:")]
        answers = [json.loads(item) for item in data if item]
        answers = [item for item in answers if "method" not in item]
        assert answers, reply.text[:500]
        return dict(answers[-1])
    return dict(reply.json())


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll `check` until it holds, for `SETTLE_S` at most (the gateway is another process: there is no event
    to wait on)."""
    try:
        with anyio.fail_after(SETTLE_S):
            while not await check():  # noqa: ASYNC110 - the state is another process's
                await anyio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"not within {SETTLE_S:.0f} s: {what}") from None


class Harness:
    """The gateway, its handshake-era session, and what it held before the first example."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        http = {"max_sessions": 3, "max_requests_in_flight": 4}
        self.gw = targets.HttpGateway(folder, audit=True, upstream_timeout_ms=UPSTREAM_TIMEOUT_MS, http=http)
        self.session = ""
        self.baseline_fds = 0
        self.examples = 0

    # -- requests ---------------------------------------------------------------------------------------------

    def body(self, drop: Drop, request_id: str) -> dict[str, Any]:
        if drop.kind == "initialize":
            client = {"name": "dropping-client", "version": "1"}
            params = {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": client}
            return {"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params}
        arguments = {"echo": {"text": "dropped"}, "hang": {}, "progress": {"count": 3, "pause_ms": 150}}[drop.tool]
        meta: dict[str, Any] = {"progressToken": request_id} if drop.token else {}
        if drop.kind == "modern":
            meta = {**targets.META, **meta}
        params = {"name": drop.tool, "arguments": arguments, **({"_meta": meta} if meta else {})}
        return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}

    def headers(self, drop: Drop) -> dict[str, str]:
        if drop.kind == "modern":
            return {**ACCEPT, "mcp-protocol-version": targets.MODERN, "mcp-method": "tools/call", "mcp-name": drop.tool}
        if drop.kind == "session":
            return {**ACCEPT, "mcp-protocol-version": HANDSHAKE, "mcp-session-id": self.session}
        return dict(ACCEPT)

    async def post(self, http: httpx2.AsyncClient, drop: Drop, request_id: str) -> httpx2.Response:
        return await http.post(self.gw.url, json=self.body(drop, request_id), headers=self.headers(drop))

    async def open_session(self, http: httpx2.AsyncClient) -> str:
        reply = await self.post(http, Drop("initialize", "", False, "", 0, False), targets.next_id("init"))
        assert reply.status_code == 200, (reply.status_code, reply.text[:300])
        session = reply.headers["mcp-session-id"]
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        headers = {**ACCEPT, "mcp-protocol-version": HANDSHAKE, "mcp-session-id": session}
        assert (await http.post(self.gw.url, json=initialized, headers=headers)).status_code == 202
        return session

    # -- dropping ---------------------------------------------------------------------------------------------

    async def drop(self, drop: Drop, request_id: str) -> None:
        """Send `drop`'s request up to its cut, read its answer up to its cut, then let go."""
        payload = json.dumps(self.body(drop, request_id)).encode()
        lines = ["POST /mcp HTTP/1.1", f"host: 127.0.0.1:{self.gw.port}", f"content-length: {len(payload)}"]
        lines += [f"{name}: {value}" for name, value in self.headers(drop).items()]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode()
        stream = await anyio.connect_tcp("127.0.0.1", self.gw.port)
        try:
            if drop.where == "request-headers":
                await stream.send(head[: max(1, int(drop.fraction * (len(head) - 1)))])
            elif drop.where == "request-body":
                await stream.send(head + payload[: int(drop.fraction * (len(payload) - 1))])
            else:
                await stream.send(head + payload)
                if drop.where != "request-sent":
                    await read_answer(stream, None if drop.where == "answer-headers" else int(drop.fraction * 600))
        finally:
            if drop.reset:  # an RST rather than a FIN: what a killed client or a dropped network leaves
                raw = stream.extra(SocketAttribute.raw_socket)
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            await stream.aclose()

    # -- checks -----------------------------------------------------------------------------------------------

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.gw.popen.pid}/fd"))

    async def check(self, dropped: list[tuple[Drop, str]]) -> None:
        assert self.gw.popen.poll() is None, f"the gateway ended\n{self.gw.stderr_tail()}"
        async with httpx2.AsyncClient(timeout=SETTLE_S) as http:
            modern = await self.post(http, Drop("modern", "echo", False, "", 0, False), targets.next_id("m"))
            assert "result" in answer_of(modern), (modern.status_code, modern.text[:300])
            in_session = await self.post(http, Drop("session", "echo", False, "", 0, False), targets.next_id("s"))
            assert "result" in answer_of(in_session), (in_session.status_code, in_session.text[:300])
            fresh = await self.open_session(http)
            ended = await http.delete(self.gw.url, headers={"mcp-session-id": fresh, "mcp-protocol-version": HANDSHAKE})
            assert ended.status_code in (200, 204), ended.status_code

            async def accepted(drop: Drop, request_id: str) -> bool:
                """The dropped request's id, reused in its session once that call ended, is served again."""
                reply = await self.post(http, Drop(drop.kind, "echo", False, "", 0, False), request_id)
                if reply.status_code == 400:  # -32600: that call is still in flight (a `hang` waits 1.5 s)
                    return False
                assert "result" in answer_of(reply), (reply.status_code, reply.text[:300])
                return True

            for drop, request_id in dropped:
                if drop.kind == "session":
                    await until(lambda d=drop, r=request_id: accepted(d, r), f"id {request_id} free again")

        async def no_open_calls() -> bool:
            return not targets.open_calls(self.folder / "audit.db")

        async def fds_settled() -> bool:
            return self.open_fds() <= self.baseline_fds + FD_SLACK

        await until(no_open_calls, "every call closed in the audit trail")
        await until(fds_settled, "descriptors back to their first count")


async def read_answer(stream: anyio.abc.SocketStream, body_bytes: int | None) -> None:
    """Read the answer until its headers are in (`body_bytes` None) or that many bytes of its body are, or it
    ended: the gateway keeps the connection open after a whole answer."""
    got = b""
    while True:
        head, _, body = got.partition(b"\r\n\r\n")
        if _ and (body_bytes is None or len(body) >= body_bytes or answer_complete(head, body)):
            return
        try:
            got += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            return


def answer_complete(head: bytes, body: bytes) -> bool:
    for line in head.lower().split(b"\r\n"):
        if line.startswith(b"content-length:"):
            return len(body) >= int(line.split(b":", 1)[1])
    return body.endswith(b"0\r\n\r\n")


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    with tempfile.TemporaryDirectory() as folder:
        harness = Harness(Path(folder))
        try:

            async def start() -> None:
                with anyio.fail_after(SETTLE_S):
                    async with httpx2.AsyncClient(timeout=SETTLE_S) as http:
                        harness.session = await harness.open_session(http)
                    harness.baseline_fds = 10_000
                    await harness.check([])
                    harness.baseline_fds = harness.open_fds()

            anyio.run(start)
            yield harness
        finally:
            harness.gw.close()


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(cuts=st.lists(calls | initializes, min_size=1, max_size=3))
@example(
    cuts=[
        Drop("modern", "echo", False, "request-body", 0.5, False),
        Drop("initialize", "", False, "request-body", 0.9, True),
    ]
)
@example(
    cuts=[
        Drop("session", "hang", False, "request-sent", 0, True),
        Drop("session", "progress", True, "answer-stream", 0.3, False),
    ]
)
@example(
    cuts=[
        Drop("modern", "progress", True, "answer-headers", 0, True),
        Drop("session", "echo", False, "request-headers", 0.5, False),
    ]
)
def test_clients_dropping_anywhere_in_an_http_exchange_leave_nothing_behind(harness: Harness, cuts: list[Drop]) -> None:
    harness.examples += 1

    async def example() -> None:
        dropped = [(drop, targets.next_id("drop")) for drop in cuts]
        with anyio.fail_after(SETTLE_S * 2):
            async with anyio.create_task_group() as tg:
                for drop, request_id in dropped:
                    tg.start_soon(harness.drop, drop, request_id)
            await harness.check(dropped)

    anyio.run(example)


def test_after_the_drops_the_gateway_stops_cleanly_and_its_trail_verifies(harness: Harness) -> None:
    assert harness.examples, "runs after the property test, on the same gateway"
    harness.gw.close()
    stderr = (harness.folder / "http.stderr").read_text(errors="replace")
    assert "Traceback" not in stderr, stderr[-3000:]
    assert "Task was destroyed" not in stderr and "never retrieved" not in stderr, stderr[-3000:]
    code, report = targets.audit_verify(harness.folder / "audit.db")
    assert code == 0, report
    assert "open calls" not in report, report
