"""Build the gateway's `Chain` from config: built-in guards, in-process hosts, remote interceptor servers.

Overrides are keyed by interceptor name and routed to whichever source advertises that name; a
name no source advertises is a configuration error, so a typo never silently disables policy. Per-interceptor
`config` objects are checked the same way, and against the interceptor's advertised `configSchema`.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from mcp_interceptors.gateway.config import ConfigError, GatewayConfig
from mcp_interceptors.gateway.interceptor_servers import ConnectionSource, add_server, verify_key_for
from mcp_interceptors.invoker import (
    Chain,
    LocalHost,
)
from mcp_interceptors.planning import Overrides
from mcp_interceptors.protocol.errors import (
    WideningOverrideError,
)
from mcp_interceptors.state import StateStore, open_state

logger = logging.getLogger(__name__)


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


def guard_config_in(name: str, guard_config: Mapping[str, Any], base_dir: str | None) -> dict[str, Any]:
    """The guard's config with its relative file paths resolved against `base_dir` (the config file's folder)."""
    from mcp_interceptors.guards import PATH_KEYS

    resolved = dict(guard_config)
    for key in PATH_KEYS.get(name, ()):
        value = resolved.get(key)
        if base_dir is not None and isinstance(value, str) and value != "-":
            resolved[key] = str(Path(base_dir) / Path(value).expanduser())  # an absolute path stays as it is
    return resolved


def state_for(config: GatewayConfig) -> StateStore | None:
    """The state store the config's `state` names: Redis, shared by replicas; None (each guard keeps its own
    in memory) without `state.redis_url`."""
    s = config.state
    if s.redis_url is None:
        return None
    return open_state(
        s.redis_url, key_prefix=s.key_prefix, max_connections=s.max_connections, timeout_s=s.timeout_seconds
    )


def load_guard(
    name: str, guard_config: Mapping[str, Any], file: str, index: int, state: StateStore | None = None
) -> LocalHost:
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
        host: LocalHost = guards.load(name, dict(guard_config), state=state)
    except (ValueError, TypeError) as exc:
        raise ConfigError(file, f"interceptors.guards[{index}].config", str(exc), "see docs/guards.md") from None
    return host


def _importable(base_dir: str | None) -> None:
    if base_dir is not None and base_dir not in sys.path:
        sys.path.insert(0, base_dir)


def load_host(spec: str, file: str, index: int, base_dir: str | None = None) -> LocalHost:
    """Import `module:attribute`; the config file's folder is importable, like a script's own folder."""
    module_name, _, attribute = spec.partition(":")
    where = f"interceptors.hosts[{index}].module"
    _importable(base_dir)
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


async def populate_chain(
    chain: Chain, config: GatewayConfig, tg: anyio.abc.TaskGroup, *, file: str, state: StateStore | None = None
) -> None:
    """Add every configured source to `chain`; remote hosts' connections run in `tg`; guards that remember
    things keep them in `state` (see `state_for`)."""
    overrides = {name: item.to_overrides() for name, item in config.interceptors.overrides.items()}
    guard_interceptors: list[tuple[str, dict[str, Any], list[str]]] = []
    # The config file's folder is importable for guards too (a prompt-injection detector next to it).
    if config.interceptors.guards:
        _importable(config.base_dir)
    with _widening_as_config_error(file):
        named = guard_source_configs(config)  # the guards come first: their source names are known up front
        for index, (source, (guard, guard_config)) in enumerate(named.items()):
            host = load_guard(guard, guard_config, file, index, state)
            guard_interceptors.append((guard, guard_config, [d.name for d in getattr(host, "descriptors", [])]))
            chain.add_local(host, name=_unique(chain, source), overrides=_pick(overrides, host))
        for index, host_config in enumerate(config.interceptors.hosts):
            host = load_host(host_config.module, file, index, config.base_dir)
            name = host_config.name or getattr(host, "name", None) or host_config.module
            chain.add_local(host, name=_unique(chain, name), overrides=_pick(overrides, host))
        for index, server in enumerate(config.interceptors.servers):
            verify_key = verify_key_for(server, file, index, config.base_dir)
            await add_server(chain, server, overrides, tg, verify_key, file=file, index=index)
    advertised = {entry.name for entry in chain.entries}
    for index, name in enumerate(config.interceptors.overrides):
        if name not in advertised:
            raise ConfigError(
                file,
                f"interceptors.overrides.{name}",
                f"no configured source advertises an interceptor named {name!r} (override #{index + 1})",
                f"use one of: {', '.join(sorted(advertised)) or '(none configured)'}",
            )
    check_interceptor_configs(config.interceptors.config, chain, file)
    await check_guard_configs(config.interceptors.config, guard_interceptors, file)


@contextmanager
def _widening_as_config_error(file: str) -> Iterator[None]:
    """A hook override that widens what its interceptor advertises (R62), as the config error it is."""
    try:
        yield
    except WideningOverrideError as exc:
        data = exc.data if isinstance(exc.data, Mapping) else {}
        path = f"interceptors.overrides.{data.get('interceptor', '?')}.hooks"
        fix = "list only events and phases it advertises (`gateway --check` shows them without the override)"
        raise ConfigError(file, path, exc.message, fix) from None


def check_interceptor_configs(configs: Mapping[str, Mapping[str, Any]], chain: Chain, file: str) -> None:
    """Each `interceptors.config.<name>` against the `configSchema` of every entry named so.

    The config is sent with every invocation: a value the interceptor refuses would fail every call
    (-32603) while `--check` said valid, and a name nothing advertises would never be sent at all.
    """
    schemas: dict[str, list[Mapping[str, Any]]] = {}
    for entry in chain.entries:
        found = schemas.setdefault(entry.name, [])
        if entry.descriptor.config_schema is not None:
            found.append(entry.descriptor.config_schema)
    for name, value in configs.items():
        path = f"interceptors.config.{name}"
        if name not in schemas:
            raise ConfigError(
                file,
                path,
                f"no configured source advertises an interceptor named {name!r}",
                f"use one of: {', '.join(sorted(schemas)) or '(none configured)'}",
            )
        for schema in schemas[name]:
            error = best_match(Draft202012Validator(schema).iter_errors(dict(value)))
            if error is not None:
                where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in error.absolute_path)
                fix = (
                    "remove the key; keys an interceptor does not advertise (a guard's build-only keys) go in"
                    " interceptors.guards[i].config"
                    if error.validator == "additionalProperties"
                    else f"give a value the configSchema of {name!r} allows (the guards' are in docs/guards.md)"
                )
                raise ConfigError(file, path + where, error.message, fix)


async def check_guard_configs(
    configs: Mapping[str, Mapping[str, Any]], guard_interceptors: list[tuple[str, dict[str, Any], list[str]]], file: str
) -> None:
    """Each `interceptors.config.<name>` of a built-in guard, as that guard compiles it.

    A configSchema cannot say everything a guard checks (a rate limit's notation, a regex that compiles,
    a CEL expression): the guard is built once with its build config overridden by the per-invocation
    one, as each invocation will, so a value it refuses is a config error here, not a failure of every call.
    """
    from mcp_interceptors import guards

    for guard, guard_config, names in guard_interceptors:
        for name in names:
            override = configs.get(name)
            if not override:
                continue
            try:
                probe = guards.load(guard, {**guard_config, **override})
            except (ValueError, TypeError) as exc:
                fix = f"give a value guard {guard!r} accepts (see docs/guards.md)"
                raise ConfigError(file, f"interceptors.config.{name}", str(exc), fix) from None
            closer = getattr(probe, "aclose", None)  # a Redis-backed rate-limit holds a (never used) pool
            if callable(closer):
                await closer()


def guard_source_configs(config: GatewayConfig) -> dict[str, tuple[str, dict[str, Any]]]:
    """Chain source name -> (guard name, its config, paths resolved) of every configured built-in guard, named
    as `populate_chain` names them (a guard configured twice is `name`, then `name-2`)."""
    named: dict[str, tuple[str, dict[str, Any]]] = {}
    for guard in config.interceptors.guards:
        source, suffix = guard.name, 2
        while source in named:
            source, suffix = f"{guard.name}-{suffix}", suffix + 1
        named[source] = (guard.name, guard_config_in(guard.name, guard.config, config.base_dir))
    return named


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


async def close_sources(chain: Chain, *, replaced_by: Chain | None = None) -> None:
    """Give in-process hosts that hold resources (a Redis pool, say) the chance to release them. `replaced_by` (a
    config reload put that chain in force): close this one's interceptor servers' connections too, and leave
    alone the sources the two share (a host module is imported once)."""
    replaced = replaced_by is not None
    shared = {id(source) for source in replaced_by.sources.values()} if replaced_by is not None else set()
    with anyio.CancelScope(shield=True), anyio.move_on_after(5):
        for source in chain.sources.values():
            if id(source) in shared:
                continue
            if replaced and isinstance(source, ConnectionSource):
                source.conn.close("a config reload replaced it")
            closer = getattr(source, "aclose", None)
            if callable(closer):
                await closer()
