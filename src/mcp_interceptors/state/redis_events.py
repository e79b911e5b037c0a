"""`RedisEvents`: the event store replicas share (`state/events.py` has the model), on the connection pool
of the `RedisState` the guards use. Every failure to reach Redis is a `StateUnavailableError`.

A scope's keys share a hash tag (`{<scope>}`): `n` its sequence, `m` its events (sequence -> `[stream,
message]` JSON), `t` their times (a sorted set, scored by Redis's clock in ms, which trims by age and count),
`s:<stream digest>` a stream's sequences in order, `x` the names of those, `b` its session binding. One Lua
script appends and trims; each write restarts the scope's expiry, so an idle scope's keys leave with its last
event.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from mcp_interceptors.state.events import Replay, Retention, StoredEvent, parse_event_id
from mcp_interceptors.state.redis import RedisState

#: KEYS n m t s b x (the scope's stream keys); ARGV value, max per stream, max per scope, max age in ms
_APPEND = """
local now = redis.call('TIME')
local at = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local seq = redis.call('INCR', KEYS[1])
redis.call('HSET', KEYS[2], seq, ARGV[1])
redis.call('ZADD', KEYS[3], at, seq)
local dropped = {}
redis.call('SADD', KEYS[6], KEYS[4])
local len = redis.call('RPUSH', KEYS[4], seq)
local over = len - tonumber(ARGV[2])
if over > 0 then
  for _, old in ipairs(redis.call('LRANGE', KEYS[4], 0, over - 1)) do table.insert(dropped, old) end
  redis.call('LTRIM', KEYS[4], over, -1)
end
for _, old in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. (at - tonumber(ARGV[4])))) do
  table.insert(dropped, old)
end
over = redis.call('ZCARD', KEYS[3]) - tonumber(ARGV[3])
if over > 0 then
  for _, old in ipairs(redis.call('ZRANGE', KEYS[3], 0, over - 1)) do table.insert(dropped, old) end
end
for _, old in ipairs(dropped) do
  redis.call('HDEL', KEYS[2], old)
  redis.call('ZREM', KEYS[3], old)
end
for i = 1, 6 do redis.call('PEXPIRE', KEYS[i], ARGV[4]) end
return seq
"""


class RedisEvents:
    """The shared `EventStore`."""

    def __init__(self, state: RedisState, retention: Retention | None = None) -> None:
        self.retention = retention or Retention()
        self._state = state  # its pool, shared with the guards' state; its owner closes it
        self._client: Any = state.client
        self._prefix = state.key_prefix + "ev:"
        self._append = self._client.register_script(_APPEND)
        self._ttl_ms = max(1, math.ceil(self.retention.max_age_s * 1000))

    def _key(self, scope: str, part: str) -> str:
        return f"{self._prefix}{{{scope}}}:{part}"

    def _stream_key(self, scope: str, stream: str) -> str:
        return self._key(scope, "s:" + hashlib.sha256(stream.encode("utf-8")).hexdigest()[:32])

    def _keys(self, scope: str, stream: str) -> list[str]:
        n, m, t, b, x = (self._key(scope, part) for part in "nmtbx")
        return [n, m, t, self._stream_key(scope, stream), b, x]

    async def append(self, scope: str, stream: str, message: str | None) -> str:
        keep = self.retention
        value = json.dumps([stream, message])
        args = [value, keep.max_events_per_stream, keep.max_events_per_session, self._ttl_ms]
        try:
            seq = await self._append(keys=self._keys(scope, stream), args=args)
        except self._state.errors as exc:
            raise self._state.unavailable(exc) from None
        return f"{scope}-{seq}"

    async def after(self, event_id: str) -> Replay | None:
        parsed = parse_event_id(event_id)
        if parsed is None:
            return None
        scope, seq = parsed
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                pipe.hget(self._key(scope, "m"), str(seq))
                pipe.zscore(self._key(scope, "t"), str(seq))
                pipe.hgetall(self._key(scope, "b"))
                pipe.time()
                value, at_ms, bound, now = await pipe.execute()
            if value is None or at_ms is None or at_ms < now[0] * 1000 + now[1] // 1000 - self._ttl_ms:
                return None
            stream = json.loads(value)[0]
            later = [int(s) for s in await self._client.lrange(self._stream_key(scope, stream), 0, -1) if int(s) > seq]
            values = await self._client.hmget(self._key(scope, "m"), [str(s) for s in later]) if later else []
        except self._state.errors as exc:
            raise self._state.unavailable(exc) from None
        events = [StoredEvent(f"{scope}-{s}", json.loads(v)[1]) for s, v in zip(later, values, strict=True) if v]
        return Replay(scope, stream, events, bound.get("session"), bound.get("owner"))

    async def bind(self, scope: str, session: str, owner: str) -> None:
        key = self._key(scope, "b")
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.hset(key, mapping={"session": session, "owner": owner})
                pipe.pexpire(key, self._ttl_ms)
                await pipe.execute()
        except self._state.errors as exc:
            raise self._state.unavailable(exc) from None

    async def forget(self, scope: str) -> None:
        try:
            streams = await self._client.smembers(self._key(scope, "x"))
            await self._client.delete(*(self._key(scope, part) for part in "nmtbx"), *streams)
        except self._state.errors as exc:
            raise self._state.unavailable(exc) from None

    async def aclose(self) -> None:
        """Nothing of its own to close: the pool is the `RedisState`'s."""
