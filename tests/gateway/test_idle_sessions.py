"""Handshake-era sessions: idle ones are closed on time, however short `http.session_idle_s` is, and at
most `http.max_sessions` are open at once; a session's HTTP requests in flight are counted per session."""

from __future__ import annotations

import time

import anyio
import pytest
from mcp import MCPError

from mcp_interceptors import Chain
from mcp_interceptors.gateway.config import parse_config
from mcp_interceptors.gateway.gateway import Gateway
from mcp_interceptors.gateway.session import DownstreamSession
from mcp_interceptors.gateway.sessions import session_key
from mcp_interceptors.gateway.upstream.connection import UpstreamConnection
from mcp_interceptors.protocol.invoke import Principal

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def sweep_until_one_closes(gateway: Gateway, idle_s: float) -> None:
    """Run the gateway's idle sweep until it closes a session."""
    closed = anyio.Event()
    close_session = gateway.sessions.close

    def closing(key: str, **options: str) -> None:
        close_session(key, **options)
        closed.set()

    gateway.sessions.close = closing  # type: ignore[method-assign]
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(gateway.sessions.sweep_idle, idle_s)
            await closed.wait()
            tg.cancel_scope.cancel()


async def test_an_idle_session_closes_within_a_quarter_of_its_idle_time(monkeypatch: pytest.MonkeyPatch) -> None:
    config = parse_config(
        {"upstreams": {"a": {"command": "python", "args": ["server.py"]}}, "http": {"session_idle_s": 0.4}}
    )
    gateway = Gateway(config, Chain(role="server"))
    idle = DownstreamSession(key="idle", era="legacy", last_used=time.monotonic() - 1.0)
    busy = DownstreamSession(key="busy", era="legacy", last_used=time.monotonic() + 60.0)
    gateway.sessions.by_key.update({"idle": idle, "busy": busy})
    sleep = anyio.sleep
    waits: list[float] = []

    async def timed_sleep(delay: float) -> None:
        waits.append(delay)
        await sleep(delay)

    monkeypatch.setattr(anyio, "sleep", timed_sleep)
    await sweep_until_one_closes(gateway, config.http.session_idle_s)
    # Swept every 0.1 s, not every minute, and closed by the first sweep (the second had only begun).
    assert waits in ([0.1], [0.1, 0.1])
    assert list(gateway.sessions.by_key) == ["busy"]


def test_a_session_past_max_sessions_is_refused_until_one_closes() -> None:
    """Each HTTP `initialize` opened a session with upstream sessions of its own (a process per stdio
    upstream) with no bound: a client looping on `initialize` could start processes without limit."""
    config = parse_config(
        {"upstreams": {"a": {"command": "python", "args": ["server.py"]}}, "http": {"max_sessions": 2}}
    )
    gateway = Gateway(config, Chain(role="server"))
    first = gateway.sessions.for_request("legacy", "s1", None, None)
    gateway.sessions.for_request("legacy", "s2", None, None)
    assert gateway.sessions.for_request("legacy", "s1", None, None) is first  # an open session is not a new one
    with pytest.raises(MCPError) as caught:
        gateway.sessions.for_request("legacy", "s3", None, None)
    assert caught.value.code == -32603
    assert caught.value.message == "the gateway serves at most 2 sessions; end one (or wait for an idle one to close)"
    assert caught.value.data == {"reason": "too_many_sessions", "limit": 2, "setting": "http.max_sessions"}
    assert set(gateway.sessions.by_key) == {"s1", "s2"}
    gateway.sessions.for_request(
        "2026-07-28", None, None, None
    )  # 2026-07-28 clients have no session of their own to open
    gateway.sessions.close("s1")
    assert gateway.sessions.for_request("legacy", "s3", None, None).key == "s3"


def test_http_requests_in_flight_count_per_session_and_2026_requests_per_principal() -> None:
    config = parse_config(
        {"upstreams": {"a": {"command": "python", "args": ["server.py"]}}, "http": {"max_requests_in_flight": 1}}
    )
    gateway = Gateway(config, Chain(role="server"))
    alice, bob = Principal(type="user", id="alice"), Principal(type="user", id="bob")
    keys = [
        session_key("legacy", "s1", None),
        session_key("legacy", "s2", None),
        session_key("2026-07-28", None, alice),
        session_key("2026-07-28", None, bob),
        session_key("2026-07-28", None, None),
    ]
    assert len(set(keys)) == len(keys)
    assert session_key("2026-07-28", None, Principal(type="user", id="alice")) == keys[2]  # a new request, same caller
    for key in keys:
        gateway.sessions.claim_request_slot(key)  # one each: the sessions do not share a budget
    with pytest.raises(MCPError) as caught:
        gateway.sessions.claim_request_slot(keys[2])
    assert (caught.value.code, caught.value.data) == (
        -32603,
        {"reason": "too_many_requests_in_flight", "limit": 1, "setting": "http.max_requests_in_flight"},
    )


def test_a_session_at_its_request_cap_is_logged_once_each_time_it_reaches_it(caplog: pytest.LogCaptureFixture) -> None:
    config = parse_config(
        {"upstreams": {"a": {"command": "python", "args": ["server.py"]}}, "http": {"max_requests_in_flight": 1}}
    )
    gateway = Gateway(config, Chain(role="server"))
    key = session_key("legacy", "s1", None)

    def refusals(count: int) -> None:
        for _ in range(count):
            with pytest.raises(MCPError):
                gateway.sessions.claim_request_slot(key)

    with caplog.at_level("WARNING", logger="mcp_interceptors.gateway.sessions"):
        gateway.sessions.claim_request_slot(key)
        refusals(50)  # a client retrying in a loop
        gateway.sessions.release_request_slot(key)
        gateway.sessions.claim_request_slot(key)  # under the cap again, then at it again
        refusals(3)
    warnings = [r.getMessage() for r in caplog.records if "http.max_requests_in_flight" in r.getMessage()]
    assert warnings == ["refusing requests of session s1: 1 requests in flight (http.max_requests_in_flight)"] * 2


async def test_calls_on_a_closed_session_are_told_why_it_closed() -> None:
    """A session's upstream sessions closed because the client ended it, or it was idle, said "(shutting down)",
    in the call's error and so in its audit record."""
    config = parse_config(
        {"upstreams": {"a": {"command": "python", "args": ["server.py"]}}, "http": {"session_idle_s": 0.4}}
    )
    gateway = Gateway(config, Chain(role="server"))
    conns = {}
    for key in ("deleted", "idle", "open"):
        session = DownstreamSession(key=key, era="legacy", last_used=time.monotonic() - 1.0)
        conns[key] = session.upstreams["a"] = UpstreamConnection("a", config.upstreams["a"], era="legacy")
        gateway.sessions.by_key[key] = session
    gateway.sessions.by_key["open"].inflight.append(object())  # type: ignore[arg-type]  # not idle: serving a call
    gateway.sessions.close("deleted")
    await sweep_until_one_closes(gateway, config.http.session_idle_s)
    assert list(gateway.sessions.by_key) == ["open"]
    gateway.close_upstreams()
    prefix = "the gateway closed its connection to upstream 'a'"
    assert conns["deleted"].closed_error().message == f"{prefix} (the client's session ended)"
    assert conns["idle"].closed_error().message == f"{prefix} (the client's session was idle for 0.4 s)"
    assert conns["open"].closed_error().message == f"{prefix} (shutting down)"
