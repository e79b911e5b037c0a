"""`completion SHELL`: print a completion script for the subcommands, their options and choices, and the
guard names (bash, zsh, fish, tcsh, powershell).

The script is generated from the CLI's own parser (by shtab) and completes inside the shell, so a Tab
costs no Python start-up (over a second with the gateway's imports).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import shtab


def register(subcommands: Any) -> None:
    completion = subcommands.add_parser(
        "completion",
        help="print a shell completion script",
        description=(
            'Print the completion script of SHELL. bash: add eval "$(mcp-interceptors completion bash)" to '
            "~/.bashrc. zsh: mcp-interceptors completion zsh > ~/.zfunc/_mcp-interceptors, with ~/.zfunc on "
            "$fpath before compinit. fish: mcp-interceptors completion fish > "
            "~/.config/fish/completions/mcp-interceptors.fish."
        ),
    )
    completion.add_argument("shell", choices=shtab.SUPPORTED_SHELLS, help="the shell the script is for")
    completion.set_defaults(handler=run_completion)


def run_completion(args: argparse.Namespace) -> int:
    from mcp_interceptors.cli import build_parser

    sys.stdout.write(shtab.complete(build_parser(), shell=args.shell))
    return 0
