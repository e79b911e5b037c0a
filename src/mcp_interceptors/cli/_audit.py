"""`audit tail|show|head|verify|export|keys`: read and check the gateway's signed audit trail.

The store defaults to the one in `--config FILE` (its `audit.store`), else `.audit/audit.db`.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path
from typing import Any

from mcp_interceptors.audit import DEFAULT_KEY_PATH, commands
from mcp_interceptors.cli._common import CommandError, completes_files


def register(subcommands: Any) -> None:
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
    tail.set_defaults(handler=run_tail)

    show = actions.add_parser("show", help="print one record and its compound receipt")
    common(show)
    show.add_argument("record_id", metavar="ID")
    show.set_defaults(handler=run_show)

    head = actions.add_parser("head", help="print each segment's newest record, as anchors to keep elsewhere")
    common(head)
    head.set_defaults(handler=run_head)

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
    verify.set_defaults(handler=run_verify)

    export = actions.add_parser("export", help="write the records and receipts as JSON lines")
    common(export)
    export.add_argument("--jsonl", action="store_true", default=True, help="JSON lines (the only format)")
    export.set_defaults(handler=run_export)

    keys = actions.add_parser("keys", help="show, export or rotate the signing key")
    common(keys)
    keys.add_argument("--rotate", action="store_true", help="generate a new key endorsed by the old one")
    keys.add_argument("--export", action="store_true", help="print trust anchors as JSON lines")
    keys.set_defaults(handler=run_keys)


class _AuditStderr(io.StringIO):
    """stderr for the audit commands: their `error: ...` lines get the prefix every command's errors have,
    `mcp-interceptors audit: error: ...` (the commands' library functions write a bare `error: ...`)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(f"mcp-interceptors audit: {text}" if text.startswith("error: ") else text)


def _count(text: str) -> int:
    """A positive record count for `-n` (a usage error, exit 2, otherwise)."""
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of records, at least 1, not {text!r}")
    return count


def _locations(args: argparse.Namespace) -> tuple[str, Path]:
    store, key_file, _ = _named_locations(args)
    return store, key_file


def _named_locations(args: argparse.Namespace) -> tuple[str, Path, bool]:
    """The store and key file, and whether the key file was named (`--key-file`, or the config's
    `audit.key_file`) rather than the default location."""
    store: str | None = args.store
    key_file: Path | None = args.key_file
    if args.config:
        from mcp_interceptors.gateway.auditing import audit_key_location, audit_store_location
        from mcp_interceptors.gateway.config import ConfigError, load_config

        try:
            config = load_config(args.config)
        except ConfigError as exc:
            raise CommandError(str(exc), 2) from None
        store = store or audit_store_location(config)
        key_file = key_file or audit_key_location(config)
    return store or ".audit/audit.db", key_file or DEFAULT_KEY_PATH, key_file is not None


def run_tail(args: argparse.Namespace) -> int:
    store, _ = _locations(args)
    try:
        return commands.tail(store, sys.stdout, limit=args.n, follow=args.follow, as_json=args.json, err=_AuditStderr())
    except KeyboardInterrupt:
        return 0


def run_show(args: argparse.Namespace) -> int:
    store, _ = _locations(args)
    return commands.show(store, args.record_id, sys.stdout, err=_AuditStderr())


def run_verify(args: argparse.Namespace) -> int:
    store, key_file, named = _named_locations(args)
    if named and not args.trust and not key_file.expanduser().exists():
        # Named explicitly (here or in the config): a typo, or a config read on another machine, must not
        # quietly fall back to trusting the store's own keys.
        sys.stderr.write(f"mcp-interceptors audit: error: audit key file {key_file} does not exist\n")
        return commands.EXIT_ERROR
    return commands.verify(
        store, sys.stdout, trusted_keys=args.trust, key_path=key_file, anchor_files=args.anchor, err=_AuditStderr()
    )


def run_head(args: argparse.Namespace) -> int:
    store, _ = _locations(args)
    return commands.head(store, sys.stdout, err=_AuditStderr())


def run_export(args: argparse.Namespace) -> int:
    store, _ = _locations(args)
    return commands.export_jsonl(store, sys.stdout, err=_AuditStderr())


def run_keys(args: argparse.Namespace) -> int:
    store, key_file = _locations(args)
    target = store if (args.store or args.config) else None
    return commands.keys(
        target, sys.stdout, key_path=key_file, rotate=args.rotate, export=args.export, err=_AuditStderr()
    )
