"""Remembered approvals: a person's yes kept for a while, so the same question is not asked again.

`ApprovalMemory` is the whole interface (two methods). `StateApprovals` keeps them in the gateway's state
store (`mcp_interceptors.state`): in the process by default, in the Redis the replicas share with
`state.redis_url`, so a yes given through one replica holds on the others.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from mcp_interceptors.protocol.errors import StateUnavailableError
from mcp_interceptors.state import StateStore

logger = logging.getLogger(__name__)

#: The state map each approval is kept in is `approval:<key>`; its one field holds the approval.
_KEY_PREFIX = "approval:"
_FIELD = "yes"


@dataclass(frozen=True)
class Remembered:
    """An approval as kept: when it was given (ISO 8601), and the audit entry of the answer it came from."""

    approved_at: str
    answer: dict[str, Any]


class ApprovalMemory(Protocol):
    """Where approvals are kept, by key (`scope:who|question`), each for its own time."""

    async def recall(self, key: str) -> Remembered | None:
        """The approval kept under `key`, or None (never given, expired, or the store cannot say)."""
        ...

    async def remember(self, key: str, approval: Remembered, ttl_s: float) -> None:
        """Keep `approval` under `key` for `ttl_s` seconds (replacing any kept there)."""
        ...


class StateApprovals:
    """Approvals in a `StateStore`. A store that cannot be reached never grants: `recall` then says nothing is
    remembered (the person is asked again) and `remember` logs that the yes holds for this call only."""

    def __init__(self, store: StateStore) -> None:
        self.store = store

    async def recall(self, key: str) -> Remembered | None:
        try:
            fields = await self.store.fields(_KEY_PREFIX + key)
        except StateUnavailableError as exc:
            logger.warning("remembered approvals unavailable (%s): the person is asked again", exc.message)
            return None
        raw = fields.get(_FIELD)
        if raw is None:
            return None
        try:
            kept = orjson.loads(raw)
            return Remembered(str(kept["approved_at"]), dict(kept["answer"]))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None  # not one of ours (another writer's, or damaged): nothing is remembered

    async def remember(self, key: str, approval: Remembered, ttl_s: float) -> None:
        if not math.isfinite(ttl_s) or ttl_s <= 0:
            raise ValueError(f"ttl_s must be a positive number of seconds, got {ttl_s!r}")
        value = orjson.dumps({"approved_at": approval.approved_at, "answer": approval.answer}).decode()
        try:
            await self.store.put(_KEY_PREFIX + key, _FIELD, value, ttl_s=ttl_s)
        except StateUnavailableError as exc:
            logger.warning("approval not remembered (%s): it holds for this call only", exc.message)
