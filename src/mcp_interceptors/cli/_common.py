"""Shared CLI pieces: target parsing (URL or stdio command), client construction, JSON output."""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import shlex
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
import httpx2
import shtab
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

ClientMode = Literal["legacy", "auto", "2026-07-28"]
T = TypeVar("T")


class CommandError(Exception):
    """A failure reported as one line on stderr with a non-zero exit code."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """Split `argv` at the first `--`: our options before, an upstream command after."""
    if "--" in argv:
        index = argv.index("--")
        return argv[:index], argv[index + 1 :]
    return argv, []


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


def read_json_argument(value: str, option: str) -> Any:
    """Parse `value` as JSON, or the JSON file it names with a leading `@`; a usage error (exit 2) names
    `option` when it is no JSON, nests too deep, or holds NaN or Infinity (no JSON peer reads those)."""
    try:
        return parse_json_argument(value)
    except ValueError as exc:
        raise CommandError(f"{option}: {exc}", 2) from None


def parse_json_argument(value: str) -> Any:
    """`read_json_argument`'s parsing; raises `ValueError` saying what is wrong."""
    text = value
    if value.startswith("@"):
        path = Path(value[1:])
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"cannot read {path}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise ValueError(f"{path} is not UTF-8 text") from None
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise ValueError("invalid JSON (nested too deep)") from None
    except ValueError as exc:  # an integer past Python's digit limit, or one of ours
        raise ValueError(f"invalid JSON ({exc})") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON; give a finite number")


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")
    sys.stdout.flush()


def add_target_arguments(parser: Any) -> None:
    parser.add_argument("target", nargs="?", help="http(s) URL of the host; or give a stdio command after --")
    parser.add_argument("--mode", choices=["auto", "legacy", "2026-07-28"], default="auto", help="protocol era")
    parser.add_argument("--header", action="append", default=[], metavar="'NAME: VALUE'", help="HTTP header")
    parser.add_argument("--bearer", metavar="TOKEN", help="HTTP bearer token")


#: A guard from `--guard` and its build config (`None`: the guard's defaults).
GuardChoice = tuple[str, dict[str, Any] | None]


def guard_argument(text: str) -> GuardChoice:
    """`NAME`, `NAME=JSON` or `NAME=@FILE.json` (argparse's `type`: a bad one is a usage error)."""
    from mcp_interceptors import guards

    name, sep, value = text.partition("=")
    names = guards.available()
    if name not in names:
        raise argparse.ArgumentTypeError(f"unknown guard {name!r}; choose from: {', '.join(names)}")
    if not sep:
        return name, None
    try:
        config = parse_json_argument(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{name}: {exc}") from None
    if not isinstance(config, dict):
        raise argparse.ArgumentTypeError(f"{name}: the config must be a JSON object, e.g. {name}='{{\"key\": ...}}'")
    return name, config


def add_guard_argument(parser: Any, what: str) -> None:
    from mcp_interceptors import guards

    names = guards.available()
    action = parser.add_argument(
        "--guard",
        action="append",
        default=[],
        type=guard_argument,
        metavar="NAME[=CONFIG]",
        help=f'{what} (repeatable); CONFIG is its config as JSON or @file.json, e.g. secrets=\'{{"action": "deny"}}\''
        f" (keys: docs/guards.md). NAME is one of: {', '.join(names)}",
    )
    # `completion` offers the names, one per line (fish splits a command's output by lines); no Python runs
    action.complete = shtab.cmd(f"printf '%s\\n' {' '.join(names)}")


def completes_files(action: argparse.Action) -> argparse.Action:
    """Mark an argument that names a file, for `completion`'s scripts."""
    action.complete = shtab.FILE  # type: ignore[attr-defined]  # shtab reads this attribute
    return action


def repeated_guards(choices: Sequence[GuardChoice]) -> list[str]:
    """Names given more than once in `--guard`: each guard runs once, with one config."""
    names = [name for name, _ in choices]
    return sorted({name for name in names if names.count(name) > 1})


LOOPS = ("auto", "uvloop", "asyncio")


def add_loop_argument(parser: Any) -> None:
    parser.add_argument(
        "--loop",
        choices=LOOPS,
        default="auto",
        help="event loop: uvloop when it is installed (auto, the default), or asyncio's own",
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


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def add_log_level_argument(parser: Any) -> None:
    """`--log-level` (any case: a name logging does not know is a usage error, not a traceback) and `--log-format`."""
    parser.add_argument(
        "--log-level", default="WARNING", type=str.upper, choices=LOG_LEVELS, help="logging level for stderr"
    )
    parser.add_argument(
        "--log-format",
        default="text",
        choices=("text", "json"),
        help="stderr lines as text (default) or one JSON object per line",
    )
