"""rate-limit: moving windows per session, principal, server, tool and event, in memory and in a real Redis
(`redis-server` from the Debian package; skipped when missing unless MCPI_REQUIRE_REDIS is set)."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from guard_support import E2E_TIMEOUT_S, gateway_client, gateway_config, messages, run_chain, tool_call
from helpers import free_tcp_port, running
from mcp import MCPError

from mcp_interceptors import ValidationResult, guards
from mcp_interceptors.guards.rate_limit import RateLimitHost
from mcp_interceptors.invoker import chain_error

pytestmark = pytest.mark.anyio


async def statuses(host: object, n: int, payload: object = None, **context: object) -> list[str]:
    out: list[str] = []
    for _ in range(n):
        result = await run_chain(host, "tools/call", "request", payload or tool_call("echo"), **context)  # type: ignore[arg-type]
        out.append(result.status)
    return out


async def test_limit_per_session_denies_over_the_window_and_names_the_scope() -> None:
    host = guards.load("rate-limit", {"limits": [{"limit": "2/minute", "per": ["session"]}]})
    assert await statuses(host, 3, sessionId="a") == ["success", "success", "validation_failed"]
    assert await statuses(host, 2, sessionId="b") == ["success", "success"]  # sessions count apart
    denied = await run_chain(host, "tools/call", "request", tool_call("echo"), sessionId="a")
    [(path, message)] = messages(denied)
    assert path is None and message.startswith("rate limit 2 per 1 minute exceeded for session=a; retry in ")
    result = denied.results[0]
    assert isinstance(result, ValidationResult) and result.info is not None
    assert result.info["limit"] == "2 per 1 minute" and 0 < result.info["retryAfterSeconds"] <= 60
    # The client's error carries the hint, without the details a gateway hides by default.
    error = chain_error(denied)
    assert error.error.data is not None and error.error.data["retryAfterSeconds"] == result.info["retryAfterSeconds"]
    assert "validationErrors" not in error.error.data


async def test_limits_per_tool_principal_and_server_with_filters() -> None:
    host = guards.load(
        "rate-limit",
        {
            "limits": [
                {"limit": "1/minute", "per": ["principal", "tool"], "tool": "delete_*"},
                {"limit": "3/minute", "per": ["server"], "server": "slow"},
            ]
        },
    )
    alice = {"principal": {"type": "user", "id": "alice"}}
    bob = {"principal": {"type": "user", "id": "bob"}}
    assert await statuses(host, 2, tool_call("delete_all"), **alice) == ["success", "validation_failed"]
    assert await statuses(host, 1, tool_call("delete_all"), **bob) == ["success"]
    assert await statuses(host, 1, tool_call("delete_other"), **alice) == ["success"]
    assert await statuses(host, 5, tool_call("echo"), **alice) == ["success"] * 5  # no rule covers echo
    assert await statuses(host, 4, tool_call("echo"), server="slow") == ["success"] * 3 + ["validation_failed"]


async def test_a_tool_glob_also_matches_the_name_after_a_gateway_prefix() -> None:
    """With several upstreams the gateway names tools `<prefix>__<name>`: `tool: echo` counts `notes__echo`
    (as tool-policy's globs do; it counted nothing), each prefixed tool apart; a resource URI is matched as is."""
    rules = [
        {"limit": "2/minute", "per": ["session", "tool"], "tool": "echo"},
        {"limit": "1/minute", "tool": "b", "events": ["resources/read"]},
    ]
    host = guards.load("rate-limit", {"limits": rules})
    assert await statuses(host, 3, tool_call("notes__echo"), sessionId="s", server="notes") == [
        "success",
        "success",
        "validation_failed",
    ]
    assert await statuses(host, 2, tool_call("archive__echo"), sessionId="s") == ["success"] * 2
    assert await statuses(host, 3, tool_call("notes__echo_all"), sessionId="s") == ["success"] * 3
    read = {"method": "resources/read", "params": {"uri": "x://a__b"}}
    outcomes = [await run_chain(host, "resources/read", "request", read, sessionId="s") for _ in range(2)]
    assert [outcome.status for outcome in outcomes] == ["success", "success"]


async def test_several_windows_in_one_rule_and_other_events() -> None:
    host = guards.load("rate-limit", {"limits": [{"limit": "5/minute;2/second", "per": ["event"]}]})
    read = {"method": "resources/read", "params": {"uri": "notes://a"}}
    first = [(await run_chain(host, "resources/read", "request", read)).status for _ in range(3)]
    assert first == ["success", "success", "validation_failed"]


async def test_a_call_refused_by_one_limit_uses_up_no_other_limit() -> None:
    host = guards.load(
        "rate-limit",
        {"limits": [{"limit": "3/minute", "per": ["session"]}, {"limit": "1/minute", "per": ["tool"], "tool": "hot"}]},
    )
    assert await statuses(host, 3, tool_call("hot"), sessionId="a") == ["success"] + ["validation_failed"] * 2
    # the two refused calls counted against neither the tool's limit nor the session's
    assert await statuses(host, 3, tool_call("echo"), sessionId="a") == ["success", "success", "validation_failed"]


@pytest.mark.parametrize("limit", ["0/second", "0/minute;5/hour", "ten/minute"])
def test_a_limit_below_one_call_is_a_config_error(limit: str) -> None:
    with pytest.raises(ValueError, match=r"config.limits\[0\].limit .* is not a rate limit of at least 1 call"):
        guards.load("rate-limit", {"limits": [{"limit": limit}]})


def test_a_rule_event_the_guard_does_not_check_is_a_config_error() -> None:
    # tools/list is not among the default events: the rule would never count, silently.
    with pytest.raises(ValueError, match=r"config.limits\[0\].events\[0\] 'tools/list' is not one of the events"):
        guards.load("rate-limit", {"limits": [{"limit": "5/minute", "events": ["tools/list"]}]})
    guards.load("rate-limit", {"events": ["*"], "limits": [{"limit": "5/minute", "events": ["tools/list"]}]})
    guards.load("rate-limit", {"limits": [{"limit": "5/minute", "events": ["prompts/get"]}]})


@pytest.fixture
async def redis_url() -> AsyncIterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("MCPI_REQUIRE_REDIS"):
            pytest.fail("MCPI_REQUIRE_REDIS is set but redis-server is not installed (apt-get install redis-server)")
        pytest.skip("redis-server is not installed (apt-get install -y redis-server); set MCPI_REQUIRE_REDIS to fail")
    port = free_tcp_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    async with running(argv, port=port, label="redis-server"):
        yield f"redis://127.0.0.1:{port}/0"


@pytest.mark.redis
async def test_redis_storage_shares_windows_between_gateways(redis_url: str) -> None:
    config = {
        "limits": [{"limit": "3/minute", "per": ["session"]}],
        "redis_url": redis_url,
        "key_prefix": uuid.uuid4().hex,
    }
    one, two = guards.load("rate-limit", config), guards.load("rate-limit", config)
    assert isinstance(one, RateLimitHost) and isinstance(two, RateLimitHost)
    try:
        assert await statuses(one, 2, sessionId="s") == ["success", "success"]
        assert await statuses(two, 2, sessionId="s") == ["success", "validation_failed"]
        assert await statuses(two, 1, sessionId="t") == ["success"]
    finally:
        await one.aclose()
        await two.aclose()


@pytest.mark.redis
async def test_stdio_gateways_sharing_a_redis_count_their_clients_apart(tmp_path: Path, redis_url: str) -> None:
    """Each stdio gateway serves one client: a per-session limit in a shared Redis counts each apart (the
    stdio session was `default` in every gateway, so one client's calls used up every other's limit)."""
    limits = [{"limit": "2/minute", "per": ["session"]}]
    config = gateway_config([{"name": "rate-limit", "config": {"limits": limits, "redis_url": redis_url}}])
    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
    with anyio.fail_after(E2E_TIMEOUT_S):
        async with (
            gateway_client(tmp_path / "one", config, mode="legacy") as one,
            gateway_client(tmp_path / "two", config, mode="legacy") as two,
        ):
            for _ in range(2):
                await one.call_tool("echo", {"text": "hi"})
            with pytest.raises(MCPError) as refused:
                await one.call_tool("echo", {"text": "hi"})
            assert refused.value.error.data["interceptor"] == "rate-limit"
            assert (await two.call_tool("echo", {"text": "hi"})).content[0].text == "hi"  # type: ignore[union-attr]


async def test_an_unreachable_redis_fails_closed() -> None:
    port = free_tcp_port()
    host = guards.load("rate-limit", {"redis_url": f"redis://127.0.0.1:{port}/0"})
    assert isinstance(host, RateLimitHost)
    try:
        outcome = await run_chain(host, "tools/call", "request", tool_call("echo"))
    finally:
        await host.aclose()
    assert outcome.status == "validation_failed"
    assert outcome.failures[0].interceptor == "rate-limit" and outcome.failures[0].code == -32603
    assert outcome.failures[0].reason == "state_unavailable"


@pytest.mark.redis
async def test_one_limit_counts_a_call_in_one_round_trip(redis_url: str) -> None:
    """With one limit there is nothing to test first: the hit itself refuses a full window."""
    config = {"limits": [{"limit": "2/minute"}], "redis_url": redis_url, "key_prefix": uuid.uuid4().hex[:8]}
    host = guards.load("rate-limit", config)
    assert isinstance(host, RateLimitHost)
    limiter = host.limiter
    asked: list[str] = []
    for name in ("test", "hit"):
        real = getattr(limiter, name)

        def counting(*args: Any, _real: Any = real, _name: str = name) -> Any:
            asked.append(_name)
            return _real(*args)

        setattr(limiter, name, counting)
    try:
        statuses = [(await run_chain(host, "tools/call", "request", tool_call("echo"))).status for _ in range(4)]
    finally:
        await host.aclose()
    assert statuses == ["success", "success", "validation_failed", "validation_failed"]
    assert asked == ["hit"] * 4
