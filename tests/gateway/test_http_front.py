"""`SessionRequests` (gateway/http_front.py): a handshake-era request reusing an id in flight is refused, and an
id is free for the client's next request as soon as its answer is out."""

from __future__ import annotations

from typing import Any

import anyio
import orjson
import pytest
from mcp.server.transport_security import TransportSecuritySettings

from mcp_interceptors import Chain
from mcp_interceptors.gateway.config import parse_config
from mcp_interceptors.gateway.http_front import SessionRequests
from mcp_interceptors.gateway.server import Gateway

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def guarding(app: Any) -> SessionRequests:
    config = parse_config({"upstreams": {"a": {"command": "python", "args": ["server.py"]}}})
    return SessionRequests(app, Gateway(config, Chain(role="server")), TransportSecuritySettings())


class SlowToFinish:
    """An ASGI app that answers each POST at once, then takes until `finish` is set to return (mcp closing
    the request's stream after its last bytes went out)."""

    def __init__(self) -> None:
        self.finish = anyio.Event()
        self.served: list[Any] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        self.served.append(orjson.loads(message["body"])["id"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"answer", "more_body": False})
        await self.finish.wait()


async def post(guard: SessionRequests, request_id: Any, *headers: tuple[bytes, bytes]) -> list[Any]:
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": [(b"mcp-session-id", b"s1"), *headers]}
    body = orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {}})
    sent: list[Any] = []

    async def receive() -> Any:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    await guard(scope, receive, send)
    return sent


async def test_an_answered_requests_id_may_be_used_again_while_mcp_finishes_with_it() -> None:
    """The client has the answer and sends its next request with the same id: it was refused (-32600) when it
    came before mcp had returned from the first, a race a client cannot see."""
    app = SlowToFinish()
    guard = guarding(app)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(post, guard, 7)
            while not app.served:
                await anyio.lowlevel.checkpoint()
            tg.start_soon(post, guard, 7)  # the answer to the first is out: this one waits, it is not refused
            for _ in range(10):
                await anyio.lowlevel.checkpoint()
            assert app.served == [7]
            app.finish.set()
    assert app.served == [7, 7]


def holding_app(answered: anyio.Event, served: list[Any]) -> Any:
    """An ASGI app that notes each request's JSON-RPC id in `served` and answers once `answered` is set."""

    async def holding(scope: Any, receive: Any, send: Any) -> None:
        served.append(orjson.loads((await receive())["body"])["id"])
        await answered.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"answer", "more_body": False})

    return holding


async def test_a_request_reusing_an_unanswered_id_is_refused() -> None:
    answered = anyio.Event()
    guard = guarding(holding_app(answered, []))
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(post, guard, 7)
            await anyio.wait_all_tasks_blocked()
            refused = await post(guard, "7")  # 7 and "7" are one id to mcp
            answered.set()
    assert refused[0]["status"] == 400
    assert orjson.loads(refused[1]["body"])["error"] == {
        "code": -32600,
        "message": "Invalid Request: id already in use by a request in flight",
        "data": {"field": "id"},
    }


async def test_a_2026_request_carrying_a_session_header_is_not_checked_against_that_sessions_ids() -> None:
    """mcp serves a 2026-07-28 request apart from any handshake-era session, whatever `Mcp-Session-Id` it
    carries: it was refused -32600 when its id matched one of that session's requests in flight."""
    answered = anyio.Event()
    served: list[Any] = []
    guard = guarding(holding_app(answered, served))
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(post, guard, 7)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(post, guard, 7, (b"mcp-protocol-version", b"2026-07-28"))
            await anyio.wait_all_tasks_blocked()
            answered.set()
    assert served == [7, 7]
