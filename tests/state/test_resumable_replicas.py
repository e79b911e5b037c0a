"""Resumable streams across two gateway replicas (the real CLI over Streamable HTTP) sharing a real Redis: the
replica running a call resumes its dropped stream live; once that replica is killed, the other replays from
Redis what it stored, the result included; a call whose answer was never stored ends with a clear error there,
and the session itself stays the first replica's (404 elsewhere)."""

from __future__ import annotations

import os
import signal
import sys
import uuid
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import httpx2
import pytest
import yaml
from guard_support import E2E_TIMEOUT_S
from helpers import child_env, cli_argv, free_tcp_port, running
from resume_support import E2E_UPSTREAM, Session, answer_of, progress_of

pytestmark = [pytest.mark.anyio, pytest.mark.redis, pytest.mark.e2e]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


async def test_a_stream_resumes_on_the_other_replica_once_its_own_is_gone(tmp_path: Path, redis_url: str) -> None:
    config = {
        "upstreams": {"e2e": {"command": sys.executable, "args": [E2E_UPSTREAM]}},
        "state": {"redis_url": redis_url, "key_prefix": f"t{uuid.uuid4().hex[:8]}:"},
        "streams": {"resumable": True},
    }
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    with anyio.fail_after(3 * E2E_TIMEOUT_S):
        async with AsyncExitStack() as stack:
            children, urls = [], []
            for index in range(2):  # replica A, then B
                port = free_tcp_port()
                argv = cli_argv("gateway", "--config", str(path), "--http", f"127.0.0.1:{port}")
                replica = running(argv, port=port, env=child_env(), label=f"replica {index}")
                children.append(await stack.enter_async_context(replica))
                urls.append(f"http://127.0.0.1:{port}/mcp")
            url_a, url_b = urls
            http = await stack.enter_async_context(httpx2.AsyncClient(timeout=30))
            session = Session(http, url_a)
            await session.open()

            short = await session.call_then_drop(1, "slow_countdown", {"steps": 4, "delay": 0.2}, keep=1)
            long = await session.call_then_drop(2, "slow_countdown", {"steps": 100, "delay": 0.2}, keep=1)
            assert progress_of(short) == [1] and progress_of(long) == [1]

            # B holds no such session: what Redis has of the running call, then an error (B cannot follow it).
            response, elsewhere = await session.resume(long[-1].id or "", url_b)
            assert response.status_code == 200, response.text
            progress = progress_of(elsewhere)
            assert progress == list(range(2, 2 + len(progress)))
            ended = answer_of(elsewhere)
            assert ended["id"] == 2 and ended["error"]["code"] == -32603
            assert ended["error"]["data"] == {"reason": "stream_not_resumable"}

            # A runs the short call: its resume follows the call live to the result.
            response, on_a = await session.resume(short[-1].id or "")
            assert response.status_code == 200 and progress_of(on_a) == [2, 3, 4]
            result = answer_of(on_a)
            assert result["id"] == 1 and result["result"]["content"][0]["text"] == "done"

            a = children[0]
            os.killpg(a.pid, signal.SIGKILL)
            a.popen.wait()

            response, on_b = await session.resume(short[-1].id or "", url_b)
            assert response.status_code == 200, response.text
            assert [e.id for e in on_b] == [e.id for e in on_a]  # the same events, the same ids
            assert answer_of(on_b) == result

            # The session was A's: B does not serve its requests.
            ping = {"jsonrpc": "2.0", "id": 3, "method": "ping"}
            moved = await http.post(url_b, json=ping, headers=session.headers())
            assert moved.status_code == 404
