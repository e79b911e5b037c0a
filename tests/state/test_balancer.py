"""Replicas behind a real load balancer (HAProxy from the Debian package, on loopback): round-robin for
2026-07-28 requests, sticky on `Mcp-Session-Id` for handshake-era sessions, a readiness check on `/healthz`.
With Redis shared state the verdicts do not depend on the replica a request lands on; a replica killed with
SIGKILL and started again loses no call the balancer could send elsewhere."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from balancer_support import balanced
from guard_support import E2E_TIMEOUT_S, gateway_config, upstream
from mcp import Client, MCPError

pytestmark = [pytest.mark.anyio, pytest.mark.e2e, pytest.mark.redis]

SECRET = "AKIAQYLPMN5HHHFPZAM2"  # what guards_upstream.py's read_secret returns


def text_of(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def test_replicas_behind_haproxy_share_verdicts_and_survive_a_sigkill(tmp_path: Path, redis_url: str) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    rule = {"limit": "3/minute", "per": ["session"], "tool": "a__echo"}
    limits = {"limits": [rule], "redis_url": redis_url, "key_prefix": prefix}
    config = gateway_config(
        [{"name": "exfiltration-guard"}, {"name": "rate-limit", "config": limits}],
        upstreams={"a": upstream("server-a"), "b": upstream("server-b")},
        state={"redis_url": redis_url, "key_prefix": prefix, "request_state_keys": ["k" * 40]},
    )
    with anyio.fail_after(4 * E2E_TIMEOUT_S):
        async with balanced(tmp_path, [config, config]) as (url, children):
            async with Client(url, mode="2026-07-28") as modern:
                # Round-robin: the read and the send go to different replicas, one after the other.
                assert SECRET in text_of(await modern.call_tool("a__read_secret", {}))
                for _ in range(2):
                    with pytest.raises(MCPError) as refused:
                        await modern.call_tool("b__post", {"text": f"found {SECRET}"})
                    assert refused.value.error.data["interceptor"] == "exfiltration-guard"
                # Three calls fit the limit, whichever replica takes each; the fourth is refused.
                for _ in range(3):
                    assert text_of(await modern.call_tool("a__echo", {"text": "hi"})) == "hi"
                with pytest.raises(MCPError) as limited:
                    await modern.call_tool("a__echo", {"text": "hi"})
                assert limited.value.error.data["interceptor"] == "rate-limit"

            # Handshake era: sticky on the session id, so every request reaches the replica that owns it.
            async with Client(url, mode="legacy") as legacy:
                for _ in range(4):
                    assert text_of(await legacy.call_tool("b__echo", {"text": "sticky"})) == "sticky"

            # SIGKILL one replica: the balancer sends everything to the other (connect failures redispatched).
            children[0].kill()
            await children[0].stop()
            async with Client(url, mode="2026-07-28") as after:
                for _ in range(4):
                    assert text_of(await after.call_tool("b__echo", {"text": "still"})) == "still"
            await children[0].start("replica 0 again")
            async with Client(url, mode="2026-07-28") as back:
                for _ in range(4):
                    assert text_of(await back.call_tool("b__echo", {"text": "back"})) == "back"
