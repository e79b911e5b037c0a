"""Every subcommand's parser: its arguments and help texts, and which module runs it.

A command's module is imported only when that command runs, so `--help`, `--version` and `completion`
build the whole parser from this module and `_common` alone (the standard library), without mcp,
the gateway or the audit store's libraries.
"""

from __future__ import annotations

import argparse
import importlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp_interceptors.cli._common import (
    add_guard_argument,
    add_log_level_argument,
    add_loop_argument,
    add_target_arguments,
    completes_files,
)

#: `audit.DEFAULT_KEY_PATH`, named here so the help does not import the audit package (a test keeps them equal)
DEFAULT_KEY_PATH = Path("~/.mcp-interceptors/audit-key")
#: `shtab.SUPPORTED_SHELLS` (a test keeps them equal)
SHELLS = ("bash", "zsh", "tcsh", "fish", "powershell")
#: What `wrap-client-config` names the servers file it writes beside a client's config
SERVERS_SUFFIX = ".gateway-upstreams.json"
#: Where `ui` listens unless `--listen` says otherwise
DEFAULT_LISTEN = "127.0.0.1:8765"


def register(subcommands: Any) -> None:
    """Add every subcommand to `subcommands` (the top-level parser's), in the order `--help` lists them."""
    for add in (
        _list_and_invoke,
        _gateway_and_schema,
        _serve_and_pin,
        _audit_actions,
        _ui_view,
        _wrap_client_config,
        _completion_script,
    ):
        add(subcommands)


@dataclass(frozen=True)
class _Handler:
    """A command's handler: `function` of `mcp_interceptors.cli.<module>`, imported when the command runs."""

    module: str
    function: str

    def __call__(self, args: argparse.Namespace) -> int:
        code: int = getattr(importlib.import_module(f"mcp_interceptors.cli.{self.module}"), self.function)(args)
        return code


def _list_and_invoke(subcommands: Any) -> None:
    listing = subcommands.add_parser(
        "list",
        help="list a host's interceptors",
        description="Call interceptors/list on TARGET (a URL, or a stdio command after --) and print JSON.",
    )
    add_target_arguments(listing)
    listing.add_argument("--event", help="only interceptors hooked to this event")
    listing.set_defaults(handler=_Handler("_core", "run_list"))

    invoke = subcommands.add_parser(
        "invoke",
        help="invoke one interceptor",
        description="Call interceptor/invoke on TARGET and print the result as JSON.",
    )
    add_target_arguments(invoke)
    invoke.add_argument("name", help="interceptor name")
    invoke.add_argument("--event", required=True, help="lifecycle event, e.g. tools/call")
    invoke.add_argument("--phase", required=True, choices=["request", "response"])
    invoke.add_argument("--payload", required=True, help="payload as JSON, or @file.json")
    invoke.add_argument("--config", help="config object as JSON, or @file.json")
    invoke.add_argument("--timeout-ms", type=_milliseconds, help="host-enforced deadline")
    invoke.set_defaults(handler=_Handler("_core", "run_invoke"))


def _milliseconds(text: str) -> float:
    """A finite, positive number of milliseconds (`inf` or `nan` would lift the deadline)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a finite number of milliseconds above 0, not {text!r}")
    return value


def _gateway_and_schema(subcommands: Any) -> None:
    gateway = subcommands.add_parser(
        "gateway",
        help="run the interceptor gateway in front of MCP servers",
        description=(
            "Run the gateway from a config file, or front one stdio server given after -- with built-in guards. "
            "Serves stdio by default, or Streamable HTTP (and legacy SSE) with --http HOST:PORT."
        ),
    )
    completes_files(gateway.add_argument("--config", "-c", metavar="FILE", help="gateway.yaml"))
    completes_files(
        gateway.add_argument("--check", metavar="FILE", help="validate FILE and print the resolved plan, then exit")
    )
    completes_files(
        gateway.add_argument(
            "--servers",
            metavar="FILE",
            help="a client's mcpServers (or VS Code servers) file whose servers join the upstreams of --config",
        )
    )
    gateway.add_argument(
        "--upstream",
        metavar="NAME",
        help="front only this upstream of --config FILE (a client config's server name), without a tool prefix",
    )
    add_guard_argument(
        gateway, "with an upstream command after --, or a client's mcpServers file as --config: a built-in guard to run"
    )
    gateway.add_argument("--http", metavar="HOST:PORT", help="serve Streamable HTTP instead of stdio")
    gateway.add_argument(
        "--insecure-no-auth", action="store_true", help="allow a non-loopback HTTP bind without authentication"
    )
    gateway.add_argument(
        "--json", action="store_true", help="with --check: print the upstreams, deadline and plan as JSON"
    )
    gateway.add_argument(
        "--watch",
        action="store_true",
        help="with --config: reload the guards and policies when the file changes (SIGHUP reloads them too)",
    )
    add_log_level_argument(gateway)
    add_loop_argument(gateway)
    gateway.set_defaults(handler=_Handler("_gateway", "run_gateway"))

    schema = subcommands.add_parser("config-schema", help="print the JSON Schema of gateway.yaml")
    schema.set_defaults(handler=_Handler("_gateway", "run_config_schema"))


def _serve_and_pin(subcommands: Any) -> None:
    serve = subcommands.add_parser(
        "serve",
        help="serve built-in guards as an interceptor server",
        description="Serve one or more built-in guards (one host with all their interceptors) over stdio, "
        "or Streamable HTTP with --http HOST:PORT.",
    )
    add_guard_argument(serve, "a built-in guard to serve")
    serve.add_argument(
        "--config-json",
        action="append",
        default=[],
        metavar="NAME=JSON|@FILE",
        help="build config of a served guard NAME, as JSON or @file.json (repeatable); the same as --guard NAME=JSON",
    )
    serve.add_argument("--http", metavar="HOST:PORT", help="serve Streamable HTTP at http://HOST:PORT/mcp")
    serve.add_argument("--insecure-no-auth", action="store_true", help="allow a non-loopback HTTP bind")
    add_log_level_argument(serve)
    add_loop_argument(serve)
    serve.set_defaults(handler=_Handler("_guards", "run_serve"))

    pin = subcommands.add_parser(
        "pin",
        help="write a tool-pinning pin file from a live server",
        description="List TARGET's tools (a URL, or a stdio command after --) and write their pins as JSON.",
    )
    add_target_arguments(pin)
    completes_files(
        pin.add_argument("-o", "--output", required=True, metavar="FILE", help="pin file to write; - for stdout")
    )
    pin.set_defaults(handler=_Handler("_guards", "run_pin"))


def _audit_actions(subcommands: Any) -> None:
    audit = subcommands.add_parser("audit", help="read and verify the signed audit trail")
    actions = audit.add_subparsers(dest="action", required=True, metavar="ACTION")

    def common(parser: argparse.ArgumentParser) -> None:
        completes_files(
            parser.add_argument(
                "--store", help="SQLite path, postgresql:// URL, or for verify a .jsonl export (default: from --config)"
            )
        )
        completes_files(
            parser.add_argument("--config", "-c", metavar="FILE", help="take the store and key file from gateway.yaml")
        )
        completes_files(
            parser.add_argument("--key-file", type=Path, help=f"signing key file (default {DEFAULT_KEY_PATH})")
        )

    tail = actions.add_parser("tail", help="print the newest records")
    common(tail)
    tail.add_argument("-n", type=_count, default=20, help="how many records (at least 1)")
    tail.add_argument("--follow", "-f", action="store_true", help="keep printing new records")
    tail.add_argument("--json", action="store_true", help="one JSON record per line")
    tail.set_defaults(handler=_Handler("_audit", "run_tail"))

    show = actions.add_parser("show", help="print one record and its compound receipt")
    common(show)
    show.add_argument("record_id", metavar="ID")
    show.set_defaults(handler=_Handler("_audit", "run_show"))

    head = actions.add_parser("head", help="print each segment's newest record, as anchors to keep elsewhere")
    common(head)
    head.set_defaults(handler=_Handler("_audit", "run_head"))

    verify = actions.add_parser("verify", help="check every hash link and signature; name the first bad record")
    common(verify)
    completes_files(
        verify.add_argument("--trust", action="append", type=Path, default=[], help="trusted public keys (JSONL)")
    )
    anchor = verify.add_argument(
        "--anchor",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help="records that must be in the trail: `audit head` lines or receipts clients kept (JSON lines)",
    )
    completes_files(anchor)
    verify.set_defaults(handler=_Handler("_audit", "run_verify"))

    export = actions.add_parser("export", help="write the records and receipts as JSON lines")
    common(export)
    export.add_argument("--jsonl", action="store_true", default=True, help="JSON lines (the only format)")
    export.set_defaults(handler=_Handler("_audit", "run_export"))

    keys = actions.add_parser("keys", help="show, export or rotate the signing key")
    common(keys)
    keys.add_argument("--rotate", action="store_true", help="generate a new key endorsed by the old one")
    keys.add_argument("--export", action="store_true", help="print trust anchors as JSON lines")
    keys.set_defaults(handler=_Handler("_audit", "run_keys"))


def _count(text: str) -> int:
    """A positive record count for `-n` (a usage error, exit 2, otherwise)."""
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of records, at least 1, not {text!r}")
    return count


def _ui_view(subcommands: Any) -> None:
    ui = subcommands.add_parser(
        "ui",
        help="serve a live web view of the audit trail",
        description=(
            "Serve a read-only web view of an audit store: recent calls as they land, filters, charts, and each "
            "call's records with their signature and chain status (the checks of `audit verify`)."
        ),
    )
    ui.add_argument("--audit", metavar="STORE", help="SQLite path or postgresql:// URL (default: from --config)")
    ui.add_argument("--config", "-c", metavar="FILE", help="take the store, key file and auth from gateway.yaml")
    ui.add_argument("--key-file", type=Path, help=f"trust this signing key file's keys (default {DEFAULT_KEY_PATH})")
    ui.add_argument("--trust", action="append", type=Path, default=[], help="trusted public keys (JSONL), repeatable")
    ui.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT", help=f"default {DEFAULT_LISTEN}")
    ui.add_argument(
        "--allowed-host", action="append", default=[], metavar="NAME", help="a Host name clients use (repeatable)"
    )
    ui.add_argument("--insecure-no-auth", action="store_true", help="allow a non-loopback bind without authentication")
    add_log_level_argument(ui)
    ui.set_defaults(handler=_Handler("_ui", "run_ui"))


def _wrap_client_config(subcommands: Any) -> None:
    wrap = subcommands.add_parser(
        "wrap-client-config",
        help="route every server of a desktop client's config through the gateway",
        description=(
            "Rewrite PATH (Claude Desktop, Claude Code, Cursor: mcpServers; VS Code: servers) so each server "
            "starts through `mcp-interceptors gateway` with the guards given (default: secrets). The original "
            f"entries move to PATH's stem + {SERVERS_SUFFIX}; a backup PATH.bak-<time> is written first."
        ),
    )
    completes_files(wrap.add_argument("path", metavar="PATH", help="the client's config file (JSON)"))
    add_guard_argument(wrap, "a built-in guard every wrapped server runs behind (default: secrets)")
    completes_files(
        wrap.add_argument(
            "--gateway-config",
            metavar="FILE",
            help="run every wrapped server behind this gateway config (its guards, policies, audit) instead of --guard",
        )
    )
    wrap.add_argument("--undo", action="store_true", help="put the original entries back")
    wrap.add_argument("--dry-run", action="store_true", help="print the rewritten config instead of writing it")
    wrap.set_defaults(handler=_Handler("_clients", "run_wrap"))


def _completion_script(subcommands: Any) -> None:
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
    completion.add_argument("shell", choices=SHELLS, help="the shell the script is for")
    completion.set_defaults(handler=_Handler("_completion", "run_completion"))
