"""`audit tail|show|head|verify|export|keys`: read and check the gateway's signed audit trail.

The store defaults to the one in `--config FILE` (its `audit.store`), else `.audit/audit.db`.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

from mcp_interceptors.audit import DEFAULT_KEY_PATH, commands
from mcp_interceptors.cli._common import CommandError


class _AuditStderr(io.StringIO):
    """stderr for the audit commands: their `error: ...` lines get the prefix every command's errors have,
    `mcp-interceptors audit: error: ...` (the commands' library functions write a bare `error: ...`)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(f"mcp-interceptors audit: {text}" if text.startswith("error: ") else text)


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
