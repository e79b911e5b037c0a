"""MkDocs hook: the command-line reference, generated from each command's `--help`.

`docs/cli.md` holds the marker below; each build replaces it with the help of every subcommand, as the
installed package prints it, so the reference cannot drift from the parser. One Python process asks
`mcp_interceptors.cli.main` (the console script's entry point) for every help text.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

MARKER = "<!-- cli-reference -->"

#: Run in a child process: prints {"command words": help text} for the top level and every subcommand.
_COLLECT = r"""
import contextlib, io, json, re, sys
from mcp_interceptors.cli import main

def help_of(*words):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main([*words, "--help"])
    return out.getvalue().rstrip()

def subcommands(text):
    return re.findall(r"^    ([a-z][a-z-]*)(?:\s|$)", text, flags=re.MULTILINE)

helps = {}
for command in subcommands(help_of()):
    text = helps[command] = help_of(command)
    if "ACTION" in text.split("\n", 1)[0]:
        for action in subcommands(text):
            helps[f"{command} {action}"] = help_of(command, action)
json.dump(helps, sys.stdout)
"""


def help_texts() -> dict[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", _COLLECT],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "100"},
    )
    texts: dict[str, str] = json.loads(done.stdout)
    return texts


def render() -> str:
    out: list[str] = []
    for words, text in help_texts().items():
        heading = "####" if " " in words else "###"
        out += [f"{heading} `{words}`", "", "```text", text, "```", ""]
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return markdown.replace(MARKER, render()) if MARKER in markdown else markdown
