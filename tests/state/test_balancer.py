"""Replicas behind a real load balancer (HAProxy from the Debian package, on loopback): round-robin for
2026-07-28 requests, sticky on `Mcp-Session-Id` for handshake-era sessions, a readiness check on `/healthz`.
With Redis shared state the verdicts do not depend on the replica a request lands on; a replica killed with
SIGKILL and started again loses no call the balancer could send elsewhere."""

from __future__ import annotations

import os
import shutil
import signal
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from guard_support import E2E_TIMEOUT_S, gateway_config, upstream
from helpers import child_env, cli_argv, free_tcp_port, running
from mcp import Client, MCPError

pytestmark = [pytest.mark.anyio, pytest.mark.e2e, pytest.mark.redis]

SECRET = "AKIAQYLPMN5HHHFPZAM2"  # what guards_upstream.py's read_secret returns

HAPROXY = """\
global
    maxconn 512
defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    retries 3
    option redispatch
frontend mcp
    bind 127.0.0.1:{port}
    default_backend replicas
backend replicas
    balance roundrobin
    option httpchk GET /healthz
    http-check expect status 200
    stick-table type string len 64 size 100k expire 30m
    stick store-response res.hdr(mcp-session-id)
    stick match req.hdr(mcp-session-id)
{servers}
"""


def haproxy_binary() -> str:
    binary = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None)
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("haproxy is not installed (apt-get install haproxy)")
        pytest.skip("haproxy is not installed (apt-get install -y haproxy)")
    return binary


@asynccontextmanager
async def balanced(tmp_path: Path, config: dict[str, Any], count: int = 2) -> AsyncIterator[tuple[str, list[Any]]]:
    """`count` replicas behind HAProxy; the balancer's MCP URL and the replicas' `running` children."""
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    ports = [free_tcp_port() for _ in range(count)]
    lb_port = free_tcp_port()
    servers = "\n".join(
        f"    server r{i} 127.0.0.1:{port} check inter 300ms fall 2 rise 1" for i, port in enumerate(ports)
    )
    (tmp_path / "haproxy.cfg").write_text(HAPROXY.format(port=lb_port, servers=servers))
    children: list[Any] = []
    async with running([haproxy_binary(), "-db", "-f", str(tmp_path / "haproxy.cfg")], port=lb_port, label="haproxy"):
        try:
            for index, port in enumerate(ports):
                argv = cli_argv("gateway", "--config", str(path), "--http", f"127.0.0.1:{port}")
                context = running(argv, port=port, env=child_env(), label=f"replica {index}")
                children.append((context, await context.__aenter__(), argv, port))
            yield f"http://127.0.0.1:{lb_port}/mcp", children
        finally:
            for context, _, _, _ in reversed(children):
                await context.__aexit__(None, None, None)


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
        async with balanced(tmp_path, config) as (url, children):
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
            _, child, argv, port = children[0]
            os.killpg(child.popen.pid, signal.SIGKILL)
            child.popen.wait()
            async with Client(url, mode="2026-07-28") as after:
                for _ in range(4):
                    assert text_of(await after.call_tool("b__echo", {"text": "still"})) == "still"
            async with (
                running(argv, port=port, env=child_env(), label="replica 0 again"),
                Client(url, mode="2026-07-28") as back,
            ):
                for _ in range(4):
                    assert text_of(await back.call_tool("b__echo", {"text": "back"})) == "back"
