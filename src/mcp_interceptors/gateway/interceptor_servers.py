"""The remote interceptor servers of the gateway's chain: each over a supervised upstream connection, read
again (`interceptors/list`) when it comes back or says its listing changed.

Pinned interceptors (`required`) stand in for a server that is down or whose listing fails: they fail
closed until it answers (R66). With `public_key`, a server's validation results must be signed by it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from mcp import MCPError

from mcp_interceptors.executor import Call
from mcp_interceptors.gateway.config import ConfigError, InterceptorServerConfig, RequiredConfig
from mcp_interceptors.gateway.upstream.connection import UpstreamConnection
from mcp_interceptors.gateway.upstream.errors import UpstreamTimeoutError, UpstreamUnavailableError
from mcp_interceptors.host import hooks_for
from mcp_interceptors.invoker import (
    DEFAULT_DISCOVERY_TIMEOUT_MS,
    HOST_TIMEOUT_GRACE_MS,
    Chain,
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
            # routed by mode/failOpen; waiting for the reconnect would hold each call for the chain's whole deadline
            # and report a chain timeout.
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


async def add_server(
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
