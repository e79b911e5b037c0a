"""`SessionRequests` (gateway/fronts/http.py): a handshake-era request reusing an id in flight is refused, and an
id is free for the client's next request as soon as its answer is out. Also the HTTP path's per-call shortcuts:
`McpPathFirst`, the tool schemas given to mcp's `Mcp-Param-*` check, the serverInfo stamp made only when needed."""

from __future__ import annotations

from typing import Any

import anyio
import orjson
import pytest
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import SERVER_INFO_META_KEY

from mcp_interceptors import Chain
from mcp_interceptors.gateway.config import parse_config
from mcp_interceptors.gateway.fronts.http import McpPathFirst, SessionRequests
from mcp_interceptors.gateway.gateway import Gateway
from mcp_interceptors.gateway.routing import build_catalog
from mcp_interceptors.gateway.shape import shape_modern

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


async def test_only_an_http_request_for_exactly_the_mcp_path_skips_starlette() -> None:
    """`McpPathFirst` hands the MCP path's requests to its endpoint; the lifespan, other paths and `/mcp/` (which
    Starlette redirects) still go to the Starlette app."""
    seen: list[tuple[str, str]] = []

    def recording(name: str) -> Any:
        async def app(scope: Any, receive: Any, send: Any) -> None:
            seen.append((name, scope.get("path", scope["type"])))

        return app

    front = McpPathFirst(recording("starlette"), "/mcp", recording("endpoint"))  # type: ignore[arg-type]
    scopes: list[dict[str, Any]] = [
        {"type": "http", "path": "/mcp"},
        {"type": "http", "path": "/mcp/"},
        {"type": "http", "path": "/healthz"},
        {"type": "http", "path": "/mcp", "root_path": "/prefix"},
        {"type": "lifespan"},
    ]
    for scope in scopes:
        await front(scope, None, None)
    assert seen == [
        ("endpoint", "/mcp"),
        ("starlette", "/mcp/"),
        ("starlette", "/healthz"),
        ("starlette", "/mcp"),
        ("starlette", "lifespan"),
    ]


def test_a_tool_schema_without_x_mcp_header_is_not_handed_to_mcps_header_check() -> None:
    """mcp walks the schema `get_tool_input_schema` gives on every `tools/call` with arguments; one declaring no
    `x-mcp-header` cannot fail that check, so None (no check) is given instead. A declaring one still is."""
    config = parse_config({"upstreams": {"a": {"command": "python", "args": ["server.py"]}}})
    gateway = Gateway(config, Chain(role="server"))
    plain = {"type": "object", "properties": {"text": {"type": "string"}}}
    declaring = {"type": "object", "properties": {"where": {"anyOf": [{"type": "string", "x-mcp-header": "Where"}]}}}
    tools = [{"name": "echo", "inputSchema": plain}, {"name": "route", "inputSchema": declaring}]
    gateway.listings.startup = build_catalog({"a": {"tools/list": tools}}, {"a": ""})
    assert gateway.mcp_server.tool_input_schema("echo") is None
    assert gateway.mcp_server.tool_input_schema("echo") is None  # remembered: the same answer
    assert gateway.mcp_server.tool_input_schema("route") == declaring
    assert gateway.mcp_server.tool_input_schema("missing") is None


def test_a_2026_result_without_a_server_info_stamp_gets_a_fresh_one_made_only_then() -> None:
    stamps: list[dict[str, Any]] = []

    def stamp() -> dict[str, Any]:
        stamps.append({"name": "gateway"})
        return stamps[-1]

    stamped = {"content": [], "_meta": {SERVER_INFO_META_KEY: {"name": "upstream"}}}
    assert shape_modern("tools/call", stamped, stamp)["_meta"][SERVER_INFO_META_KEY] == {"name": "upstream"}
    assert stamps == []
    shaped = shape_modern("tools/call", {"content": []}, stamp)
    assert shaped["_meta"][SERVER_INFO_META_KEY] == {"name": "gateway"}
    assert stamps == [{"name": "gateway"}]
