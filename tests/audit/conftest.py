"""Fixtures for the audit tests: a decision factory, keys and stores.

The PostgreSQL server fixtures (`postgres_server`, `postgres_url`) live in tests/conftest.py, shared with the
gateway's end-to-end audit tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from mcp_interceptors.audit import DecisionInput, SigningKey, SqliteStore, load_or_create_key


@pytest.fixture
def make_decision() -> Callable[..., DecisionInput]:
    """A factory for allowed tools/call request decisions; keyword arguments override fields."""

    def make(**overrides: Any) -> DecisionInput:
        payload = {"method": "tools/call", "params": {"name": "post_note", "arguments": {"text": "hi"}}}
        fields: dict[str, Any] = {
            "timestamp": datetime(2026, 9, 1, 10, 0, tzinfo=UTC),
            "session_id": "s-1",
            "principal": {"type": "user", "id": "u-7"},
            "server": "notes",
            "event": "tools/call",
            "phase": "request",
            "direction": "sending",
            "decision": "allow",
            "status": "success",
            "call_id": None,
            "interceptors": [],
            "intent_payload": payload,
            "executed_payload": payload,
        }
        fields.update(overrides)
        return DecisionInput(**fields)

    return make


@pytest.fixture
def key(tmp_path: Path) -> SigningKey:
    return load_or_create_key(tmp_path / "keys" / "audit-key")


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SqliteStore]:
    store = SqliteStore(tmp_path / "audit.db")
    yield store
    store.close()
