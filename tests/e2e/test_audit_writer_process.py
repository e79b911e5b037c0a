"""The gateway's audit writer process (`audit.writer: process`) through the real CLI gateway over HTTP.

Allowed and denied calls are recorded and verify; killing the writer process fails every later audited call
closed (-32603, `audit_write_failed`) while the gateway keeps answering; SIGINT flushes what is queued; and a
payload orjson cannot write (an integer past 64 bits) is canonicalised on the gateway and still recorded,
with the intent hash an in-process writer records.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from e2e_support import ConfigWriter, fresh_gateway, text_of, upstream_entry
from helpers import until
from mcp import Client, MCPError
from test_audit_gateway import Load, drive, export, http_gateway, verify, writer_process, writer_processes

import mcp_interceptors
from mcp_interceptors.gateway.recording import RECEIPT_META_KEY

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

#: A value orjson refuses to write (past 64 bits) that canonical JSON still has a form for (a double).
BIG = 2**70


def config_for(tmp_path: Path, writer: str = "process", name: str = "audit") -> dict[str, Any]:
    return {
        "upstreams": {"e2e": upstream_entry()},
        "interceptors": {"hosts": [{"module": "e2e_hosts:host"}]},  # denies `delete_everything`
        "audit": {
            "enabled": True,
            "store": str(tmp_path / name / "audit.db"),
            "key_file": str(tmp_path / "audit-key"),
            "receipts": True,
            "writer": writer,
        },
    }


def assert_runs_our_code(gateway_pid: int) -> psutil.Process:
    """The gateway has its writer process, and both run the source tree these tests import: the gateway
    puts its own source folder first on the writer's PYTHONPATH."""
    writer = writer_process(gateway_pid)
    assert "--receipts" in writer.cmdline()
    source = str(Path(mcp_interceptors.__file__).resolve().parents[1])
    assert writer.environ()["PYTHONPATH"].split(os.pathsep)[0] == source
    return writer


def tool_calls(stored: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The tools/call decision records' bodies, in storage order."""
    bodies = [record["body"] for record in stored.values() if record["kind"] == "decision"]
    return [body for body in bodies if body.get("event") == "tools/call"]


async def test_allowed_and_denied_calls_are_recorded_by_the_writer_process_and_verify(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    config = write_config(config_for(tmp_path))
    with anyio.fail_after(90):
        async with http_gateway(config, "gateway") as (child, url):
            assert_runs_our_code(child.pid)
            async with Client(url) as client:
                allowed = await client.call_tool("echo", {"text": "allowed"})
                with pytest.raises(MCPError) as denied:
                    await client.call_tool("delete_everything", {})
        stored = await export("--config", str(config))
        report = await verify("--config", str(config))

    assert text_of(allowed) == "allowed"
    assert denied.value.code == -32602, denied.value
    calls = tool_calls(stored.records)
    assert [(r["phase"], r["decision"], r["status"]) for r in calls] == [
        ("request", "allow", "success"),
        ("response", "allow", "success"),
        ("request", "deny", "validation_failed"),
    ]
    assert calls[0]["call_id"] == calls[1]["call_id"] != calls[2]["call_id"]
    assert "deny-tools" in [entry["name"] for entry in calls[2]["interceptors"]], calls[2]
    # What the reply's receipt names is what the writer process committed.
    meta = (allowed.meta or {})[RECEIPT_META_KEY]
    ids = [record["id"] for record in meta["records"]]
    assert [stored.records[i]["body"]["phase"] for i in ids] == ["request", "response"]
    assert [stored.records[i]["hash"] for i in ids] == [record["hash"] for record in meta["records"]]
    assert meta["receipt"]["id"] in stored.receipts
    assert report.splitlines()[-1].startswith(f"OK: {len(stored.records)} records in 1 segments, "), report
    assert "note:" not in report  # every call was closed


async def test_a_killed_writer_process_fails_calls_closed_until_the_gateway_starts_a_new_one(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    config = write_config(config_for(tmp_path))
    with anyio.fail_after(90):
        async with http_gateway(config, "gateway") as (child, url), Client(url) as client:
            before = await client.call_tool("echo", {"text": "before"})
            writer = assert_runs_our_code(child.pid)
            writer.send_signal(signal.SIGKILL)
            await anyio.to_thread.run_sync(writer.wait, 30)  # not our child: psutil polls until it is gone
            assert not writer.is_running()
            failures = []
            for text in ("after-1", "after-2"):
                with pytest.raises(MCPError) as failed:
                    await client.call_tool("echo", {"text": text})
                failures.append(failed.value)
            # The gateway still serves: a new session's handshake is answered (it is not audited).
            async with Client(url, mode="legacy") as other:
                assert other.server_info is not None
            assert child.popen.poll() is None
            # A second later the gateway has started a new writer process, and audited calls go through again.
            await until(lambda: bool(writer_processes(child.pid)))
            assert [process.pid for process in writer_processes(child.pid)] != [writer.pid]
            while True:  # the new process may still be opening its segment: until then, calls fail closed
                try:
                    after = await client.call_tool("echo", {"text": "after-restart"})
                    break
                except MCPError as exc:
                    failures.append(exc)
                    await anyio.sleep(0.1)
        stored = await export("--config", str(config))
        report = await verify("--config", str(config))

    assert (text_of(before), text_of(after)) == ("before", "after-restart")
    # The calls before the kill and after the restart are in the store, in two segments that the chain links
    # (the new one continues where the killed process stopped); nothing of the failed calls was written.
    calls = tool_calls(stored.records)
    assert [(r["phase"], r["decision"]) for r in calls] == [("request", "allow"), ("response", "allow")] * 2
    assert report.splitlines()[-1].startswith(f"OK: {len(stored.records)} records in 2 segments, "), report
    for failure in failures:
        assert failure.code == -32603, failure
        assert isinstance(failure.data, dict), failure
        assert failure.data.get("reason") == "audit_write_failed", (failure.message, failure.data)
        assert (failure.data["event"], failure.data["phase"]) == ("tools/call", "request"), failure.data


async def test_sigint_flushes_every_queued_record_and_stops_the_writer_process(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    """Clients call concurrently; SIGINT reaches the gateway mid-run. The gateway drains the calls in flight
    and flushes their records: every call with a request record has the record that closes it."""
    config = write_config(config_for(tmp_path))
    load = Load(goal=60)
    with anyio.fail_after(120):
        async with http_gateway(config, "gateway") as (child, url):
            writer = assert_runs_our_code(child.pid)

            async def interrupt_mid_run() -> None:
                await load.reached.wait()
                os.kill(child.pid, signal.SIGINT)

            async with anyio.create_task_group() as tg:
                tg.start_soon(interrupt_mid_run)
                await drive(url, load, clients=4, calls=10_000, tag="flush", may_break=True)
            assert await anyio.to_thread.run_sync(child.popen.wait, 30) == 0, child.stderr_tail()
            await anyio.to_thread.run_sync(writer.wait, 10)  # gone with the gateway (reaped by it, not us)
            assert not writer.is_running()
        stored = await export("--config", str(config))
        report = await verify("--config", str(config))

    assert load.broken == 4  # every client was still calling when the gateway stopped
    assert [record_id for record_id in load.records if record_id not in stored.records] == []
    assert [receipt for receipt in load.receipts if receipt not in stored.receipts] == []
    calls = tool_calls(stored.records)
    requests = {r["call_id"]: (r["decision"], r["status"]) for r in calls if r["phase"] == "request"}
    opened = [call_id for call_id, (decision, _) in requests.items() if decision == "allow"]
    closed = [r["call_id"] for r in calls if r["phase"] == "response"]
    assert len(requests) >= load.calls >= 60
    assert sorted(opened) == sorted(closed), "calls with a request record and no response record"
    # A call that arrives once the upstreams are closed is refused before dispatch: its request record closes it.
    refused = {outcome for call_id, outcome in requests.items() if call_id not in opened}
    assert refused <= {("error", "upstream_error")}, refused
    assert report.splitlines()[-1].startswith(f"OK: {len(stored.records)} records in 1 segments, "), report
    assert "note:" not in report
    print(f"flush test: {load.calls} calls acknowledged, {len(requests)} recorded; {report}")


def stdio_gateway_of(config: Path) -> psutil.Process:
    """The stdio gateway a client of ours spawned for `config` (found by its command line)."""
    found = [
        process
        for process in psutil.Process().children(recursive=True)
        if "gateway" in process.cmdline() and str(config) in process.cmdline()
    ]
    assert len(found) == 1, [process.cmdline() for process in psutil.Process().children(recursive=True)]
    return found[0]


@pytest.mark.parametrize("writer", ["in-process", "process"])
async def test_sigint_with_calls_upstream_flushes_the_records_that_close_them(
    write_config: ConfigWriter, tmp_path: Path, writer: str
) -> None:
    """A stdio gateway stops at once on SIGINT: the calls still upstream are cancelled, and each gets a
    `cancelled` record nobody waits for. Stopping flushes them, so no call is left open in the trail."""
    config = write_config(config_for(tmp_path, writer))
    tokens = [f"held-{n}" for n in range(6)]
    outcomes: dict[str, BaseException | str] = {}
    with anyio.fail_after(90):
        async with fresh_gateway("stdio", config, "legacy") as client:
            gateway = stdio_gateway_of(config)
            if writer == "process":
                assert_runs_our_code(gateway.pid)

            async def hold(token: str) -> None:
                try:
                    outcomes[token] = text_of(await client.call_tool("sleep", {"seconds": 60, "token": token}))
                except Exception as exc:  # the gateway stopped under it: the call was never answered with a result
                    outcomes[token] = exc

            async with anyio.create_task_group() as tg:
                for token in tokens:
                    tg.start_soon(hold, token)
                for token in tokens:  # each sleep is running upstream, its request record long submitted
                    assert text_of(await client.call_tool("wait_started", {"token": token})) == "started"
                gateway.send_signal(signal.SIGINT)
                await anyio.to_thread.run_sync(gateway.wait, 30)  # (its exit status goes to whoever reaps it)
                assert not gateway.is_running()
        stored = await export("--config", str(config))
        report = await verify("--config", str(config))

    assert sorted(outcomes) == tokens and not any(isinstance(o, str) for o in outcomes.values()), outcomes
    calls = tool_calls(stored.records)
    opened = [r["call_id"] for r in calls if r["phase"] == "request" and r["decision"] == "allow"]
    closing = {r["call_id"]: (r["decision"], r["status"]) for r in calls if r["phase"] == "response"}
    assert len(opened) == 2 * len(tokens), calls  # the sleeps and the wait_started calls
    assert [call_id for call_id in opened if call_id not in closing] == [], report
    assert sorted(closing.values()).count(("error", "cancelled")) == len(tokens), closing
    assert report.splitlines()[-1].startswith(f"OK: {len(stored.records)} records in 1 segments, "), report
    assert "note:" not in report, report


async def test_an_integer_past_64_bits_is_canonicalised_on_the_gateway_and_recorded(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    """orjson cannot write 2**70, so the gateway sends that record prepared; its intent hash is the one the
    in-process writer records for the same call."""
    intent_hashes = {}
    for writer in ("process", "in-process"):
        config = write_config(config_for(tmp_path, writer, name=writer), f"{writer}.yaml")
        with anyio.fail_after(90):
            async with http_gateway(config, f"{writer} gateway") as (child, url):
                if writer == "process":
                    assert_runs_our_code(child.pid)
                async with Client(url) as client:
                    result = await client.call_tool("echo", {"text": "big", "big": BIG})
                    after = await client.call_tool("echo", {"text": "after"})
            stored = await export("--config", str(config))
            report = await verify("--config", str(config))
        assert text_of(result) == "big" and text_of(after) == "after"
        calls = tool_calls(stored.records)
        assert [(r["phase"], r["decision"], r["status"]) for r in calls] == [
            ("request", "allow", "success"),
            ("response", "allow", "success"),
        ] * 2
        assert report.splitlines()[-1].startswith(f"OK: {len(stored.records)} records in 1 segments, "), report
        ids = [record["id"] for record in (result.meta or {})[RECEIPT_META_KEY]["records"]]
        assert ids == [record_id for record_id, record in stored.records.items() if record["body"] in calls[:2]]
        intent_hashes[writer] = calls[0]["intent_hash"]
    assert intent_hashes["process"] is not None
    assert intent_hashes["process"] == intent_hashes["in-process"]
