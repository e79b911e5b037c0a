"""`RedisState`: the state store replicas share, in Redis (redis-py's asyncio client). Each replica holds a
bounded pool (`max_connections`; a call waits at most `timeout_s` for a connection, then for the answer), and
every failure to reach Redis is a `StateUnavailableError`, so guards fail closed.

A map is a Redis hash under `key_prefix + key`; `put` is one Lua script (check, write and expire at once), so
replicas racing to pin a tool first agree on the one pin.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from mcp_interceptors.protocol.errors import StateUnavailableError

#: KEYS[1] the hash; ARGV field, value, max fields (0: none), only_new (1/0), ttl in ms (0: none)
_PUT = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current and ARGV[4] == '1' then return current end
if (not current) and tonumber(ARGV[3]) > 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then
  return false
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if tonumber(ARGV[5]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[5]) else redis.call('PERSIST', KEYS[1]) end
return ARGV[2]
"""
SCHEMES = ("redis://", "rediss://", "unix://")


class RedisState:
    """The shared `StateStore`."""

    def __init__(
        self, url: str, *, key_prefix: str = "mcpi:", max_connections: int = 16, timeout_s: float = 1.0
    ) -> None:
        if not url.startswith(SCHEMES):
            raise ValueError(f"state.redis_url {url!r} must be a redis:// (or rediss://, unix://) URL")
        try:
            import redis.asyncio
        except ImportError:  # pragma: no cover - an optional dependency
            raise ValueError("state.redis_url needs the redis package: pip install 'mcp-interceptors[redis]'") from None
        self.url = url
        self.key_prefix = key_prefix
        #: What failing to reach Redis raises.
        self.errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        pool = redis.asyncio.BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=timeout_s,  # waiting for a free connection of the pool
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            decode_responses=True,
        )
        #: The pooled client (the event store shares it); closing it closes its pool.
        self.client: Any = redis.asyncio.Redis.from_pool(pool)
        self._put = self.client.register_script(_PUT)

    def unavailable(self, exc: BaseException) -> StateUnavailableError:
        where = self.url.rsplit("@", 1)[-1]  # never the password of redis://user:password@host
        return StateUnavailableError(f"Redis at {where}: {type(exc).__name__}: {exc}")

    async def fields(self, key: str) -> Mapping[str, str]:
        try:
            found: dict[str, str] = await self.client.hgetall(self.key_prefix + key)
        except self.errors as exc:
            raise self.unavailable(exc) from None
        return found

    async def put(
        self,
        key: str,
        field: str,
        value: str,
        *,
        ttl_s: float | None,
        max_fields: int | None = None,
        only_new: bool = False,
    ) -> str | None:
        ttl_ms = 0 if ttl_s is None or math.isinf(ttl_s) else max(1, math.ceil(ttl_s * 1000))
        args: list[str | int] = [field, value, max_fields or 0, "1" if only_new else "0", ttl_ms]
        try:
            stored: str | None = await self._put(keys=[self.key_prefix + key], args=args)
        except self.errors as exc:
            raise self.unavailable(exc) from None
        return stored

    async def remove(self, key: str, field: str) -> None:
        try:
            await self.client.hdel(self.key_prefix + key, field)
        except self.errors as exc:
            raise self.unavailable(exc) from None

    async def ping(self) -> None:
        try:
            await self.client.ping()
        except self.errors as exc:
            raise self.unavailable(exc) from None

    async def aclose(self) -> None:
        await self.client.aclose()
