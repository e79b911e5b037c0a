"""Gateway replicas behind a real HAProxy (the Debian package, on loopback): round-robin for 2026-07-28
requests, sticky on `Mcp-Session-Id` for handshake-era sessions, a readiness check on `/healthz` and
`option redispatch`, so a request to a dead replica goes to another one."""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import Child, child_env, cli_argv, free_tcp_port, running, spawn, stop, wait_http_ready

#: How long a replica may take to listen: it starts its upstreams first, on a shared 2-core machine.
START_S = 120.0

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


@dataclass
class Replica:
    """One gateway replica: its CLI argv, port and direct URL, and its running child (None once stopped)."""

    argv: list[str]
    port: int
    label: str
    child: Child | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def start(self, label: str | None = None) -> None:
        """Start the replica and wait for its port (longer than `running`: three upstreams, a loaded machine)."""
        self.child = spawn(self.argv, env=child_env(), label=label or self.label)
        try:
            await wait_http_ready(self.child, self.port, limit_s=START_S)
        except BaseException as exc:
            exc.add_note(self.child.describe())
            await self.stop()
            raise

    def kill(self) -> None:
        """SIGKILL the replica's process group (the gateway and its upstreams), and reap it."""
        assert self.child is not None
        os.killpg(self.child.pid, signal.SIGKILL)
        self.child.popen.wait()

    async def stop(self) -> None:
        if self.child is not None:
            child, self.child = self.child, None
            stop(child)


@asynccontextmanager
async def balanced(tmp_path: Path, configs: Sequence[Mapping[str, Any]]) -> AsyncIterator[tuple[str, list[Replica]]]:
    """One replica per config behind HAProxy; the balancer's MCP URL and the replicas (started in order)."""
    replicas: list[Replica] = []
    for index, config in enumerate(configs):
        path = tmp_path / f"gateway-{index}.yaml"
        path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
        port = free_tcp_port()
        argv = cli_argv("gateway", "--config", str(path), "--http", f"127.0.0.1:{port}")
        replicas.append(Replica(argv, port, f"replica {index}"))
    lb_port = free_tcp_port()
    servers = "\n".join(
        f"    server r{i} 127.0.0.1:{replica.port} check inter 300ms fall 2 rise 1"
        for i, replica in enumerate(replicas)
    )
    (tmp_path / "haproxy.cfg").write_text(HAPROXY.format(port=lb_port, servers=servers))
    async with running([haproxy_binary(), "-db", "-f", str(tmp_path / "haproxy.cfg")], port=lb_port, label="haproxy"):
        try:
            for replica in replicas:
                await replica.start()
            yield f"http://127.0.0.1:{lb_port}/mcp", replicas
        finally:
            for replica in reversed(replicas):
                await replica.stop()
