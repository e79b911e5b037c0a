"""rate-limit: a request-phase validator enforcing moving-window limits (the `limits` library) per session,
principal, server, tool and event, in memory by default or in Redis when `redis_url` is configured.

In memory the limiter is synchronous and does no IO, so it runs inline; Redis goes through `limits.aio`.
Each rule counts separately; a call is denied by the first rule whose window is full.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from limits import RateLimitItem, parse_many
from limits.aio.strategies import MovingWindowRateLimiter as AsyncMovingWindow
from limits.storage import MemoryStorage, storage_from_string
from limits.strategies import MovingWindowRateLimiter

from mcp_interceptors.guards._config import EVENT, EVENT_OR_WILDCARD, GuardSchema, SettingsCache
from mcp_interceptors.guards._names import Glob, ServerMap, params_of, principal_key, server_for
from mcp_interceptors.host import InterceptorHost, Invocation
from mcp_interceptors.protocol.errors import StateUnavailableError
from mcp_interceptors.protocol.results import ValidationMessage, ValidationResult

DIMENSIONS = ("session", "principal", "server", "tool", "event")
DEFAULT_EVENTS = ["tools/call", "prompts/get", "resources/read"]
SCHEMA = GuardSchema(
    {
        "limits": {
            "type": "array",
            "default": [{"limit": "120/minute", "per": ["session"]}],
            "description": "Rules, each counted on its own.",
            "items": {
                "type": "object",
                "properties": {
                    "limit": {"type": "string", "description": "`limits` notation: '10/second', '100 per hour;5/s'."},
                    "per": {
                        "type": "array",
                        "items": {"enum": list(DIMENSIONS)},
                        "uniqueItems": True,
                        "default": ["session"],
                        "description": "Count separately per value of these.",
                    },
                    "tool": {"type": "string", "description": "Only for tools (prompts, resource URIs) matching."},
                    "server": {"type": "string", "description": "Only for servers matching this glob."},
                    "events": {"type": "array", "items": EVENT},
                },
                "required": ["limit"],
                "additionalProperties": False,
            },
        },
        "tool_servers": {"type": "object", "additionalProperties": {"type": "string"}, "default": {}},
        "events": {"type": "array", "items": EVENT_OR_WILDCARD, "minItems": 1, "default": DEFAULT_EVENTS},
        "redis_url": {"type": ["string", "null"], "default": None, "description": "redis://host:port/db"},
        "key_prefix": {"type": "string", "default": "mcp-interceptors"},
    },
    build_only=["events", "redis_url", "key_prefix"],
)
#: Connections each rate-limit guard holds to its Redis, and how long a call waits for one and for the answer.
MAX_CONNECTIONS = 16
TIMEOUT_S = 1.0
DESCRIPTION = "Moving-window rate limits per session, principal, server, tool and event."


class _Limiter(Protocol):
    async def test(self, item: RateLimitItem, *identifiers: str) -> bool: ...

    async def hit(self, item: RateLimitItem, *identifiers: str) -> bool: ...

    async def reset_in(self, item: RateLimitItem, *identifiers: str) -> float: ...


class _MemoryLimiter:
    def __init__(self) -> None:
        self._limiter = MovingWindowRateLimiter(MemoryStorage())

    async def test(self, item: RateLimitItem, *identifiers: str) -> bool:
        return self._limiter.test(item, *identifiers)

    async def hit(self, item: RateLimitItem, *identifiers: str) -> bool:
        return self._limiter.hit(item, *identifiers)

    async def reset_in(self, item: RateLimitItem, *identifiers: str) -> float:
        return self._limiter.get_window_stats(item, *identifiers).reset_time - time.time()


class _RedisLimiter:
    def __init__(self, url: str, key_prefix: str) -> None:
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"config.redis_url {url!r} must be a redis:// (or rediss://, unix://) URL")
        try:
            import redis.asyncio
        except ImportError:
            raise ValueError(
                "config.redis_url needs the redis package: pip install 'mcp-interceptors[redis]'"
            ) from None
        # We own the client (and so its pool), so `aclose` can release its connections. The pool is bounded
        # as the state store's is (`state.max_connections`): a call waits for a connection, then fails closed.
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            url,
            max_connections=MAX_CONNECTIONS,
            timeout=TIMEOUT_S,
            socket_timeout=TIMEOUT_S,
            socket_connect_timeout=TIMEOUT_S,
        )
        self._client = redis.asyncio.Redis.from_pool(pool)
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self._where = url.rsplit("@", 1)[-1]  # never the password of redis://user:password@host
        storage = storage_from_string(
            "async+redis://",  # the URL is the pool's; limits only picks its Redis storage from the scheme
            implementation="redispy",
            key_prefix=key_prefix,
            connection_pool=self._client.connection_pool,  # type: ignore[arg-type]  # typed for URL options only
        )
        self._limiter = AsyncMovingWindow(storage)

    def _unavailable(self, exc: BaseException) -> StateUnavailableError:
        return StateUnavailableError(f"Redis at {self._where}: {type(exc).__name__}: {exc}")

    async def test(self, item: RateLimitItem, *identifiers: str) -> bool:
        try:
            return await self._limiter.test(item, *identifiers)
        except self._errors as exc:
            raise self._unavailable(exc) from None

    async def hit(self, item: RateLimitItem, *identifiers: str) -> bool:
        try:
            return await self._limiter.hit(item, *identifiers)
        except self._errors as exc:
            raise self._unavailable(exc) from None

    async def reset_in(self, item: RateLimitItem, *identifiers: str) -> float:
        try:
            stats = await self._limiter.get_window_stats(item, *identifiers)
        except self._errors as exc:
            raise self._unavailable(exc) from None
        return stats.reset_time - time.time()

    async def aclose(self) -> None:
        await self._client.aclose(close_connection_pool=True)


class RateLimitHost(InterceptorHost):
    """The rate-limit host; `aclose()` releases its Redis connections (a no-op in memory)."""

    def __init__(self, name: str, limiter: _Limiter) -> None:
        super().__init__(name, copy_payloads=False)
        self.limiter = limiter

    async def aclose(self) -> None:
        if isinstance(self.limiter, _RedisLimiter):
            await self.limiter.aclose()


@dataclass(frozen=True, slots=True)
class _Rule:
    index: int
    items: Sequence[RateLimitItem]
    per: Sequence[str]
    tool: Glob | None
    server: Glob | None
    events: frozenset[str] | None


@dataclass(frozen=True, slots=True)
class _Settings:
    rules: Sequence[_Rule]
    servers: ServerMap


def _compile(raw: Mapping[str, Any]) -> _Settings:
    rules = []
    for index, rule in enumerate(raw["limits"]):
        try:
            items = parse_many(rule["limit"])
        except ValueError:
            items = []
        if not items or any(item.amount < 1 for item in items):
            raise ValueError(
                f"config.limits[{index}].limit {rule['limit']!r} is not a rate limit of at least 1 call; "
                "write e.g. '10/minute' (to refuse a tool outright, use tool-policy)"
            )
        hooked = raw["events"]
        for position, event in enumerate(rule.get("events", ())):
            if "*" not in hooked and event not in hooked:
                raise ValueError(
                    f"config.limits[{index}].events[{position}] {event!r} is not one of the events the guard "
                    f"checks (config.events: {', '.join(hooked)}), so the rule would never count; add it there"
                )
        rules.append(
            _Rule(
                index,
                items,
                tuple(rule.get("per", ["session"])),
                Glob([rule["tool"]]) if "tool" in rule else None,
                Glob([rule["server"]]) if "server" in rule else None,
                frozenset(rule["events"]) if "events" in rule else None,
            )
        )
    return _Settings(rules, ServerMap(raw["tool_servers"]))


def _item_name(inv: Invocation) -> str | None:
    """The tool, prompt or resource a request is about."""
    params = params_of(inv.payload)
    value = params.get("uri") if inv.event.startswith("resources/") else params.get("name")
    return value if isinstance(value, str) else None


def _names_item(glob: Glob, event: str, item: str | None) -> bool:
    """A rule's `tool` glob matches a tool or prompt name as tool-policy's do (also after a gateway prefix),
    and a resource URI as it is."""
    return glob.matches(item) if event.startswith("resources/") else glob.matches_name(item)


def _identity(inv: Invocation, item: str | None, server: str | None, dimension: str) -> str:
    match dimension:
        case "session":
            return inv.session_id or "anonymous"
        case "principal":
            return principal_key(inv)
        case "server":
            return server or "unknown"
        case "tool":
            return item or "unknown"
        case _:
            return inv.event


class RateLimitGuard:
    def __init__(self, settings: SettingsCache[_Settings], limiter: _Limiter) -> None:
        self.settings = settings
        self.limiter = limiter

    async def check(self, inv: Invocation) -> ValidationResult | bool:
        settings = self.settings.for_config(inv.config)
        item_name = _item_name(inv)
        server = server_for(inv, item_name, settings.servers)
        counted: list[tuple[_Rule, RateLimitItem, tuple[str, ...], dict[str, str]]] = []
        for rule in settings.rules:
            if rule.events is not None and inv.event not in rule.events:
                continue
            if (rule.tool is not None and not _names_item(rule.tool, inv.event, item_name)) or (
                rule.server is not None and not rule.server.matches(server)
            ):
                continue
            keys = {dimension: _identity(inv, item_name, server, dimension) for dimension in rule.per}
            identifiers = (f"rule{rule.index}", *(f"{k}={v}" for k, v in keys.items()))
            counted.extend((rule, item, identifiers, keys) for item in rule.items)
        # A refused call uses up no limit: with several, every limit is tested before any is hit. A hit can
        # still fail when another replica got there in between; the call is refused then too. One limit needs
        # no test: a hit on a full window records nothing (one round trip to Redis instead of two).
        if len(counted) > 1:
            for rule, item, identifiers, keys in counted:
                if not await self.limiter.test(item, *identifiers):
                    return await self._denied(rule, item, identifiers, keys)
        for rule, item, identifiers, keys in counted:
            if not await self.limiter.hit(item, *identifiers):
                return await self._denied(rule, item, identifiers, keys)
        return True

    async def _denied(
        self, rule: _Rule, item: RateLimitItem, identifiers: tuple[str, ...], keys: Mapping[str, str]
    ) -> ValidationResult:
        retry_after = max(0.0, await self.limiter.reset_in(item, *identifiers))
        scope = ", ".join(f"{k}={v}" for k, v in keys.items()) or "everyone"
        message = f"rate limit {item} exceeded for {scope}; retry in {retry_after:.1f}s"
        return ValidationResult(
            valid=False,
            severity="error",
            messages=(ValidationMessage(message=message, severity="error"),),
            info={"rule": rule.index, "limit": str(item), "retryAfterSeconds": round(retry_after, 3)},
        )


def build(name: str, config: Mapping[str, Any]) -> InterceptorHost:
    """A host with one request-phase validator on the configured events."""
    settings = SettingsCache(name, SCHEMA, config, _compile)
    raw = settings.raw
    try:
        limiter: _Limiter = _RedisLimiter(raw["redis_url"], raw["key_prefix"]) if raw["redis_url"] else _MemoryLimiter()
    except ValueError as exc:
        raise ValueError(f"guard {name!r}: {exc}") from None
    guard = RateLimitGuard(settings, limiter)
    host = RateLimitHost(name, limiter)
    host.validator(
        name, events=raw["events"], phase="request", description=DESCRIPTION, config_schema=SCHEMA.advertised
    )(guard.check)
    return host
