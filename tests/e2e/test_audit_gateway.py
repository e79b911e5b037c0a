"""Issue 5's durability claims through the real CLI gateway over HTTP, with receipts on (`audit.receipts`),
each with the records written on the gateway's event loop (`audit.writer: in-process`) and in its writer
process (`audit.writer: process`).

Crash test: concurrent clients call through the gateway, which is killed with SIGKILL mid-run and restarted
on the same store and key; `audit verify` passes and every record id a client saw in a reply's receipt is
in the store. PostgreSQL: two gateway processes write to one database under load, each in its own
segment; `audit verify` over the database passes and covers both.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import orjson
import psutil
import pytest
from e2e_support import ConfigWriter, gateway_env, text_of, upstream_entry
from helpers import Child, cli_argv, free_tcp_port, run_cli, running
from mcp import Client

from mcp_interceptors.gateway.recording import RECEIPT_META_KEY

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

MODES = ("2026-07-28", "legacy")
WRITERS = pytest.mark.parametrize("writer", ["in-process", "process"])


def audit_config(store: str, key_file: str, writer: str = "in-process") -> dict[str, Any]:
    return {
        "upstreams": {"e2e": upstream_entry()},
        "interceptors": {"hosts": [{"module": "e2e_hosts:host"}]},
        "audit": {"enabled": True, "store": store, "key_file": key_file, "receipts": True, "writer": writer},
    }


@asynccontextmanager
async def http_gateway(config: Path, label: str) -> AsyncIterator[tuple[Child, str]]:
    """A gateway process on a free port; the caller may kill it, and the block's end stops what is left."""
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}")
    async with running(argv, port=port, env=gateway_env(), label=label) as child:
        yield child, f"http://127.0.0.1:{port}/mcp"


@dataclass
class Load:
    """What the clients were told: the record ids and compound receipt ids of every acknowledged call."""

    records: list[str] = field(default_factory=list)
    receipts: list[str] = field(default_factory=list)
    calls: int = 0
    broken: int = 0
    reached: anyio.Event = field(default_factory=anyio.Event)
    goal: int | None = None

    def acknowledge(self, meta: dict[str, Any]) -> None:
        records = [record["id"] for record in meta["records"]]
        assert len(records) == 2, meta  # the request record and the response record
        assert meta["receipt"]["request"]["id"] == records[0], meta
        assert meta["receipt"]["response"]["id"] == meta["receipt"]["id"] == records[1], meta
        self.records += records
        self.receipts.append(meta["receipt"]["id"])
        self.calls += 1
        if self.goal is not None and self.calls >= self.goal:
            self.reached.set()


async def drive(url: str, load: Load, *, clients: int, calls: int, tag: str, may_break: bool = False) -> None:
    """`clients` concurrent clients (alternating eras), each making up to `calls` echo calls with distinct text.

    With `may_break`, a client whose gateway dies stops quietly; otherwise every call must succeed.
    """

    async def client_task(index: int) -> None:
        try:
            async with Client(url, mode=MODES[index % 2]) as client:  # type: ignore[arg-type]
                for n in range(calls):
                    text = f"{tag}-{index}-{n}"
                    result = await client.call_tool("echo", {"text": text})
                    assert text_of(result) == text
                    load.acknowledge((result.meta or {})[RECEIPT_META_KEY])
        except Exception:
            # The gateway was killed under this client: whatever shape the broken connection takes,
            # the calls it cut off were never acknowledged. Without a kill, it is a failure.
            if not may_break:
                raise
            load.broken += 1

    async with anyio.create_task_group() as tg:
        for index in range(clients):
            tg.start_soon(client_task, index)


@dataclass
class Stored:
    records: dict[str, dict[str, Any]]
    receipts: set[str]


async def export(*args: str) -> Stored:
    done = await run_cli("audit", "export", *args, env=gateway_env())
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    lines = [orjson.loads(line) for line in done.stdout.splitlines()]
    records = {line["id"]: line for line in lines if line["kind"] in ("segment", "decision")}
    receipts = {line["id"] for line in lines if line["kind"] == "receipt"}
    return Stored(records, receipts)


async def verify(*args: str) -> str:
    done = await run_cli("audit", "verify", *args, env=gateway_env())
    output = done.stdout.decode() + done.stderr.decode()
    assert done.returncode == 0, output
    return output.strip()


def segment_of(record_id: str) -> str:
    return record_id.rsplit("-", 1)[0]


def writer_processes(gateway_pid: int) -> list[psutil.Process]:
    """The gateway's audit writer processes (`python -m mcp_interceptors.audit.process`), among its children."""
    return [
        child
        for child in psutil.Process(gateway_pid).children(recursive=True)
        if "mcp_interceptors.audit.process" in " ".join(child.cmdline())
    ]


def writer_process(gateway_pid: int) -> psutil.Process:
    """The gateway's one audit writer process (`audit.writer: process`); fails if it has none, or more."""
    found = writer_processes(gateway_pid)
    assert len(found) == 1, [child.cmdline() for child in psutil.Process(gateway_pid).children(recursive=True)]
    return found[0]


@WRITERS
async def test_gateway_killed_with_sigkill_mid_run_loses_no_acknowledged_record(
    write_config: ConfigWriter, tmp_path: Path, writer: str
) -> None:
    """With `writer: process`, the kill takes the writer process too (it is in the gateway's process group)."""
    config = write_config(audit_config("audit/audit.db", "audit/audit-key", writer))
    before, after = Load(goal=300), Load()
    with anyio.fail_after(180):
        async with http_gateway(config, "gateway (to be killed)") as (child, url):

            async def kill_mid_run() -> None:
                await before.reached.wait()
                assert len(writer_processes(child.pid)) == (writer == "process")
                os.killpg(child.pid, signal.SIGKILL)  # the gateway and its upstream, with calls in flight

            async with anyio.create_task_group() as tg:
                tg.start_soon(kill_mid_run)
                await drive(url, before, clients=6, calls=10_000, tag="before", may_break=True)
            assert child.popen.wait(30) == -signal.SIGKILL
        assert before.broken == 6  # every client was cut off mid-run: none ran out of calls
        async with http_gateway(config, "gateway (restarted)") as (_, url):
            await drive(url, after, clients=2, calls=10, tag="after")
        stored = await export("--config", str(config))
        report = await verify("--config", str(config))

    acknowledged = before.records + after.records
    assert [record_id for record_id in acknowledged if record_id not in stored.records] == []
    assert [receipt for receipt in before.receipts + after.receipts if receipt not in stored.receipts] == []
    killed_segment, restarted_segment = segment_of(before.records[0]), segment_of(after.records[0])
    assert {segment_of(r) for r in before.records} == {killed_segment}
    assert {segment_of(r) for r in after.records} == {restarted_segment} != {killed_segment}
    # The restarted segment continues the killed one: its header names a record that segment wrote.
    header = stored.records[f"{restarted_segment}-0"]
    assert segment_of(header["body"]["prev_record"]) == killed_segment
    assert header["prev_hash"] == stored.records[header["body"]["prev_record"]]["hash"]
    segments = {line["segment_id"] for line in stored.records.values()}
    assert segments == {killed_segment, restarted_segment}
    *notes, verdict = report.splitlines()
    assert verdict.startswith(f"OK: {len(stored.records)} records in 2 segments, ")
    # Calls in flight at the kill have a request record and nothing closing it: a note, never a finding.
    assert all(note.startswith("note: open calls, with a request record and no record closing them") for note in notes)
    assert before.calls >= 300 and after.calls == 20
    unacknowledged = len(stored.records) - len(acknowledged) - 2  # minus the two segment headers
    print(f"crash test: {before.calls} calls acknowledged before the kill; {unacknowledged} more records stored")
    print(f"crash test: {report}")


@pytest.mark.postgres
@WRITERS
async def test_two_gateway_processes_write_one_postgresql_store_concurrently(
    write_config: ConfigWriter, tmp_path: Path, postgres_url: str, writer: str
) -> None:
    configs = [
        write_config(audit_config(postgres_url, f"replica-{name}/audit-key", writer), f"gateway-{name}.yaml")
        for name in "ab"
    ]
    loads = [Load(), Load()]
    with anyio.fail_after(240):
        async with (
            http_gateway(configs[0], "replica a") as (replica_a, url_a),
            http_gateway(configs[1], "replica b") as (replica_b, url_b),
            anyio.create_task_group() as tg,
        ):
            for replica in (replica_a, replica_b):
                assert len(writer_processes(replica.pid)) == (writer == "process")
            tg.start_soon(lambda: drive(url_a, loads[0], clients=4, calls=60, tag="a"))
            tg.start_soon(lambda: drive(url_b, loads[1], clients=4, calls=60, tag="b"))
        trust = [
            "--trust",
            str(tmp_path / "replica-a" / "audit-key"),
            "--trust",
            str(tmp_path / "replica-b" / "audit-key"),
        ]
        stored = await export("--store", postgres_url)
        report = await verify("--store", postgres_url, *trust)

    segments = [{segment_of(record_id) for record_id in load.records} for load in loads]
    assert [len(s) for s in segments] == [1, 1] and segments[0] != segments[1]
    assert {line["segment_id"] for line in stored.records.values()} == segments[0] | segments[1]
    for load in loads:
        assert load.calls == 240
        assert [record_id for record_id in load.records if record_id not in stored.records] == []
        assert [receipt for receipt in load.receipts if receipt not in stored.receipts] == []
    # Each replica's segment is signed by its own key, and both keys were trusted anchors.
    key_ids = {stored.records[f"{segment}-0"]["key_id"] for part in segments for segment in part}
    assert len(key_ids) == 2
    assert report.startswith(f"OK: {len(stored.records)} records in 2 segments, ")
    assert "note:" not in report  # both keys were given as anchors: no key was trusted on first use
    print(f"two replicas: {report}")
