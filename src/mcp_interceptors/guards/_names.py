"""Where guards find names in payloads and contexts: request params (also bare, conformance-style),
tool names and arguments, the server a payload belongs to, session and principal keys, and globs.

Payloads are opaque to the framework, so every reader here tolerates shapes it does not expect.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mcp_interceptors.host import Invocation

__all__ = [
    "GATEWAY_SEPARATOR",
    "Glob",
    "ServerMap",
    "arguments_of",
    "params_of",
    "principal_key",
    "server_for",
    "tool_name_of",
]

#: How the gateway exposes a tool of one of several upstreams: `<prefix>__<name>`.
GATEWAY_SEPARATOR = "__"
_EMPTY: Mapping[str, Any] = {}


def params_of(payload: Any) -> Mapping[str, Any]:
    """A request payload's params: `payload["params"]`, or the payload itself when it is bare params."""
    # `type(...) is dict` first: JSON payloads are dicts, and an ABC's isinstance costs several times more.
    if type(payload) is not dict and not isinstance(payload, Mapping):
        return _EMPTY
    params = payload.get("params")
    if (type(params) is dict or isinstance(params, Mapping)) and isinstance(payload.get("method"), str):
        return params
    return payload


def tool_name_of(payload: Any) -> str | None:
    name = params_of(payload).get("name")
    return name if isinstance(name, str) else None


def arguments_of(payload: Any) -> Mapping[str, Any]:
    arguments = params_of(payload).get("arguments")
    return arguments if isinstance(arguments, Mapping) else _EMPTY


def principal_key(inv: Invocation) -> str:
    principal = inv.context.principal if inv.context is not None else None
    if principal is None:
        return "anonymous"
    return f"{principal.type}:{principal.id}" if principal.id else principal.type


class Glob:
    """A set of shell-style globs (`*`, `?`, `[...]`) compiled into one case-sensitive regex."""

    __slots__ = ("_regex", "patterns")

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(patterns)
        source = "|".join(f"(?:{fnmatch.translate(p)})" for p in self.patterns)
        self._regex = re.compile(source) if self.patterns else None

    def matches(self, value: str | None) -> bool:
        return value is not None and self._regex is not None and self._regex.match(value) is not None

    def matches_name(self, name: str | None, *, prefix: str | None = None) -> bool:
        """Matches a tool or prompt name, or the part after a gateway's `<prefix>__` (`delete_*` covers
        `notes__delete_everything`). With `prefix`, only that one is taken off: what widens a denylist would
        let an allowlist's `echo` pass a tool an upstream named `evil__echo` itself."""
        if self.matches(name):
            return True
        if name is None or GATEWAY_SEPARATOR not in name:
            return False
        head, rest = name.split(GATEWAY_SEPARATOR, 1)
        return (prefix is None or head == prefix) and self.matches(rest)

    def __bool__(self) -> bool:
        return bool(self.patterns)


class ServerMap:
    """`{glob: server}` for use outside the gateway: which server a tool (prompt, resource URI) belongs to."""

    def __init__(self, mapping: Mapping[str, str]) -> None:
        self._entries: Sequence[tuple[Glob, str]] = [(Glob([glob]), server) for glob, server in mapping.items()]

    def lookup(self, name: str | None) -> str | None:
        for glob, server in self._entries:
            if glob.matches(name):
                return server
        return None


def server_for(inv: Invocation, name: str | None, servers: ServerMap | None = None) -> str | None:
    """The server a payload belongs to: the context's `server` (filled by the gateway), else the
    configured map, else the gateway's `<prefix>__` on the name, else unknown (None)."""
    if inv.context is not None and inv.context.server:
        return inv.context.server
    if servers is not None:
        found = servers.lookup(name)
        if found is not None:
            return found
    if name and GATEWAY_SEPARATOR in name:
        return name.split(GATEWAY_SEPARATOR, 1)[0]
    return None
