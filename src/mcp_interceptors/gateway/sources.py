"""Build the gateway's `Chain` from config: built-in guards, in-process hosts, remote interceptor servers.

Overrides are keyed by interceptor name and routed to whichever source advertises that name; a
name no source advertises is a configuration error, so a typo never silently disables policy. Per-interceptor
`config` objects are checked the same way, and against the interceptor's advertised `configSchema`.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import anyio.abc
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from mcp import MCPError

from mcp_interceptors.executor import Call
from mcp_interceptors.gateway.config import ConfigError, GatewayConfig, InterceptorServerConfig, RequiredConfig
from mcp_interceptors.gateway.upstream.connection import UpstreamConnection
from mcp_interceptors.gateway.upstream.errors import UpstreamTimeoutError, UpstreamUnavailableError
from mcp_interceptors.host import hooks_for
from mcp_interceptors.invoker import (
    DEFAULT_DISCOVERY_TIMEOUT_MS,
    HOST_TIMEOUT_GRACE_MS,
    Chain,
    LocalHost,
    RequiredInterceptor,
    invocation_error,
    invoke_body,
    read_invoke_result,
)
from mcp_interceptors.planning import Overrides
from mcp_interceptors.protocol.descriptors import InterceptorDescriptor, parse_list_result
from mcp_interceptors.protocol.errors import (
    INVALID_PARAMS,
    HostConnectionError,
    InterceptorsError,
    InterceptorTimeoutError,
    WideningOverrideError,
)
from mcp_interceptors.protocol.invoke import INVOKE_METHOD, LIST_METHOD
from mcp_interceptors.protocol.results import InterceptorResult
from mcp_interceptors.signatures import load_verify_key, verify_key_from

logger = logging.getLogger(__name__)

#: What an interceptor server may send when its listing changed (the prefix is reserved by the spec, §2).
LIST_CHANGED_NOTIFICATION = "notifications/interceptors/list_changed"


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


async def populate_chain(chain: Chain, config: GatewayConfig, tg: anyio.abc.TaskGroup, *, file: str) -> None:
    """Add every configured source to `chain`; remote hosts' connections run in `tg`."""
    overrides = {name: item.to_overrides() for name, item in config.interceptors.overrides.items()}
    guard_interceptors: list[tuple[str, dict[str, Any], list[str]]] = []
    # The config file's folder is importable for guards too (a prompt-injection detector next to it).
    if config.interceptors.guards:
        _importable(config.base_dir)
    with _widening_as_config_error(file):
        for index, guard in enumerate(config.interceptors.guards):
            guard_config = guard_config_in(guard.name, guard.config, config.base_dir)
            host = load_guard(guard.name, guard_config, file, index)
            guard_interceptors.append((guard.name, guard_config, [d.name for d in getattr(host, "descriptors", [])]))
            chain.add_local(host, name=_unique(chain, guard.name), overrides=_pick(overrides, host))
        for index, host_config in enumerate(config.interceptors.hosts):
            host = load_host(host_config.module, file, index, config.base_dir)
            name = host_config.name or getattr(host, "name", None) or host_config.module
            chain.add_local(host, name=_unique(chain, name), overrides=_pick(overrides, host))
        for index, server in enumerate(config.interceptors.servers):
            verify_key = verify_key_for(server, file, index, config.base_dir)
            await _add_server(chain, server, overrides, tg, verify_key, file=file, index=index)
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


class ConnectionSource:
    """A remote interceptor host over a supervised connection: it reconnects with backoff after a
    crash, and meanwhile its invocations fail and are routed by mode/failOpen. With `verify_key`,
    its validation results must be signed by that key (else the invocation fails, too)."""

    def __init__(
        self, conn: UpstreamConnection, *, verify_key: Ed25519PublicKey | None = None, unavailable: str | None = None
    ) -> None:
        self.conn = conn
        self.verify_key = verify_key
        #: Why the host could not be reached at start: until it first connects, invocations fail at once.
        self.unavailable = unavailable
        #: Called when the host answers that it has no such interceptor (or not so hooked): its listing changed
        #: without a reconnect the gateway could see (a stateless Streamable HTTP host restarted as a new version).
        self.on_stale: Callable[[], None] | None = None

    async def discover(self) -> list[InterceptorDescriptor]:
        # As `Chain.add_server` does: a listing that hangs must not hold the gateway's start for the
        # server's per-request `timeout_ms` (60 s by default).
        timeout_ms = min(self.conn.config.timeout_ms, DEFAULT_DISCOVERY_TIMEOUT_MS)
        raw = await self.conn.request(LIST_METHOD, None, timeout_s=timeout_ms / 1000)
        found, warnings = parse_list_result(raw)
        for warning in warnings:
            logger.warning(
                "%s: skipped descriptor #%d (%s): %s", self.conn.name, warning.index, warning.name, warning.reason
            )
        return found

    async def invoke(self, call: Call) -> InterceptorResult:
        if not self.conn.up:
            # Down at start, or restarting (backing off, or mid-handshake): fail at once as an invocation failure,
            # routed by mode/failOpen. Waiting for the reconnect held each call for the chain's whole deadline and
            # reported it as a chain timeout.
            reason = self.unavailable if self.unavailable is not None and self.conn.info is None else None
            raise HostConnectionError(
                call.name, f"interceptor host unavailable: {reason or self.conn.unavailable().message}"
            )
        body = invoke_body(
            call.name,
            call.event,
            call.phase,
            call.payload,
            config=call.config,
            timeout_ms=call.timeout_ms,
            context=call.context,
        )
        # The host enforces `timeoutMs`; we wait for it locally too, with a grace for its own timeout error
        # (R59), else a hung host holds a direct `interceptor/invoke` for the connection's whole timeout.
        limit_ms = call.timeout_ms + HOST_TIMEOUT_GRACE_MS if call.timeout_ms is not None else None
        try:
            raw = await self.conn.request(INVOKE_METHOD, body, timeout_s=limit_ms / 1000 if limit_ms else None)
        except UpstreamUnavailableError as exc:  # -32000 with data: not the host's timeout, the host is gone
            raise HostConnectionError(call.name, exc.message) from None
        except UpstreamTimeoutError:  # our own deadline: a timeout naming the interceptor, its limit and phase
            waited_ms = limit_ms if limit_ms is not None else self.conn.config.timeout_ms
            raise InterceptorTimeoutError(call.name, waited_ms, call.phase) from None
        except MCPError as exc:
            if self.on_stale is not None and _stale_listing(exc, call.name):
                self.on_stale()
            raise invocation_error(exc, call.name) from None
        return read_invoke_result(raw, call.name, call.phase, call.type, verify_key=self.verify_key)


def _stale_listing(exc: MCPError, name: str) -> bool:
    """Whether a host's error says `name` is not (or no longer so) in its listing: -32602, unknown interceptor
    or not hooked to the event (`advertisedHooks`), as `InterceptorNotFoundError` and `HookMismatchError`."""
    data = exc.data if isinstance(exc.data, Mapping) else {}
    if exc.code != INVALID_PARAMS or name not in (data.get("interceptor"), data.get("name")):
        return False
    return "advertisedHooks" in data or exc.message.startswith("Unknown interceptor")


def verify_key_for(
    server: InterceptorServerConfig, file: str, index: int, base_dir: str | None
) -> Ed25519PublicKey | None:
    """`public_key`: the base64url raw key itself, else a file (relative to the config's folder) holding one."""
    value = server.public_key
    if value is None:
        return None
    where = f"interceptors.servers[{index}].public_key"
    try:
        return verify_key_from(value)
    except ValueError:
        pass  # not a key: a file name
    path = Path(value).expanduser()
    if base_dir is not None and not path.is_absolute():
        path = Path(base_dir) / path
    try:
        return load_verify_key(path)
    except OSError as exc:
        fix = "give the host's base64url public key (43 characters) or the path of a file holding it"
        raise ConfigError(file, where, f"not a key, and cannot read {str(path)!r} ({exc.strerror})", fix) from None
    except ValueError as exc:
        problem = f"{path} holds no Ed25519 public key: {exc}"
        raise ConfigError(file, where, problem, "put the host's public key in it (base64url or PEM)") from None


async def _add_server(
    chain: Chain,
    server: InterceptorServerConfig,
    overrides: dict[str, Overrides],
    tg: anyio.abc.TaskGroup,
    verify_key: Ed25519PublicKey | None = None,
    *,
    file: str = "<config>",
    index: int = 0,
) -> None:
    required = required_for(server.required)
    # A pin's overrides apply whether or not its host can be reached at start (as `add_discovered` applies them).
    pinned_overrides = {pin.name: overrides[pin.name] for pin in required if pin.name in overrides}
    conn = UpstreamConnection(server.name, server, role="interceptor server")
    try:
        await tg.start(conn.run)
    except UpstreamUnavailableError as exc:  # an unreachable host: pinned interceptors fail closed (R66)
        if not required:
            where = f"interceptors.servers[{index}]"
            raise ConfigError(file, where, exc.message, "start it, or pin `required` interceptors") from None
        logger.error(
            "interceptor server %r is unavailable (%s): its required interceptors fail closed until it connects",
            server.name,
            exc.message,
        )
        # Keep trying, with the connection's backoff: once it is up, its listing replaces the pins' stand-ins.
        source = ConnectionSource(conn, verify_key=verify_key, unavailable=exc.message)
        chain.add_source(source, [r.placeholder() for r in required], name=server.name, overrides=pinned_overrides)
        _rediscover_when_it_changes(chain, source, overrides, required, tg)
        tg.start_soon(partial(conn.run, retry_start=True))
        return
    source = ConnectionSource(conn, verify_key=verify_key)

    async def discover() -> list[InterceptorDescriptor]:
        """The host's listing; if it fails, its pins stand in, invoked on this connection as for a host
        down at start: they fail closed while it fails, and run there once it answers (it reconnects)."""
        try:
            return await source.discover()
        except (MCPError, OSError, InterceptorsError) as exc:
            if not required:
                raise
            logger.error(
                "interceptors/list failed on interceptor server %r (%s): its required interceptors fail closed"
                " until it answers them",
                server.name,
                exc,
            )
            return [pin.placeholder() for pin in required]

    await chain.add_discovered(
        source, discover, name=server.name, overrides=overrides, required=required, strict_overrides=False
    )
    _rediscover_when_it_changes(chain, source, overrides, required, tg)


def _rediscover_when_it_changes(
    chain: Chain,
    source: ConnectionSource,
    overrides: dict[str, Overrides],
    required: list[RequiredInterceptor],
    tg: anyio.abc.TaskGroup,
) -> None:
    """Read the server's `interceptors/list` again each time its connection comes back (it may be a new
    version) and when it sends `notifications/interceptors/list_changed`, and swap its interceptors in the
    chain (`Chain.replace_discovered`: between calls, overrides applied, pins it no longer lists fail closed).
    A listing that fails, or that an override widens, leaves its interceptors as they were."""
    name = source.conn.name
    lock = anyio.Lock()  # one listing at a time, swapped in the order they were read

    async def rediscover(why: str) -> None:
        async with lock:
            try:
                found = await source.discover()
            except (MCPError, OSError, InterceptorsError) as exc:
                logger.error(
                    "interceptors/list failed on interceptor server %r after %s (%s): its interceptors stay as listed"
                    " before",
                    name,
                    why,
                    exc,
                )
                return
            try:
                chain.replace_discovered(
                    source, found, name=name, overrides=overrides, required=required, strict_overrides=False
                )
            except WideningOverrideError as exc:
                logger.error(
                    "interceptor server %r lists anew after %s, but %s: its interceptors stay as listed before",
                    name,
                    why,
                    exc.message,
                )
                return
            logger.info("interceptor server %r lists after %s: %s", name, why, [d.name for d in found])

    def on_connected() -> None:
        tg.start_soon(rediscover, "it connected")

    async def on_notify(method: str, params: Mapping[str, Any] | None) -> None:
        if method == LIST_CHANGED_NOTIFICATION:
            tg.start_soon(rediscover, LIST_CHANGED_NOTIFICATION)

    def on_stale() -> None:
        if not lock.locked():  # one listing answers every call that found it stale
            tg.start_soon(rediscover, "it refused an interceptor it listed")

    source.conn.on_connected = on_connected
    source.on_stale = on_stale
    source.conn.on_notify = on_notify


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
