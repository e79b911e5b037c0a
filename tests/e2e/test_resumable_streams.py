"""Resumable streams (`streams.resumable`) through the real CLI over Streamable HTTP: SSE events carry ids; a
client whose stream of a long call dropped gets, with `Last-Event-ID`, the progress it missed and the result;
an id not kept (unknown, trimmed, another session's) gets HTTP 400; without the setting nothing has an id."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from e2e_support import gateway_env, write_yaml
from helpers import cli_argv, free_tcp_port, running
from resume_support import E2E_UPSTREAM, Session, answer_of, progress_of

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

TIMEOUT_S = 60


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def gateway(folder: Path, streams: dict[str, Any] | None) -> AsyncIterator[str]:
    config: dict[str, Any] = {"upstreams": {"e2e": {"command": sys.executable, "args": [E2E_UPSTREAM]}}}
    if streams is not None:
        config["streams"] = streams
    path = write_yaml(folder / "gateway.yaml", config)
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(path), "--http", f"127.0.0.1:{port}")
    async with running(argv, port=port, env=gateway_env(), label="gateway"):
        yield f"http://127.0.0.1:{port}/mcp"


async def test_a_dropped_call_stream_resumes_with_the_missed_progress_and_the_result(tmp_path: Path) -> None:
    with anyio.fail_after(TIMEOUT_S):
        async with gateway(tmp_path, {"resumable": True}) as url, httpx2.AsyncClient(timeout=30) as http:
            session = Session(http, url)
            await session.open()
            before = await session.call_then_drop(1, "slow_countdown", {"steps": 6, "delay": 0.2}, keep=2)
            assert before[0].message is None and before[0].id  # the priming event: an id to resume from
            assert progress_of(before) == [1, 2]
            assert all(e.id for e in before)

            response, after = await session.resume(before[-1].id or "")
            assert response.status_code == 200, response.text
            assert progress_of(after) == [3, 4, 5, 6]  # each missed one, once, in order
            answer = answer_of(after)
            assert answer["id"] == 1 and answer["result"]["content"][0]["text"] == "done"
            ids = [e.id for e in before + after if e.message is not None]
            assert all(ids) and len(set(ids)) == len(ids)

            # The call is over: a resume from its first event replays all of it, then the stream ends.
            response, again = await session.resume(before[0].id or "")
            assert progress_of(again) == [1, 2, 3, 4, 5, 6] and answer_of(again) == answer

            # Another session cannot resume this one's stream, nor anyone an id never issued.
            other = Session(http, url)
            await other.open()
            for who, event_id in ((other, before[0].id or ""), (session, "0" * 32 + "-1"), (session, "garbage")):
                refused, nothing = await who.resume(event_id)
                assert refused.status_code == 400 and nothing == []
                error = refused.json()["error"]
                assert error["code"] == -32600 and error["data"] == {
                    "field": "Last-Event-ID",
                    "reason": "unknown_event_id",
                }


async def test_a_resume_from_an_event_no_longer_kept_is_refused_not_partial(tmp_path: Path) -> None:
    streams = {"resumable": True, "max_events_per_stream": 3}
    with anyio.fail_after(TIMEOUT_S):
        async with gateway(tmp_path, streams) as url, httpx2.AsyncClient(timeout=30) as http:
            session = Session(http, url)
            await session.open()
            before = await session.call_then_drop(1, "slow_countdown", {"steps": 5, "delay": 0.05}, keep=6)
            assert progress_of(before) == [1, 2, 3, 4, 5] and answer_of(before)["id"] == 1
            refused, _ = await session.resume(before[0].id or "")  # 7 events, 3 kept: the priming one is gone
            assert refused.status_code == 400 and refused.json()["error"]["data"]["reason"] == "unknown_event_id"
            kept, replay = await session.resume(before[-3].id or "")
            assert kept.status_code == 200 and progress_of(replay) == [5] and answer_of(replay)["id"] == 1


async def test_without_resumable_streams_events_carry_no_id(tmp_path: Path) -> None:
    with anyio.fail_after(TIMEOUT_S):
        async with gateway(tmp_path, None) as url, httpx2.AsyncClient(timeout=30) as http:
            session = Session(http, url)
            await session.open()
            got = await session.call_then_drop(1, "slow_countdown", {"steps": 2, "delay": 0}, keep=3)
            assert progress_of(got) == [1, 2] and answer_of(got)["id"] == 1
            assert [e.id for e in got] == [None, None, None]
