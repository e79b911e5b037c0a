"""The web view over a PostgreSQL store (a real server the tests start): the same pages, the same checks."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from ui_helpers import rows_of, view_of
from ui_trail import build_trail

from mcp_interceptors.audit.postgres import PostgresStore

pytestmark = pytest.mark.postgres


def test_the_view_lists_filters_and_verifies_a_postgres_trail(postgres_url: str, tmp_path: Path) -> None:
    import psycopg

    trail = build_trail(tmp_path, PostgresStore(postgres_url), fillers=3)
    with view_of(trail, target=postgres_url) as view:
        keys = [row["key"] for row in rows_of(view.get("/").text)]
        assert keys[:3] == ["c-filler-0002", "c-filler-0001", "c-filler-0000"] and "c-mutated" in keys
        assert [row["key"] for row in rows_of(view.get("/?verdict=denied").text)] == ["c-denied"]
        assert view.get("/calls/c-denied").text.count("signature valid") == 2
        assert view.get("/").headers["cache-control"] == "no-store"
        assert postgres_url.rsplit("/", 1)[1] in view.get("/").text  # the store it reads, password-free
        record_id = trail.records["denied"][0]
        with psycopg.connect(postgres_url) as db:
            (raw,) = db.execute("SELECT record FROM audit_records WHERE id = %s", (record_id,)).fetchone()
            record = orjson.loads(raw)
            record["body"]["decision"] = "allow"
            db.execute("UPDATE audit_records SET record = %s WHERE id = %s", (orjson.dumps(record).decode(), record_id))
        page = view.get("/calls/c-denied").text
        assert f"{record_id}: edited (content does not match its hash)" in page and "signature valid" not in page
