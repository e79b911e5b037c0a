"""What the commands share while they run: a client for a host (URL or stdio command), the event loop
`--loop` chose, and the start-up heap freeze. Imported only by commands that run (it brings in mcp)."""

from __future__ import annotations

import asyncio
import gc
import shlex
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from mcp_interceptors.cli._common import CommandError

ClientMode = Literal["legacy", "auto", "2026-07-28"]
T = TypeVar("T")


def build_client(
    target: str | None,
    command: Sequence[str],
    *,
    mode: ClientMode = "auto",
    headers: Sequence[str] = (),
    bearer: str | None = None,
    env: dict[str, str] | None = None,
) -> Client:
    """A client for an HTTP(S) URL target or a stdio command given after `--`."""
    if target and command:
        raise CommandError("give either a URL target or a command after --, not both", 2)
    if command:
        return Client(StdioServerParameters(command=command[0], args=list(command[1:]), env=env), mode=mode)
    if not target:
        raise CommandError("missing TARGET: an http(s):// URL, or a stdio server command after --", 2)
    if not target.startswith(("http://", "https://")):
        raise CommandError(
            f"TARGET {target!r} is not an http(s) URL; to run a stdio server use: -- {shlex.join(target.split())}", 2
        )
    header_map = {}
    for item in headers:
        key, sep, value = item.partition(":")
        if not sep:
            raise CommandError(f"--header {item!r} must look like 'Name: value'", 2)
        header_map[key.strip()] = value.strip()
    if bearer:
        header_map["Authorization"] = f"Bearer {bearer}"
    # The MCP transports' own timeouts (30 s, reading 300 s: a response stream may stay open), not httpx's 5 s.
    http_client = httpx2.AsyncClient(
        headers=header_map, timeout=httpx2.Timeout(30.0, read=300.0), event_hooks={"response": [_refused_access]}
    )
    return Client(streamable_http_client(target, http_client=http_client), mode=mode)


async def _refused_access(response: httpx2.Response) -> None:
    """401/403 as what it is: the client library turns it into an anonymous -32603 "error response"."""
    if response.status_code in (401, 403):
        reason = "needs a valid token (--bearer TOKEN)" if response.status_code == 401 else "refused this token"
        detail = response.headers.get("www-authenticate", "")
        raise CommandError(
            f"{response.request.url}: HTTP {response.status_code}: the host {reason}"
            + (f" ({detail})" if detail else "")
        )


def run_on_loop(choice: str, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """`anyio.run` on the event loop `--loop` chose.

    uvloop is the default where it is installed: a long-running server spends much of its CPU in the
    loop itself (a stdio gateway call takes ~7 loop turns), and uvloop makes each turn cheaper.
    """
    return anyio.run(fn, *args, backend_options={"use_uvloop": _use_uvloop(choice)})


def freeze_start_up_heap() -> int:
    """Move what start-up built (modules, schemas, compiled guards) out of the cyclic collector's sight;
    returns how many objects that was.

    They live as long as the process, yet every full collection would walk them again: ~120,000 objects,
    ~60 ms with the gateway's imports, a pause every request in flight waits out (the p99 spikes a loaded
    gateway showed). Called once, when start-up is done and before serving.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def loop_name() -> str:
    """The running event loop's package, for the start-up log: `uvloop` or `asyncio`."""
    return type(asyncio.get_running_loop()).__module__.partition(".")[0]


def _use_uvloop(choice: str) -> bool:
    if choice == "asyncio":
        return False
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if choice == "uvloop":
            raise CommandError("--loop uvloop: uvloop is not installed here (pip install uvloop)", 2) from None
        return False
    return True
