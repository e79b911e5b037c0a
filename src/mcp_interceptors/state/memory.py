"""`MemoryState`: the state store of one process, in a dict; bounded in keys (the least recently written map
goes first) and in time (a map expires `ttl_s` after its last write, as in Redis)."""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence

#: Maps one process keeps (each guard bounds its own fields per map).
DEFAULT_MAX_KEYS = 100_000


class MemoryState:
    """The in-process `StateStore`."""

    def __init__(self, *, max_keys: int = DEFAULT_MAX_KEYS, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_keys = max_keys
        self._clock = clock
        #: key -> (expires at, fields), least recently written first
        self._maps: OrderedDict[str, tuple[float, dict[str, str]]] = OrderedDict()

    def _live(self, key: str) -> dict[str, str] | None:
        entry = self._maps.get(key)
        if entry is None:
            return None
        if entry[0] <= self._clock():
            del self._maps[key]
            return None
        return entry[1]

    async def fields(self, key: str) -> Mapping[str, str]:
        return self._live(key) or {}

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
        fields = self._live(key)
        if fields is None:
            fields = {}
        current = fields.get(field)
        if current is not None and only_new:
            return current
        if current is None and max_fields is not None and len(fields) >= max_fields:
            return None
        fields[field] = value
        expires = math.inf if ttl_s is None else self._clock() + ttl_s
        self._maps[key] = (expires, fields)
        self._maps.move_to_end(key)
        while len(self._maps) > self.max_keys:
            self._maps.popitem(last=False)
        return value

    async def put_many(
        self, key: str, items: Sequence[tuple[str, str]], *, ttl_s: float | None, max_fields: int | None = None
    ) -> list[str | None]:
        return [await self.put(key, field, value, ttl_s=ttl_s, max_fields=max_fields) for field, value in items]

    async def remove(self, key: str, field: str) -> None:
        fields = self._live(key)
        if fields is not None:
            fields.pop(field, None)

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    def __len__(self) -> int:
        return len(self._maps)
