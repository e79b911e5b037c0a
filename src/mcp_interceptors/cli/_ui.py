"""`ui`: serve the live, read-only web view of an audit store (SQLite path or postgresql:// URL).

The store, key file and auth default to those of `--config gateway.yaml`. Without auth the view binds
loopback only, as the gateway does.
"""

from __future__ import annotations

import argparse

from mcp_interceptors.audit import DEFAULT_KEY_PATH
from mcp_interceptors.cli._commands import DEFAULT_LISTEN
from mcp_interceptors.cli._common import CommandError
from mcp_interceptors.gateway.logs import announce, configure_logging


def run_ui(args: argparse.Namespace) -> int:
    import anyio

    from mcp_interceptors.audit import AuditError
    from mcp_interceptors.audit.commands import trust_anchors
    from mcp_interceptors.gateway.auditing import audit_key_location, audit_store_location
    from mcp_interceptors.gateway.auth import build_auth
    from mcp_interceptors.gateway.config import ConfigError, authority, is_loopback, load_config
    from mcp_interceptors.gateway.preflight import ListenError, check_listen
    from mcp_interceptors.ui import AuditReader, UiAuth, UiSettings, allowed_hosts_for, create_app, serve_ui

    configure_logging(args.log_level, args.log_format)
    host, port = _parse_listen(args.listen)
    store, key_file, auth = args.audit, args.key_file, None
    try:
        if args.config:
            config = load_config(args.config)
            store = store or audit_store_location(config, create=False)
            key_file = key_file or audit_key_location(config)
            if config.auth.enabled:
                _, verifier = build_auth(config, host, port)
                assert verifier is not None
                auth = UiAuth(verifier, list(config.auth.required_scopes))
    except ConfigError as exc:
        raise CommandError(str(exc), 2) from None
    if not store:
        raise CommandError("give the audit store: --audit PATH|postgresql://URL, or --config gateway.yaml", 2)
    if auth is None and not is_loopback(host) and not args.insecure_no_auth:
        raise CommandError(
            f"refusing to serve {authority(host, port)} without authentication; give --config with an `auth` "
            "section (tokens or jwt), bind a loopback address, or pass --insecure-no-auth"
        )
    named_key = key_file is not None
    key_file = key_file or DEFAULT_KEY_PATH
    if named_key and not args.trust and not key_file.expanduser().exists():
        raise CommandError(f"audit key file {key_file} does not exist", 2)
    try:
        trusted = trust_anchors(args.trust, key_file)
        check_listen(host, port)
        reader = AuditReader(store)
    except (AuditError, ListenError) as exc:
        raise CommandError(str(exc)) from None
    if args.trust:
        trust = "the keys in " + ", ".join(str(path) for path in args.trust)
    elif trusted is not None:
        trust = f"the keys of {key_file}"
    else:
        trust = "no key file: each genesis segment's key on first use"
    settings = UiSettings(reader, trusted, trust, auth=auth)
    app = create_app(settings, allowed_hosts=allowed_hosts_for(host, args.allowed_host))
    url = f"http://{authority(host, port)}/"

    def ready() -> None:
        announce(f"audit view of {reader.description} on {url}", logger="mcp_interceptors.ui")

    try:
        anyio.run(lambda: serve_ui(app, host, port, on_ready=ready))
    except KeyboardInterrupt:
        pass
    finally:
        reader.close()
    return 0


def _parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise CommandError(f"--listen {value!r} must look like HOST:PORT, e.g. {DEFAULT_LISTEN}", 2)
    return host.strip("[]") or "127.0.0.1", int(port)
