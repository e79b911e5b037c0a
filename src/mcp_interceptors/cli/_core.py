"""`list` and `invoke`: talk to one interceptor host over Streamable HTTP or stdio and print JSON."""

from __future__ import annotations

import argparse
from typing import Any

import anyio
import httpx2
from mcp import MCPError

from mcp_interceptors.cli._common import CommandError, print_json, read_json_argument
from mcp_interceptors.cli._runtime import build_client
from mcp_interceptors.invoker import discover, invoke_interceptor
from mcp_interceptors.protocol.errors import InterceptorsError


def _client(args: argparse.Namespace) -> Any:
    return build_client(args.target, args.stdio_command, mode=args.mode, headers=args.header, bearer=args.bearer)


def run_list(args: argparse.Namespace) -> int:
    async def go() -> dict[str, Any]:
        async with _client(args) as client:
            found = await discover(client, args.event)
        return {
            "interceptors": [d.to_wire() for d in found.descriptors],
            "skipped": [{"index": w.index, "name": w.name, "reason": w.reason} for w in found.warnings],
        }

    print_json(_run(go, args))
    return 0


def run_invoke(args: argparse.Namespace) -> int:
    urls = ("http://", "https://")
    if args.target and args.name.startswith(urls) and not args.target.startswith(urls):
        raise CommandError(f"the URL comes before the interceptor name: invoke {args.name} {args.target} ...", 2)
    payload = read_json_argument(args.payload, "--payload")
    config = read_json_argument(args.config, "--config") if args.config else None
    if config is not None and not isinstance(config, dict):
        raise CommandError("--config must be a JSON object", 2)

    async def go() -> dict[str, Any]:
        async with _client(args) as client:
            result = await invoke_interceptor(
                client, args.name, args.event, args.phase, payload, config=config, timeout_ms=args.timeout_ms
            )
        return result.to_wire()

    print_json(_run(go, args))
    return 0


def _run(fn: Any, args: argparse.Namespace) -> Any:
    try:
        return anyio.run(fn)
    except CommandError:  # a usage error found while building the client keeps its own message and exit code
        raise
    except Exception as exc:  # one line on stderr, never a traceback
        failure = describe_failure(exc)
        if failure.startswith(_UNREACHABLE):  # say which host: the URL, or the command that was run
            where = args.target or " ".join(args.stdio_command or ())
            failure = f"cannot reach {where}: {failure.removeprefix(_UNREACHABLE)}"
        raise CommandError(failure) from None


_UNREACHABLE = "cannot reach the host: "


def describe_failure(exc: BaseException) -> str:
    """A one-line description of what went wrong, looking inside exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, CommandError):
        return str(exc)
    if isinstance(exc, MCPError):
        return f"{exc.message} (code {exc.code})" + (f" data={exc.data}" if exc.data else "")
    if isinstance(exc, InterceptorsError):
        return exc.message
    if isinstance(exc, httpx2.TransportError):
        return f"{_UNREACHABLE}{type(exc).__name__}: {exc}"
    if isinstance(exc, OSError | ConnectionError):
        return f"{_UNREACHABLE}{exc}"
    return f"{type(exc).__name__}: {exc}"
