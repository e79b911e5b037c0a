"""The gateway's audit trail, set up from its config: where the store and the key are, and which writer runs it.

`audit.writer: auto` runs the writer in a process of its own (`audit_process.py`) when two CPUs are usable,
else in the gateway's event loop (`audit.AuditWriter`). Either way `recording.CallRecord` submits to it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

import anyio.abc

from mcp_interceptors.gateway.config import GatewayConfig

if TYPE_CHECKING:
    from mcp_interceptors.audit import RecordWriter

logger = logging.getLogger(__name__)


def audit_store_location(config: GatewayConfig, *, create: bool = True) -> str:
    """The store URL or path; a relative path is relative to the config file, and its folder is created
    (unless `create=False`)."""
    target = config.audit.store
    if "://" in target:
        return target
    path = Path(target)
    if config.base_dir is not None and not path.is_absolute():
        path = Path(config.base_dir) / path
    if create:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # owner-only, as the store makes it
    return str(path)


def audit_key_location(config: GatewayConfig) -> Path | None:
    """The configured key file, relative to the config file's folder (None: the default location)."""
    if not config.audit.key_file:
        return None
    path = Path(config.audit.key_file).expanduser()
    if config.base_dir is not None and not path.is_absolute():
        path = Path(config.base_dir) / path
    return path


async def start_audit_writer(config: GatewayConfig, tg: anyio.abc.TaskGroup) -> RecordWriter:
    """Open the configured store and key and run the writer in `tg` (cancelling `tg` flushes it)."""
    from mcp_interceptors.audit import DEFAULT_KEY_PATH, AuditWriter, load_or_create_key, open_store
    from mcp_interceptors.gateway.audit_process import ProcessAuditWriter

    location = audit_store_location(config)
    store = open_store(location)  # here, so a bad store or key fails the start-up with its own error
    key_file = audit_key_location(config) or DEFAULT_KEY_PATH.expanduser()
    key = load_or_create_key(key_file)
    writer: RecordWriter
    kind = config.audit.writer
    if kind == "auto":
        cpus = usable_cpus()
        kind = "process" if cpus >= 2 else "in-process"
        logger.info("audit.writer auto: %s (%g CPUs usable)", kind, cpus)
    if kind == "process":
        store.close()
        writer = ProcessAuditWriter(location, key_file, receipts=config.audit.receipts)
    else:
        writer = AuditWriter(store, key)
    await tg.start(writer.run)
    return writer


def usable_cpus() -> float:
    """How many CPUs this process may use: its CPU affinity, capped by a cgroup CPU quota if one is set."""
    try:
        count = float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        count = float(os.cpu_count() or 1)
    quota = _cgroup_cpu_quota()
    return count if quota is None else min(count, quota)


def _cgroup_cpu_quota() -> float | None:
    """The CPU quota of our cgroup in CPUs (cgroup v2 `cpu.max`, else v1 `cpu.cfs_quota_us`), None if unlimited."""
    v2 = [Path("/sys/fs/cgroup/cpu.max")]
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                v2.insert(0, Path("/sys/fs/cgroup") / line[3:].lstrip("/") / "cpu.max")
    for path in v2:
        with contextlib.suppress(OSError, ValueError):
            quota, period = path.read_text().split()
            return None if quota == "max" else int(quota) / int(period)
    with contextlib.suppress(OSError, ValueError):
        quota_us = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read_text())
        period_us = int(Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read_text())
        return None if quota_us <= 0 else quota_us / period_us
    return None
