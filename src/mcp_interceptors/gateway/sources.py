"""Build the gateway's `Chain` from config: built-in guards, in-process hosts, remote interceptor servers.

Overrides are keyed by interceptor name and routed to whichever source advertises that name; a
name no source advertises is a configuration error, so a typo never silently disables policy.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import Any

from mcp import Client

from mcp_interceptors.gateway.config import ConfigError, GatewayConfig, InterceptorServerConfig, RequiredConfig
from mcp_interceptors.gateway.upstream import open_transport
from mcp_interceptors.host import hooks_for
from mcp_interceptors.invoker import Chain, LocalHost, RequiredInterceptor, UnavailableSource
from mcp_interceptors.planning import Overrides


def chain_for(config: GatewayConfig) -> Chain:
    c = config.chain
    return Chain(
        role="server",
        enforce_compat=c.enforce_compat,
        severity_rule=c.severity_rule,
        deadline_always_blocks=c.deadline_always_blocks,
        sinks=c.sinks,
        timeout_ms=c.deadline_ms,
    )


def load_guard(name: str, guard_config: Mapping[str, Any], file: str, index: int) -> LocalHost:
    try:
        from mcp_interceptors import guards
    except ImportError:  # pragma: no cover - the guards package ships with us
        raise ConfigError(
            file, f"interceptors.guards[{index}]", "built-in guards are unavailable", "reinstall"
        ) from None
    if name not in guards.available():
        raise ConfigError(
            file,
            f"interceptors.guards[{index}].name",
            f"unknown guard {name!r}",
            f"use one of: {', '.join(guards.available())}",
        )
    try:
        host: LocalHost = guards.load(name, dict(guard_config))
    except (ValueError, TypeError) as exc:
        raise ConfigError(file, f"interceptors.guards[{index}].config", str(exc), "see docs/guards.md") from None
    return host


def load_host(spec: str, file: str, index: int, base_dir: str | None = None) -> LocalHost:
    """Import `module:attribute`; the config file's folder is importable, like a script's own folder."""
    module_name, _, attribute = spec.partition(":")
    where = f"interceptors.hosts[{index}].module"
    if base_dir is not None and base_dir not in sys.path:
        sys.path.insert(0, base_dir)
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(file, where, f"cannot import {module_name!r}: {exc}", "check PYTHONPATH") from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ConfigError(file, where, f"{module_name!r} has no attribute {attribute!r}", "name the host object")
        target = getattr(target, part)
    if not (hasattr(target, "descriptors") and hasattr(target, "invoke")):
        raise ConfigError(file, where, f"{spec!r} is not an InterceptorHost", "point at an InterceptorHost instance")
    return target  # type: ignore[no-any-return]


def required_for(items: list[RequiredConfig]) -> list[RequiredInterceptor]:
    return [
        RequiredInterceptor(
            name=item.name,
            type=item.type,
            hooks=hooks_for(item.events, item.phase),
            mode=item.mode,
            fail_open=item.fail_open,
        )
        for item in items
    ]


async def populate_chain(chain: Chain, config: GatewayConfig, stack: AsyncExitStack, *, file: str) -> None:
    """Add every configured source to `chain`; remote clients stay open on `stack`."""
    overrides = {name: item.to_overrides() for name, item in config.interceptors.overrides.items()}
    for index, guard in enumerate(config.interceptors.guards):
        host = load_guard(guard.name, guard.config, file, index)
        chain.add_local(host, name=_unique(chain, guard.name), overrides=_pick(overrides, host))
    for index, host_config in enumerate(config.interceptors.hosts):
        host = load_host(host_config.module, file, index, config.base_dir)
        name = host_config.name or getattr(host, "name", None) or host_config.module
        chain.add_local(host, name=_unique(chain, name), overrides=_pick(overrides, host))
    for server in config.interceptors.servers:
        await _add_server(chain, server, overrides, stack)
    advertised = {entry.name for entry in chain.entries}
    for index, name in enumerate(config.interceptors.overrides):
        if name not in advertised:
            raise ConfigError(
                file,
                f"interceptors.overrides.{name}",
                f"no configured source advertises an interceptor named {name!r} (override #{index + 1})",
                f"use one of: {', '.join(sorted(advertised)) or '(none configured)'}",
            )


async def _add_server(
    chain: Chain, server: InterceptorServerConfig, overrides: dict[str, Overrides], stack: AsyncExitStack
) -> None:
    required = required_for(server.required)
    try:
        client = await stack.enter_async_context(Client(open_transport(server)))
    except Exception as exc:  # an unreachable host: pinned interceptors fail closed, others are absent
        if not required:
            raise ConfigError(
                "<runtime>", f"interceptors.servers.{server.name}", f"cannot connect: {exc}", "start it"
            ) from exc
        client = None
    if client is None:
        placeholders = [r.placeholder() for r in required]
        chain.add_source(UnavailableSource("connection failed"), placeholders, name=server.name)
        return
    await chain.add_server(client, name=server.name, overrides=overrides, required=required, strict_overrides=False)


def _pick(overrides: dict[str, Overrides], host: LocalHost) -> dict[str, Overrides]:
    names = {descriptor.name for descriptor in host.descriptors}
    return {name: value for name, value in overrides.items() if name in names}


def _unique(chain: Chain, name: str) -> str:
    taken = set(chain.sources)
    if name not in taken:
        return name
    suffix = 2
    while f"{name}-{suffix}" in taken:
        suffix += 1
    return f"{name}-{suffix}"
