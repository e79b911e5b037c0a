"""Remembered approvals: a person's yes kept for a while, so the same question is not asked again.

`ApprovalMemory` is the whole interface (two methods): `InMemoryApprovals` keeps them in this process;
a store shared by several gateways implements the same protocol.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Remembered:
    """An approval as kept: when it was given (ISO 8601), and the audit entry of the answer it came from."""

    approved_at: str
    answer: dict[str, Any]


class ApprovalMemory(Protocol):
    """Where approvals are kept, by key (`scope:who:question`), each for its own time."""

    async def recall(self, key: str) -> Remembered | None:
        """The approval kept under `key`, or None (never given, or expired)."""
        ...

    async def remember(self, key: str, approval: Remembered, ttl_s: float) -> None:
        """Keep `approval` under `key` for `ttl_s` seconds (replacing any kept there)."""
        ...


class InMemoryApprovals:
    """Approvals kept in this process, at most `max_items` (the oldest forgotten first)."""

    def __init__(self, *, max_items: int = 100_000, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_items = max_items
        self._clock = clock
        self._items: OrderedDict[str, tuple[float, Remembered]] = OrderedDict()

    async def recall(self, key: str) -> Remembered | None:
        entry = self._items.get(key)
        if entry is None:
            return None
        expires, approval = entry
        if self._clock() >= expires:
            del self._items[key]
            return None
        return approval

    async def remember(self, key: str, approval: Remembered, ttl_s: float) -> None:
        if not math.isfinite(ttl_s) or ttl_s <= 0:
            raise ValueError(f"ttl_s must be a positive number of seconds, got {ttl_s!r}")
        self._items.pop(key, None)
        self._items[key] = (self._clock() + ttl_s, approval)
        while len(self._items) > self.max_items:
            self._items.popitem(last=False)
