"""Shared state: the one small interface through which guards (and the gateway) remember things across
calls, so the same verdicts come from any replica. `MemoryState` keeps them in the process (the default);
`RedisState` in a Redis that replicas share. Callers never know which they have.

A store holds maps (`key` → fields → string values), each map expiring `ttl_s` after its last write. A store
that cannot be reached raises `StateUnavailableError` (-32603, `reason: state_unavailable`): a guard lets it
propagate, so its verdict fails closed unless the guard is configured `fail_open`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from mcp_interceptors.protocol.errors import STATE_UNAVAILABLE, StateUnavailableError


class StateStore(Protocol):
    """Maps of string fields by key; every method may raise `StateUnavailableError`."""

    async def fields(self, key: str) -> Mapping[str, str]:
        """Every field of the map at `key` (empty when there is none, or it expired)."""
        ...

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
        """Set `field` and restart the map's time to live (`None`: it never expires). Returns the value the field
        holds afterwards: `value`, or with `only_new` the one an earlier writer left; None when the field is new and
        the map already holds `max_fields` (nothing is pushed out to make room)."""
        ...

    async def put_many(
        self, key: str, items: Sequence[tuple[str, str]], *, ttl_s: float | None, max_fields: int | None = None
    ) -> list[str | None]:
        """`put` of each `(field, value)` in turn, in one round trip: for each, the value the field holds
        afterwards, or None when it is new and the map already held `max_fields`."""
        ...

    async def remove(self, key: str, field: str) -> None: ...

    async def ping(self) -> None:
        """Raise `StateUnavailableError` unless the store answers (readiness checks)."""
        ...

    async def aclose(self) -> None: ...


def open_state(redis_url: str | None = None, **options: object) -> StateStore:
    """A `RedisState` for `redis_url` (options: `key_prefix`, `max_connections`, `timeout_s`), else a `MemoryState`."""
    if redis_url is None:
        from mcp_interceptors.state.memory import MemoryState

        return MemoryState()
    from mcp_interceptors.state.redis import RedisState

    return RedisState(redis_url, **options)  # type: ignore[arg-type]


__all__ = ["STATE_UNAVAILABLE", "StateStore", "StateUnavailableError", "open_state"]
