"""The `mcp-interceptors` command: argument parsing and wiring only; each subcommand lives in its module."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from mcp_interceptors.cli import _core
from mcp_interceptors.cli._common import CommandError, split_command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-interceptors",
        description="SDK and gateway for the MCP Interceptors extension (SEP-2624).",
    )
    subcommands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in _modules():
        module.register(subcommands)
    return parser


def _modules() -> list[Any]:
    modules: list[Any] = [_core]
    for name in ("_gateway", "_guards", "_audit"):
        try:
            modules.append(__import__(f"mcp_interceptors.cli.{name}", fromlist=["register"]))
        except ModuleNotFoundError as exc:
            if exc.name != f"mcp_interceptors.cli.{name}":
                raise
    return modules


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point. Text after `--` is an upstream command (a stdio server to talk to)."""
    args_list, command = split_command(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    args = parser.parse_args(args_list)
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
