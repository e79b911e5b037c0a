"""`completion SHELL`: print a completion script for the subcommands, their options and choices, and the
guard names (bash, zsh, fish, tcsh, powershell).

The script is generated from the CLI's own parser (by shtab) and completes inside the shell, so a Tab
costs no Python start-up (over a second with the gateway's imports).
"""

from __future__ import annotations

import argparse
import sys

import shtab

from mcp_interceptors.cli._common import COMPLETES, FILES


def run_completion(args: argparse.Namespace) -> int:
    from mcp_interceptors.cli import build_parser

    sys.stdout.write(shtab.complete(with_completers(build_parser()), shell=args.shell))
    return 0


def with_completers(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`parser`, each argument marked by `completes_files` or `add_guard_argument` given shtab's completer
    (the `complete` attribute shtab reads), in every subcommand's parser too."""
    for action in parser._actions:  # argparse lists a parser's arguments only there (shtab walks it too)
        what = getattr(action, COMPLETES, None)
        if what is not None:
            action.complete = shtab.FILE if what == FILES else shtab.cmd(what)  # type: ignore[attr-defined]
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                with_completers(subparser)
    return parser
