"""Shared CLI pieces the parser needs: errors, argument types and helpers, JSON input and output.

Only the standard library: building the parser (`--help`, `--version`, `completion`) must not import the
libraries the commands run on (`_runtime` holds those pieces).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


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
    setattr(action, COMPLETES, f"printf '%s\\n' {' '.join(names)}")


#: The attribute naming what `completion` offers for an argument: `FILES`, or a shell command printing the
#: choices. `completion` turns it into shtab's completer when it writes a script: shtab itself takes ~40 ms
#: to import, which `--help` need not pay.
COMPLETES = "mcp_interceptors_completes"
FILES = "files"


def completes_files(action: argparse.Action) -> argparse.Action:
    """Mark an argument that names a file, for `completion`'s scripts."""
    setattr(action, COMPLETES, FILES)
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
