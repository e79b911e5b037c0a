"""Desktop clients' server lists read as the gateway's upstreams: Claude Desktop's, Claude Code's and
Cursor's `{"mcpServers": {...}}`, and VS Code's `{"servers": {...}}` (`mcp.json`).

| client key | becomes | notes |
|---|---|---|
| `command`, `args`, `env`, `cwd` | the same (a stdio upstream) | `cwd` relative to the workspace (below) |
| `url` (`serverUrl`), `headers` | the same (an HTTP upstream) | |
| `type` / `transportType` | `stdio`, `http`/`streamable-http`/`streamableHttp`, `sse` | else inferred |
| `timeout` (seconds) | `timeout_ms` | |
| `disabled: true` | the server is left out | as the client does |
| `autoApprove`, `alwaysAllow`, `disabledTools`, `description`, ... | ignored | the client's own (`_CLIENT_ONLY`) |

Strings may use `${env:VAR}`, `${VAR}`, `${userHome}`, `${workspaceFolder}` (the folder above a
`.vscode/` or `.cursor/` file, else the file's folder) and `${pathSeparator}`; `${input:...}` (a
VS Code prompt) and any other key is a config error. Top-level keys other than the server list are
the client's and are left alone.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mcp_interceptors.gateway.config.base import ConfigError

#: Top-level keys holding a client's servers: most clients' `mcpServers`, VS Code's `servers`.
SERVER_LISTS = ("mcpServers", "servers")
_TRANSPORTS = {
    "stdio": "stdio",
    "http": "streamable-http",
    "streamable-http": "streamable-http",
    "streamableHttp": "streamable-http",
    "sse": "sse",
}
_TRANSPORT_KEYS = frozenset({"command", "args", "env", "cwd", "url", "serverUrl", "headers", "type", "transportType"})
_CLIENT_ONLY = frozenset(
    {"disabled", "autoApprove", "alwaysAllow", "disabledTools", "description", "dev", "gallery", "version", "timeout"}
)
_VARIABLE = re.compile(r"\$\{([A-Za-z]+)(?::([^}]*))?\}")
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


def server_list_key(raw: Any) -> str | None:
    """The key of the client server list `raw` holds, if it is a client config (and not a gateway one)."""
    if not isinstance(raw, dict) or "upstreams" in raw:
        return None
    return next((key for key in SERVER_LISTS if isinstance(raw.get(key), dict)), None)


def client_only_keys(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of a server entry that are the client's own (`disabled`, `autoApprove`, ...)."""
    return {key: value for key, value in entry.items() if key in _CLIENT_ONLY}


def workspace_of(file: Path) -> Path:
    """The folder `${workspaceFolder}` and relative paths mean: above `.vscode/` or `.cursor/`, else the file's."""
    folder = file.resolve().parent
    return folder.parent if folder.name in (".vscode", ".cursor") else folder


def upstream_name(name: str) -> str:
    """A client's server name as an upstream name (letters, digits, '.', '_', '-'): `My Server` -> `My-Server`."""
    return _UNSAFE_NAME.sub("-", name).strip("-._") or "server"


def client_upstreams(raw: Mapping[str, Any], file: str, workspace: Path, only: str | None = None) -> dict[str, Any]:
    """The client's enabled servers (or only the one named `only`) as `upstreams` entries."""
    key = server_list_key(raw)
    assert key is not None
    servers: Mapping[str, Any] = raw[key]
    if only is not None:
        if only not in servers:
            known = ", ".join(map(repr, servers)) or "(none)"
            raise ConfigError(file, key, f"no server named {only!r}", f"name one of: {known}")
        servers = {only: servers[only]}
    upstreams: dict[str, Any] = {}
    named: dict[str, str] = {}
    for name, entry in servers.items():
        path = f"{key}.{name}"
        if not isinstance(entry, dict):
            raise ConfigError(file, path, "a server must be an object", 'give e.g. {"command": "npx", "args": [...]}')
        if entry.get("disabled") is True:
            if only is not None:
                raise ConfigError(file, f"{path}.disabled", "this server is disabled in the client", "enable it first")
            continue
        upstream = upstream_name(str(name))
        if (other := named.setdefault(upstream, str(name))) != name:
            raise ConfigError(
                file, path, f"{name!r} and {other!r} are both upstream {upstream!r}", "rename one of them"
            )
        upstreams[upstream] = _upstream(entry, file, path, workspace)
    return upstreams


def _upstream(entry: Mapping[str, Any], file: str, path: str, workspace: Path) -> dict[str, Any]:
    unknown = [key for key in entry if key not in _TRANSPORT_KEYS | _CLIENT_ONLY]
    if unknown:
        supported, ignored = ", ".join(sorted(_TRANSPORT_KEYS)), ", ".join(sorted(_CLIENT_ONLY))
        fix = (
            "move its variables into `env`"
            if unknown[0] == "envFile"
            else f"remove it; the gateway reads {supported} (and ignores the client's own {ignored})"
        )
        raise ConfigError(file, f"{path}.{unknown[0]}", "not a setting the gateway can read", fix)
    entry = {key: _expanded(value, file, f"{path}.{key}", workspace) for key, value in entry.items()}
    kind = entry.get("type", entry.get("transportType"))
    if kind is not None and kind not in _TRANSPORTS:
        raise ConfigError(file, f"{path}.type", f"unknown transport {kind!r}", f"use one of: {', '.join(_TRANSPORTS)}")
    url = entry.get("url", entry.get("serverUrl"))
    upstream: dict[str, Any] = {key: entry[key] for key in ("command", "args", "env") if key in entry}
    if url is not None:
        upstream.update(url=url, headers=entry.get("headers", {}))
        if kind is not None and _TRANSPORTS[kind] != "stdio":
            upstream["transport"] = _TRANSPORTS[kind]
    elif "headers" in entry:
        upstream["headers"] = entry["headers"]  # refused at its field: a stdio server sends none
    if "command" in upstream:
        cwd = entry.get("cwd")
        upstream["cwd"] = str(workspace / Path(cwd).expanduser()) if isinstance(cwd, str) else str(workspace)
    if isinstance(entry.get("timeout"), int | float) and not isinstance(entry["timeout"], bool):
        upstream["timeout_ms"] = entry["timeout"] * 1000
    return upstream


def _expanded(value: Any, file: str, path: str, workspace: Path) -> Any:
    """The client's `${...}` variables written as the gateway's (`${env:X}` -> `${X}`) or as their values."""
    if isinstance(value, dict):
        return {k: _expanded(v, file, f"{path}.{k}", workspace) for k, v in value.items()}
    if isinstance(value, list):
        return [_expanded(v, file, f"{path}[{i}]", workspace) for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def replace(match: re.Match[str]) -> str:
        kind, argument = match.group(1), match.group(2)
        if argument is not None and argument.startswith("-"):
            return match.group(0)  # `${VAR:-default}`: the gateway's own substitution
        if argument is None:
            fixed = {"userHome": str(Path.home()), "workspaceFolder": str(workspace), "pathSeparator": os.sep}
            return fixed.get(kind, match.group(0))  # `${VAR}`: the gateway's own substitution
        if kind == "env":
            return f"${{{argument}}}"
        if kind == "input":
            problem = f"${{input:{argument}}} is a value VS Code prompts for; the gateway cannot prompt"
            fix = f"export a variable and write ${{env:NAME}} instead of ${{input:{argument}}}"
            raise ConfigError(file, path, problem, fix)
        raise ConfigError(file, path, f"the variable {match.group(0)} is not one the gateway knows", "use ${env:NAME}")

    return _VARIABLE.sub(replace, value)
