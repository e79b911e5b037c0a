"""Built-in guards: interceptors that scan, validate and redact MCP payloads.

`load(name, config)` returns an `InterceptorHost` with that guard's interceptors, ready for
`Chain.add_local`, the gateway config, or `mcp-interceptors serve --guard NAME`. Each guard module
exposes `build(name: str, config: Mapping) -> InterceptorHost` and is imported only when loaded; those that
remember things across calls (`USES_STATE`) take a `state` store too (`mcp_interceptors.state`).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # not at run time: the CLI lists the guard names without importing mcp
    from mcp_interceptors.host import InterceptorHost
    from mcp_interceptors.state import StateStore

#: guard name -> module implementing `build(config)`
GUARD_MODULES: dict[str, str] = {
    "secrets": "mcp_interceptors.guards.secrets",
    "pii": "mcp_interceptors.guards.pii",
    "exfiltration-guard": "mcp_interceptors.guards.exfiltration",
    "tool-policy": "mcp_interceptors.guards.policy",
    "schema-guard": "mcp_interceptors.guards.schema",
    "prompt-injection": "mcp_interceptors.guards.injection",
    "rate-limit": "mcp_interceptors.guards.rate_limit",
    "sampling-guard": "mcp_interceptors.guards.client_features",
    "elicitation-guard": "mcp_interceptors.guards.client_features",
    "roots-guard": "mcp_interceptors.guards.client_features",
    "size-limit": "mcp_interceptors.guards.size",
    "tool-pinning": "mcp_interceptors.guards.pinning",
    "audit-log": "mcp_interceptors.guards.audit_log",
    "approval": "mcp_interceptors.guards.approval",
}

#: guard name -> its build-config keys that name a file (`-` is a stream, not a file): a gateway resolves
#: them against its config file's folder, as every path in its config.
PATH_KEYS: dict[str, tuple[str, ...]] = {"tool-pinning": ("pin_file",), "audit-log": ("path",)}


def available() -> list[str]:
    """Names of the guards that can be loaded, in a stable order."""
    return [name for name, module in GUARD_MODULES.items() if importlib.util.find_spec(module) is not None]


def load(name: str, config: Mapping[str, Any] | None = None, *, state: StateStore | None = None) -> InterceptorHost:
    """A fresh host with guard `name`'s interceptors; a bad `config` raises `ValueError` naming the field.

    Guards that remember things keep them in `state` (a gateway's shared store), else in one of their own."""
    module_name = GUARD_MODULES.get(name)
    if module_name is None or importlib.util.find_spec(module_name) is None:
        raise ValueError(f"unknown guard {name!r}; available: {', '.join(available()) or '(none)'}")
    if config is not None and not isinstance(config, Mapping):  # `dict(config or {})` took `[]` or `""` as no config
        raise ValueError(f"guard {name!r}: config must be a mapping (an object), got {type(config).__name__}")
    module = importlib.import_module(module_name)
    if state is not None and getattr(module, "USES_STATE", False):
        stateful: InterceptorHost = module.build(name, dict(config or {}), state)
        return stateful
    host: InterceptorHost = module.build(name, dict(config or {}))
    return host


__all__ = ["GUARD_MODULES", "PATH_KEYS", "available", "load"]
