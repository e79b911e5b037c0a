"""The checks that can refuse a gateway's start, all run before anything starts: no upstream, interceptor
server, listener or audit store is opened while one of them may still fail.

`preflight` is what the CLI runs before serving; `missing_commands` is also what `--check` warns about. The
fronts (`fronts/serve.py`) apply the same bind rule again when they build the HTTP app.
"""

from __future__ import annotations

import errno
import os
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

from mcp_interceptors.gateway.auditing import audit_key_location, audit_store_location
from mcp_interceptors.gateway.auth import check_auth
from mcp_interceptors.gateway.config import ConfigError, GatewayConfig, TransportConfig, authority, is_loopback
from mcp_interceptors.gateway.web_view import has_own_listener


class BindRefusedError(ValueError):
    """A non-loopback bind without authentication."""


class ListenError(OSError):
    """The HTTP front cannot listen on HOST:PORT (the port is taken, the host is not this machine's, ...)."""


def preflight(config: GatewayConfig, file: str, http: tuple[str, int] | None, *, insecure_no_auth: bool) -> None:
    """Every check that can refuse this start, in the order a user fixes them: files, binds, audit, commands."""
    check_auth(config, file)
    if http is not None:
        check_bind(config, *http, insecure_no_auth=insecure_no_auth)
        check_listen(*http)
    check_metrics_listen(config, file, http)
    if has_own_listener(config, http is not None):
        check_listen(*config.ui.address)  # the web view's own listener
    check_audit_key(config, file)
    check_audit_store(config, file, create=True)
    refuse_missing_commands(config, file)


def check_bind(config: GatewayConfig, host: str, port: int, *, insecure_no_auth: bool) -> None:
    """A non-loopback HTTP bind needs `auth`, unless `insecure_no_auth`."""
    if not is_loopback(host) and not config.auth.enabled and not insecure_no_auth:
        raise BindRefusedError(
            f"refusing to serve {authority(host, port)} without authentication; configure `auth` "
            "(tokens or jwt) or pass --insecure-no-auth"
        )


def check_listen(host: str, port: int) -> None:
    """Raise `ListenError` with the reason if HOST:PORT cannot be bound, as asyncio's `create_server` binds it.

    Checked before uvicorn starts: uvicorn only logs a failed bind and raises `SystemExit`.
    """
    try:
        addresses = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise ListenError(f"cannot listen on {authority(host, port)}: {exc.strerror or exc}") from None
    for family, kind, proto, _, address in addresses:
        try:
            probe = socket.socket(family, kind, proto)
        except OSError:  # a family this machine lacks: asyncio skips it too
            continue
        with probe:
            try:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                probe.bind(address)
            except OSError as exc:
                raise ListenError(f"cannot listen on {authority(host, port)}: {exc.strerror or exc}") from None


def check_metrics_listen(config: GatewayConfig, file: str, http: tuple[str, int] | None) -> None:
    """The metrics listener's address must be free, and not the HTTP front's, naming the setting (a bare
    `Address already in use` would not say which listener)."""
    if (address := config.metrics.address) is None:
        return
    where = f"metrics.listen in {file}"
    if http is not None and http[1] == address[1] and http[0] in (address[0], "", "0.0.0.0", "::"):
        raise ListenError(
            f"{where}: {authority(*address)} is where --http {authority(*http)} serves MCP; "
            "give the metrics listener another port, or use `http.metrics: true` to serve GET /metrics on the front"
        )
    try:
        check_listen(*address)
    except ListenError as exc:
        raise ListenError(f"{where}: {exc}") from None


def check_audit_key(config: GatewayConfig, file: str) -> None:
    """An existing key file must be readable as a key (the gateway creates a missing one at start)."""
    if not config.audit.enabled:
        return
    from mcp_interceptors.audit import DEFAULT_KEY_PATH, KeyFileError, load_key  # only with audit on

    path = audit_key_location(config) or DEFAULT_KEY_PATH.expanduser()
    if not path.exists():
        return
    try:
        load_key(path)
    except KeyFileError as exc:
        fix = "point audit.key_file at the gateway's key file, or at a path where it can create one"
        raise ConfigError(file, "audit.key_file", str(exc), fix) from None


def check_audit_store(config: GatewayConfig, file: str, *, create: bool) -> None:
    """The store's folder must exist or be creatable (`create`: create it, as the gateway does at start), and
    an existing store must be a file."""
    if not config.audit.enabled or "://" in config.audit.store:
        return
    path = Path(audit_store_location(config, create=False))
    folder = path.parent
    fix = "point audit.store at a path the gateway can write, or create its folder"
    if path.is_dir():
        raise ConfigError(file, "audit.store", f"{str(path)!r} is a folder, not a database file", fix)
    try:
        if create:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            return
        existing = next(p for p in (folder, *folder.parents) if p.exists())
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, "not a folder the gateway can write in", str(existing))
    except OSError as exc:
        raise ConfigError(
            file,
            "audit.store",
            f"cannot create the folder of {str(path)!r} ({exc.strerror}: {exc.filename or folder})",
            fix,
        ) from None


@dataclass(frozen=True)
class MissingCommand:
    """A stdio server whose command this machine cannot run."""

    role: str  # "upstream" or "interceptor server"
    name: str
    path: str  # the config field
    command: str
    reason: str  # "not found on PATH", "is not executable", ...

    def __str__(self) -> str:
        return f"{self.role} {self.name!r}: command {self.command!r} {self.reason}"


def missing_commands(config: GatewayConfig, *, interceptor_servers: bool = True) -> list[MissingCommand]:
    """The stdio upstreams (and interceptor servers) whose command or folder this machine cannot find."""
    servers: list[tuple[str, str, str, TransportConfig]] = [
        ("upstream", name, f"upstreams.{name}", server) for name, server in config.upstreams.items()
    ]
    if interceptor_servers:
        servers += [
            ("interceptor server", server.name, f"interceptors.servers[{index}]", server)
            for index, server in enumerate(config.interceptors.servers)
        ]
    missing = []
    for role, name, path, server in servers:
        if (reason := _why_not_runnable(server)) is not None:
            field = "cwd" if reason.startswith("cannot run in") else "command"
            missing.append(MissingCommand(role, name, f"{path}.{field}", server.command or "", reason))
    return missing


def _why_not_runnable(server: TransportConfig) -> str | None:
    if server.command is None:
        return None
    if server.cwd is not None and not Path(server.cwd).is_dir():
        return f"cannot run in {server.cwd!r}: no such folder"
    command = server.command
    if server.cwd is not None and os.sep in command and not os.path.isabs(command):
        command = os.path.join(server.cwd, command)  # where the gateway starts it (load_config sets cwd)
    if shutil.which(command, path=server.env.get("PATH")) is not None:
        return None
    if os.sep in command and Path(command).is_file():
        return "is not executable"
    return "not found on PATH" if os.sep not in command else "not found"


def refuse_missing_commands(config: GatewayConfig, file: str) -> None:
    """A server that cannot start is a config error here and now, before the others start."""
    for missing in missing_commands(config):
        fix = "install it, or give its full path" if missing.path.endswith("command") else "create the folder"
        raise ConfigError(file, missing.path, str(missing), fix)
