"""Issue 29's multi-replica test: three gateway replicas (the real CLI) behind HAProxy, sharing Redis (guard
state, rate limits, resumable streams) and one PostgreSQL audit store, each replica writing its own segment.

Concurrent 2026-07-28 clients run through the balancer: every replica takes calls, and every verdict is the
same wherever a call lands (echo answered, a secret read through server a refused on its way to server b, a
rate limit's N calls allowed and no more across the replicas). A handshake-era stream dropped mid-call is
resumed through the balancer with no event lost; then, under load, the replica holding it is killed with
SIGKILL, and a resume through the balancer replays the same events from Redis on another replica. The
killed replica starts again. Every call a client got an answer for is in the PostgreSQL audit trail, and
`audit verify` passes over all the segments.
"""

from __future__ import annotations

import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import orjson
import pytest
from balancer_support import Replica, balanced
from guard_support import E2E_TIMEOUT_S, gateway_config, upstream
from helpers import child_env, run_cli
from mcp import Client, MCPError
from resume_support import E2E_UPSTREAM, Session, answer_of, progress_of

from mcp_interceptors.gateway.recording import RECEIPT_META_KEY

pytestmark = [pytest.mark.anyio, pytest.mark.e2e, pytest.mark.redis, pytest.mark.postgres]

SECRET = "AKIAQYLPMN5HHHFPZAM2"  # what guards_upstream.py's read_secret returns
REPLICAS = 3
CLIENTS = 6
ROUNDS = 6
#: The rate limit on `a__add`, counted across all replicas (per hour: the load takes well under one).
ADDS_ALLOWED = 10


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Load:
    """What the clients were told: acknowledged record ids, and the count of each verdict."""

    records: list[str] = field(default_factory=list)
    verdicts: dict[str, int] = field(default_factory=dict)
    lost: int = 0
    reached: anyio.Event = field(default_factory=anyio.Event)
    goal: int | None = None

    def count(self, verdict: str) -> None:
        self.verdicts[verdict] = self.verdicts.get(verdict, 0) + 1

    def acknowledge(self, result: Any, verdict: str) -> None:
        meta = (result.meta or {})[RECEIPT_META_KEY]
        self.records += [record["id"] for record in meta["records"]]
        self.count(verdict)
        if self.goal is not None and len(self.records) >= self.goal:
            self.reached.set()


def text_of(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def refused_by(error: MCPError) -> str:
    data = error.error.data
    return str(data.get("interceptor")) if isinstance(data, dict) else repr(error.error)


async def mixed_client(url: str, load: Load, index: int, rounds: int) -> None:
    """Read the secret through server a, then per round: an echo, a leak to server b, and an `add`."""
    async with Client(url, mode="2026-07-28") as client:
        read = await client.call_tool("a__read_secret", {})
        assert SECRET in text_of(read)
        load.acknowledge(read, "read")
        for n in range(rounds):
            text = f"c{index}-{n}"
            echoed = await client.call_tool("a__echo", {"text": text})
            assert text_of(echoed) == text
            load.acknowledge(echoed, "echo")
            with pytest.raises(MCPError) as leak:
                await client.call_tool("b__post", {"text": f"found {SECRET}"})
            assert refused_by(leak.value) == "exfiltration-guard"
            load.count("leak refused")
            try:
                added = await client.call_tool("a__add", {"a": index, "b": n})
            except MCPError as limited:
                assert refused_by(limited) == "rate-limit"
                load.count("add limited")
            else:
                assert text_of(added) == str(index + n)
                load.acknowledge(added, "add")


async def echo_client(url: str, load: Load, index: int, calls: int) -> None:
    """`calls` echo calls; a call cut off by a killed replica is counted as lost and the client reconnects."""
    n = 0
    while n < calls:
        in_flight = False
        try:
            async with Client(url, mode="2026-07-28") as client:
                while n < calls:
                    text = f"e{index}-{n}"
                    n, in_flight = n + 1, True
                    echoed = await client.call_tool("a__echo", {"text": text})
                    in_flight = False
                    assert text_of(echoed) == text
                    load.acknowledge(echoed, "echo")
        except MCPError as error:
            if isinstance(error.error.data, dict) and "interceptor" in error.error.data:
                raise  # a verdict, not a broken connection
            load.lost += in_flight
        except Exception:  # the replica died under the call (or the connect): nothing was acknowledged
            load.lost += in_flight


async def audit(*args: str) -> tuple[int, str]:
    done = await run_cli("audit", *args, env=child_env(), limit_s=120)
    return done.returncode, done.stdout.decode() + done.stderr.decode()


async def owner_of(session: Session, replicas: list[Replica], http: httpx2.AsyncClient) -> Replica:
    """The replica holding `session`: the one that answers its ping (the others answer 404)."""
    found = []
    for replica in replicas:
        ping = {"jsonrpc": "2.0", "id": 99, "method": "ping"}
        answer = await http.post(replica.url, json=ping, headers=session.headers())
        assert answer.status_code in (200, 404), answer.text
        if answer.status_code == 200:
            found.append(replica)
    assert len(found) == 1, [r.label for r in found]
    return found[0]


async def test_three_replicas_behind_haproxy_share_verdicts_audit_and_streams(
    tmp_path: Path, redis_url: str, postgres_url: str
) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}:"
    rule = {"limit": f"{ADDS_ALLOWED}/hour", "per": ["tool"], "tool": "a__add"}
    limits = {"limits": [rule], "redis_url": redis_url, "key_prefix": prefix}
    keys = [tmp_path / f"replica-{index}" / "audit-key" for index in range(REPLICAS)]
    configs = [
        gateway_config(
            [{"name": "exfiltration-guard"}, {"name": "rate-limit", "config": limits}],
            upstreams={
                "a": upstream("server-a"),
                "b": upstream("server-b"),
                "e": {"command": sys.executable, "args": [E2E_UPSTREAM]},
            },
            state={"redis_url": redis_url, "key_prefix": prefix, "request_state_keys": ["k" * 40]},
            streams={"resumable": True},
            audit={"enabled": True, "store": postgres_url, "key_file": str(key), "receipts": True},
        )
        for key in keys
    ]
    load = Load()
    with anyio.fail_after(8 * E2E_TIMEOUT_S):
        async with balanced(tmp_path, configs) as (url, replicas), httpx2.AsyncClient(timeout=30) as http:
            # Concurrent clients, round-robin over the replicas: the same verdicts wherever a call lands.
            async with anyio.create_task_group() as tg:
                for index in range(CLIENTS):
                    tg.start_soon(mixed_client, url, load, index, ROUNDS)
            assert load.verdicts == {
                "read": CLIENTS,
                "echo": CLIENTS * ROUNDS,
                "leak refused": CLIENTS * ROUNDS,
                "add": ADDS_ALLOWED,
                "add limited": CLIENTS * ROUNDS - ADDS_ALLOWED,
            }

            # A handshake-era stream dropped mid-call, resumed through the balancer (sticky: the call's replica).
            session = Session(http, url)
            await session.open()
            first = await session.call_then_drop(1, "e__slow_countdown", {"steps": 5, "delay": 0.2}, keep=1)
            response, resumed = await session.resume(first[-1].id or "")
            assert response.status_code == 200, response.text
            assert progress_of(first) + progress_of(resumed) == [1, 2, 3, 4, 5]  # no event lost, none twice
            result = answer_of(resumed)
            assert result["id"] == 1 and result["result"]["content"][0]["text"] == "done"

            # Under load, SIGKILL the replica holding that session, then start it again.
            owner = await owner_of(session, replicas, http)
            under_kill = Load(goal=20)

            async def kill_then_restart() -> None:
                await under_kill.reached.wait()
                owner.kill()
                await owner.stop()
                # The balancer sends the resume elsewhere: that replica replays the events from Redis.
                response, replayed = await session.resume(first[-1].id or "")
                assert response.status_code == 200, response.text
                assert [e.id for e in replayed] == [e.id for e in resumed]
                assert answer_of(replayed) == result
                await owner.start(f"{owner.label} again")

            async with anyio.create_task_group() as tg:
                tg.start_soon(kill_then_restart)
                for index in range(CLIENTS):
                    tg.start_soon(echo_client, url, under_kill, index, 20)
            assert under_kill.verdicts == {"echo": CLIENTS * 20 - under_kill.lost}

            after = Load()
            async with anyio.create_task_group() as tg:
                for index in range(CLIENTS):
                    tg.start_soon(echo_client, url, after, index, 3)
            assert after.verdicts == {"echo": CLIENTS * 3} and after.lost == 0

        rc, exported = await audit("export", "--store", postgres_url)
        assert rc == 0, exported[-2000:]
        trust = [arg for key in keys for arg in ("--trust", str(key))]
        rc, report = await audit("verify", "--store", postgres_url, *trust)
        assert rc == 0, report

    lines = [orjson.loads(line) for line in exported.splitlines() if line.startswith("{")]
    stored = {line["id"]: line for line in lines if line["kind"] in ("segment", "decision")}
    acknowledged = load.records + under_kill.records + after.records
    assert [record_id for record_id in acknowledged if record_id not in stored] == []
    # Every replica wrote its own segment, and the restarted one a new one: four, all verified.
    calls = [line for line in stored.values() if line["kind"] == "decision" and line["body"]["event"] == "tools/call"]
    segments = {line["segment_id"] for line in calls}
    assert len(segments) == REPLICAS + 1
    verdict = report.strip().splitlines()[-1]
    assert verdict.startswith(f"OK: {len(stored)} records in {REPLICAS + 1} segments, "), report
    # The PostgreSQL trail holds one deny per refusal a client got, naming the guard that refused it.
    denials = [line["body"] for line in calls if line["body"]["decision"] == "deny"]
    refusers = [{i["name"] for i in d["interceptors"] if i.get("valid") is False} for d in denials]
    assert sorted(map(sorted, refusers)) == sorted(
        [["exfiltration-guard"]] * load.verdicts["leak refused"] + [["rate-limit"]] * load.verdicts["add limited"]
    )
    print(f"three replicas: {len(acknowledged)} acknowledged records, {under_kill.lost} calls cut off; {verdict}")
