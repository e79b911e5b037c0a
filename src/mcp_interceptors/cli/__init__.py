"""The `mcp-interceptors` command: argument parsing and wiring only; each subcommand lives in its module.

The parser (`_commands`) is built from the standard library alone; a subcommand's module, and the libraries it
runs on, are imported only when that subcommand runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from mcp_interceptors.cli import _commands
from mcp_interceptors.cli._common import CommandError, split_command


class _Parser(argparse.ArgumentParser):
    """Each (sub)command's parser names itself in the namespace it fills (`usage_parser`; the innermost one
    wins), so an argument it does not take is reported with that command's usage, not the top level's."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.set_defaults(usage_parser=self)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mcp-interceptors",
        description="SDK and gateway for the MCP Interceptors extension (SEP-2624).",
    )
    parser.add_argument("--version", action=_PrintVersion, help="print the versions of this package and mcp, then exit")
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _commands.register(subcommands)
    return parser


class _PrintVersion(argparse.Action):
    """Like argparse's `version` action, but printed as one line (argparse wraps it to the terminal)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        print(_version())
        parser.exit()


def _version() -> str:
    """Ours, and the versions of mcp and the extension: what a bug report needs."""
    from importlib.metadata import version

    from mcp_interceptors import EXTENSION_ID, __version__

    python = sys.version.split()[0]
    return f"mcp-interceptors {__version__} (mcp {version('mcp')}, extension {EXTENSION_ID}, Python {python})"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point. Text after `--` is an upstream command (a stdio server to talk to)."""
    args_list, command = split_command(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    args, extras = parser.parse_known_args(args_list)
    if extras:
        args.usage_parser.error(_unrecognized(args, extras))
    args.stdio_command = command
    try:
        code: int = args.handler(args)
    except CommandError as exc:
        print(f"mcp-interceptors {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return stdout_closed()
    return code


def _unrecognized(args: argparse.Namespace, extras: list[str]) -> str:
    """What a command does not take; a target URL given after the interceptor name is said as such."""
    urls = [extra for extra in extras if extra.startswith(("http://", "https://"))]
    name = getattr(args, "name", None)
    if urls and getattr(args, "target", "") is None and name is not None:
        return f"the URL comes before the interceptor name: {args.command} {urls[0]} {name} ..."
    return f"unrecognized arguments: {' '.join(extras)}"


def stdout_closed() -> int:
    """The reader of our stdout went away (`... | head`): stop quietly with SIGPIPE's shell status."""
    try:  # the interpreter flushes stdout at exit: point it at /dev/null so that flush cannot fail again
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return 141


if __name__ == "__main__":
    sys.exit(main())
