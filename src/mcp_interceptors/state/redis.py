"""`RedisState`: the state store replicas share, in Redis (redis-py's asyncio client). Each replica holds a
bounded pool (`max_connections`; a call waits at most `timeout_s` for a connection, then for the answer), and
every failure to reach Redis is a `StateUnavailableError`, so guards fail closed.

A map is a Redis hash under `key_prefix + key`; `put` is one Lua script (check, write and expire at once), so
replicas racing to pin a tool first agree on the one pin. Reads asked for in the same turn of the event loop
(the guards of one chain run side by side, and concurrent calls' chains) go to Redis in one pipeline: one
round trip for all of them.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
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
#: KEYS[1] the hash; ARGV max fields (0: none), ttl in ms (0: none), then field, value, field, value...
_PUT_MANY = """
local limit, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local count, wrote, kept = redis.call('HLEN', KEYS[1]), false, {}
for i = 3, #ARGV, 2 do
  if limit > 0 and count >= limit and redis.call('HEXISTS', KEYS[1], ARGV[i]) == 0 then
    kept[#kept + 1] = false
  else
    count = count + redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
    wrote = true
    kept[#kept + 1] = ARGV[i + 1]
  end
end
if wrote then
  if ttl > 0 then redis.call('PEXPIRE', KEYS[1], ttl) else redis.call('PERSIST', KEYS[1]) end
end
return kept
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
        self._put_many = self.client.register_script(_PUT_MANY)
        #: Reads waiting for the next pipeline: (prefixed key, where its answer goes); None when none waits.
        self._reads: list[tuple[str, asyncio.Future[dict[str, str]]]] | None = None
        #: Pipelines in flight (held so they are not collected before they finish).
        self._pipelines: set[asyncio.Task[None]] = set()

    def unavailable(self, exc: BaseException) -> StateUnavailableError:
        where = self.url.rsplit("@", 1)[-1]  # never the password of redis://user:password@host
        return StateUnavailableError(f"Redis at {where}: {type(exc).__name__}: {exc}")

    async def fields(self, key: str) -> Mapping[str, str]:
        loop = asyncio.get_running_loop()
        if self._reads is not None:  # another read leads this turn's batch: its pipeline carries this one
            waiting: asyncio.Future[dict[str, str]] = loop.create_future()
            self._reads.append((self.key_prefix + key, waiting))
            return await waiting
        batch: list[tuple[str, asyncio.Future[dict[str, str]]]] = []
        self._reads = batch
        try:
            await asyncio.sleep(0)  # one turn of the loop, for the reads started beside this one to join
        except BaseException:  # cancelled: the reads that joined still get their answers
            self._reads = None
            if batch:
                self._spawn(batch)
            raise
        self._reads = None
        if batch:
            mine: asyncio.Future[dict[str, str]] = loop.create_future()
            batch.append((self.key_prefix + key, mine))
            self._spawn(batch)
            return await mine
        try:
            found: dict[str, str] = await self.client.hgetall(self.key_prefix + key)
        except self.errors as exc:
            raise self.unavailable(exc) from None
        return found

    def _spawn(self, batch: list[tuple[str, asyncio.Future[dict[str, str]]]]) -> None:
        """Read `batch` in a pipeline of its own: a task, so a cancelled reader never leaves the others waiting."""
        task = asyncio.get_running_loop().create_task(self._read_batch(batch))
        self._pipelines.add(task)
        task.add_done_callback(self._pipelines.discard)

    async def _read_batch(self, batch: list[tuple[str, asyncio.Future[dict[str, str]]]]) -> None:
        try:
            pipeline = self.client.pipeline(transaction=False)
            for key, _ in batch:
                pipeline.hgetall(key)
            answers: list[dict[str, str]] = await pipeline.execute()
        except BaseException as exc:  # every reader fails, closed; a cancelled pipeline (shutdown) too
            failed = exc if isinstance(exc, Exception) and not isinstance(exc, self.errors) else None
            for _, future in batch:
                if not future.done():
                    future.set_exception(failed or self.unavailable(exc))
            if not isinstance(exc, Exception):
                raise
            return
        for (_, future), answer in zip(batch, answers, strict=True):
            if not future.done():
                future.set_result(answer)

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
        args: list[str | int] = [field, value, max_fields or 0, "1" if only_new else "0", _ttl_ms(ttl_s)]
        try:
            stored: str | None = await self._put(keys=[self.key_prefix + key], args=args)
        except self.errors as exc:
            raise self.unavailable(exc) from None
        return stored

    async def put_many(
        self, key: str, items: Sequence[tuple[str, str]], *, ttl_s: float | None, max_fields: int | None = None
    ) -> list[str | None]:
        if not items:
            return []
        args: list[str | int] = [max_fields or 0, _ttl_ms(ttl_s)]
        for field, value in items:
            args += [field, value]
        try:
            kept: list[str | None] = await self._put_many(keys=[self.key_prefix + key], args=args)
        except self.errors as exc:
            raise self.unavailable(exc) from None
        return kept

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


def _ttl_ms(ttl_s: float | None) -> int:
    """A time to live in Redis's milliseconds; 0 for none."""
    return 0 if ttl_s is None or math.isinf(ttl_s) else max(1, math.ceil(ttl_s * 1000))
