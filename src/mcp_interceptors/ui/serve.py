"""Serve the web view on its own port with uvicorn (`mcp-interceptors ui`, or a stdio gateway's `ui.listen`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import anyio
import uvicorn

#: The Host header names a loopback bind answers to (with any port).
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]", "::1")


def allowed_hosts_for(host: str, extra: Sequence[str] = ()) -> list[str]:
    """The Host names a view bound to `host` answers to: loopback's, the bound address unless it is a wildcard,
    and `extra` (the names clients use to reach it, e.g. `audit.example.com`)."""
    names = [*LOOPBACK_NAMES, *extra]
    if host not in ("", "0.0.0.0", "::"):
        names.append(f"[{host}]" if ":" in host else host)
    return names


async def serve_ui(
    app: Any, host: str, port: int, *, on_ready: Callable[[], None] | None = None, own_signals: bool = True
) -> None:
    """Serve `app` until uvicorn is told to stop (SIGINT, SIGTERM), or, with `own_signals=False` (inside a
    program that handles its signals itself, the gateway), until the task is cancelled."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        proxy_headers=False,  # a request's address is its connection's
        timeout_graceful_shutdown=2,  # open live streams end when the server stops
    )
    server = uvicorn.Server(config) if own_signals else _Embedded(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        if on_ready is not None:
            # uvicorn offers no readiness event; this loop only runs at start-up
            while not server.started and not server.should_exit:  # noqa: ASYNC110
                await anyio.sleep(0.02)
            if server.started:
                on_ready()


class _Embedded(uvicorn.Server):
    """uvicorn without its signal handlers: the program around it stops it by cancelling its task."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield
