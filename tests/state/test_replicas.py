"""Gateway replicas (the real CLI, Streamable HTTP on loopback) sharing a real Redis (`state.redis_url`): a
value read through replica A is refused on its way out through replica B."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from guard_support import E2E_TIMEOUT_S, gateway_config, upstream
from helpers import child_env, cli_argv, free_tcp_port, running
from mcp import Client, MCPError

pytestmark = [pytest.mark.anyio, pytest.mark.redis, pytest.mark.e2e]

SECRET = "AKIAQYLPMN5HHHFPZAM2"  # what guards_upstream.py's read_secret returns


@asynccontextmanager
async def replicas(tmp_path: Path, config: Mapping[str, Any], count: int = 2) -> AsyncIterator[list[str]]:
    """`count` gateways from one config file, each on a port of its own; their URLs."""
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
    async with AsyncExitStack() as stack:
        urls = []
        for index in range(count):
            port = free_tcp_port()
            argv = cli_argv("gateway", "--config", str(path), "--http", f"127.0.0.1:{port}")
            await stack.enter_async_context(running(argv, port=port, env=child_env(), label=f"replica {index}"))
            urls.append(f"http://127.0.0.1:{port}/mcp")
        yield urls


def shared_config(redis_url: str, guards: list[dict[str, Any]]) -> dict[str, Any]:
    upstreams = {"a": upstream("server-a"), "b": upstream("server-b")}
    state = {"redis_url": redis_url, "key_prefix": f"t{uuid.uuid4().hex[:8]}:"}
    return gateway_config(guards, upstreams=upstreams, state=state)


def text_of(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def test_a_secret_read_through_one_replica_is_blocked_leaving_through_another(
    tmp_path: Path, redis_url: str
) -> None:
    config = shared_config(redis_url, [{"name": "exfiltration-guard"}])
    with anyio.fail_after(2 * E2E_TIMEOUT_S):
        async with (
            replicas(tmp_path, config) as (url_a, url_b),
            Client(url_a, mode="2026-07-28") as on_a,
            Client(url_b, mode="2026-07-28") as on_b,
        ):
            assert SECRET in text_of(await on_a.call_tool("a__read_secret", {}))
            with pytest.raises(MCPError) as refused:
                await on_b.call_tool("b__post", {"text": f"found {SECRET}"})
            assert refused.value.error.code == -32602
            assert refused.value.error.data["interceptor"] == "exfiltration-guard"
            assert (
                text_of(await on_b.call_tool("a__post", {"text": f"back: {SECRET}"}))
                == f"posted {len(SECRET) + 6} chars"
            )
            assert text_of(await on_a.call_tool("b__post", {"text": "harmless"})) == "posted 8 chars"
