"""A child process for the audit tests: appends records and prints each acknowledged id on its own line.

Usage: python _appender.py STORE KEY_FILE COUNT CONCURRENCY   (COUNT < 0 appends until killed)
Prints `ready <segment id>` first, then one record id per acknowledged append, then
`done <records> <batches> <largest batch> <seconds>` when COUNT is reached.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import anyio

from mcp_interceptors.audit import DecisionInput, load_or_create_key, open_audit_writer, open_store


def _emit(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(target: str, key_path: str, count: int, concurrency: int) -> None:
    store = open_store(target)
    key = load_or_create_key(Path(key_path))
    per_worker = count // concurrency if count >= 0 else -1
    async with open_audit_writer(store, key) as writer:
        _emit(f"ready {writer.segment_id}")
        started = time.perf_counter()

        async def worker(index: int) -> None:
            done = 0
            while per_worker < 0 or done < per_worker:
                payload = {"method": "tools/call", "params": {"name": "echo", "arguments": {"n": done, "w": index}}}
                decision = DecisionInput(
                    timestamp=datetime.now(UTC),
                    event="tools/call",
                    phase="request",
                    direction="sending",
                    decision="allow",
                    status="success",
                    session_id=f"s-{index}",
                    server="echo",
                    call_id=f"{index}-{done}",
                    intent_payload=payload,
                    executed_payload=payload,
                )
                receipt = await writer.append(decision)
                _emit(receipt.id)
                done += 1

        async with anyio.create_task_group() as tg:
            for index in range(concurrency):
                tg.start_soon(worker, index)
        elapsed = time.perf_counter() - started
    stats = writer.stats
    _emit(f"done {stats.records} {stats.batches} {stats.largest_batch} {elapsed:.3f}")
    store.close()


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
