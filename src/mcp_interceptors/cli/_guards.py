"""`serve` and `pin`: serve built-in guards as a standalone interceptor server (stdio or Streamable HTTP),
and write a tool-pinning pin file from a live server."""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import uvicorn
from mcp import Client
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from pydantic import TypeAdapter

from mcp_interceptors import __version__, guards
from mcp_interceptors.cli._common import CommandError, GuardChoice, read_json_argument, repeated_guards
from mcp_interceptors.cli._core import _run
from mcp_interceptors.cli._gateway import _parse_http
from mcp_interceptors.cli._runtime import build_client, freeze_start_up_heap, run_on_loop
from mcp_interceptors.executor import Call
from mcp_interceptors.gateway.config import authority, is_loopback
from mcp_interceptors.gateway.fronts.stdio_transport import fd_stdio_server
from mcp_interceptors.gateway.logs import announce, configure_logging
from mcp_interceptors.gateway.preflight import ListenError, check_listen
from mcp_interceptors.guards.pinning import pin_document
from mcp_interceptors.host import InterceptorHost, Invocation
from mcp_interceptors.protocol.descriptors import InterceptorDescriptor
from mcp_interceptors.protocol.results import InterceptorResult

_RAW: Any = TypeAdapter(dict[str, Any])


# --------------------------------------------------------------------------- serve


def parse_guard_configs(items: Sequence[str], choices: Sequence[GuardChoice]) -> dict[str, dict[str, Any]]:
    """Each served guard's config, from `--guard NAME=JSON` and `--config-json NAME=JSON|@file` items;
    every NAME must be served, and have one config."""
    names = [name for name, _ in choices]
    configs = {name: config for name, config in choices if config is not None}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CommandError(f"--config-json {item!r} must look like NAME=JSON or NAME=@file.json", 2)
        if name not in names:
            raise CommandError(f"--config-json names {name!r}, which is not served; add --guard {name}", 2)
        if name in configs:  # the last one replaced the first without a word
            raise CommandError(f"--config-json {name} is given twice; give guard {name!r} one config with every key", 2)
        config = read_json_argument(value, f"--config-json {name}")
        if not isinstance(config, dict):
            raise CommandError(f"--config-json {name}: the config must be a JSON object", 2)
        configs[name] = config
    return configs


def combined_host(names: Sequence[str], configs: Mapping[str, Mapping[str, Any]]) -> InterceptorHost:
    """One host serving every interceptor of the named guards; each invoke runs in its guard's own host."""
    if not names:
        raise CommandError(f"give at least one --guard NAME; available: {', '.join(guards.available())}", 2)
    combined = InterceptorHost("mcp-interceptors-guards", copy_payloads=False)
    for name in names:
        try:
            host = guards.load(name, configs.get(name))
        except ValueError as exc:
            raise CommandError(str(exc), 2) from None
        for descriptor in host.descriptors:
            try:
                combined.add(descriptor, _delegate(host, descriptor))
            except ValueError as exc:
                raise CommandError(str(exc), 2) from None
    return combined


def _delegate(host: InterceptorHost, descriptor: InterceptorDescriptor) -> Any:
    async def invoke(inv: Invocation) -> InterceptorResult:
        # The combined host already checked `config` against the same schema.
        call = Call(inv.name, descriptor.type, inv.event, inv.phase, inv.payload, inv.config or None, None, inv.context)
        return await host.invoke(call)

    return invoke


def run_serve(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    if args.stdio_command:
        raise CommandError("serve takes no command after --", 2)
    if repeated := repeated_guards(args.guard):
        raise CommandError(f"--guard {', '.join(repeated)} is given twice; each guard can be served once", 2)
    names = [name for name, _ in args.guard]
    host = combined_host(names, parse_guard_configs(args.config_json, args.guard))
    logging.getLogger("mcp_interceptors.serve").info(
        "start-up heap frozen: %d objects the collector skips", freeze_start_up_heap()
    )
    if args.http is None:
        run_on_loop(args.loop, _serve_stdio, interceptor_server(host))
        return 0
    server = interceptor_server(host)  # the same surface as over stdio: only the extension
    bind, port = _parse_http(args.http)
    if not is_loopback(bind) and not args.insecure_no_auth:
        raise CommandError(f"refusing to serve {bind}:{port} without authentication; pass --insecure-no-auth", 2)
    try:
        check_listen(bind, port)
    except ListenError as exc:
        raise CommandError(str(exc)) from None
    app = server.streamable_http_app(host=bind)
    ready = f"serving {', '.join(names)} on http://{authority(bind, port)}/mcp"
    run_on_loop(args.loop, _serve_http, app, bind, port, ready)
    return 0


def interceptor_server(host: InterceptorHost) -> Server[Any]:
    """A low-level mcp `Server` hosting only `host`'s methods, advertised in both eras.

    It registers what `MCPServer(extensions=[host])` does for an extension without tools, through the
    low-level server's public surface, and leaves out mcp's tracing middleware, which costs on every
    invocation of a server that does nothing else.
    """
    server: Server[Any] = Server(host.name, version=__version__)
    for method in host.methods():
        server.add_request_handler(method.method, method.params_type, method.handler)
    server.extensions[host.identifier] = host.settings()
    server.middleware[:] = [host.capability_middleware]
    return server


async def _serve_stdio(server: Server[Any]) -> None:
    # mcp's `stdio_server()` hops to a worker thread for every line read and written; an interceptor
    # server answers many small invocations per call, so it reads and writes on the event loop.
    if sys.platform == "win32":  # pragma: no cover - pipes cannot be awaited there
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())
        return
    async with fd_stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def _serve_http(app: Any, host: str, port: int, ready: str) -> None:
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        # uvicorn offers no readiness event; this loop only runs at start-up
        while not server.started:
            if server.should_exit:
                return
            await anyio.sleep(0.02)
        announce(ready, logger="mcp_interceptors.guards")


# --------------------------------------------------------------------------- pin


async def list_raw_tools(client: Client) -> list[dict[str, Any]]:
    """Every tool as the server sent it (raw JSON, so digests match what a gateway sees), all pages."""
    tools: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(1000):  # a bound against a server that pages forever
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await client.session.send_request(types.ListToolsRequest(params=params), _RAW)
        tools.extend(tool for tool in page.get("tools") or [] if isinstance(tool, dict) and "name" in tool)
        cursor = page.get("nextCursor")
        if not isinstance(cursor, str) or not cursor:
            break
    return tools


def run_pin(args: argparse.Namespace) -> int:
    async def go() -> dict[str, Any]:
        client = build_client(args.target, args.stdio_command, mode=args.mode, headers=args.header, bearer=args.bearer)
        async with client:
            tools = await list_raw_tools(client)
            info = client.server_info
        source = f"{info.name} {info.version}" if info is not None else args.target or shlex.join(args.stdio_command)
        return pin_document(tools, source)

    document = _run(go, args)
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    if args.output == "-":
        sys.stdout.write(text)
    else:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"cannot write {args.output}: {exc.strerror}") from None
        print(f"pinned {len(document['tools'])} tools to {args.output}", file=sys.stderr)
    return 0
