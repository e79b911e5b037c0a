"""The audit trail never keeps a value a guard removed (docs/audit.md, *What a record keeps*): the raw bytes of
the store (SQLite files, a PostgreSQL dump), `audit export` and the web view's detail page, after real chains
through the gateway: pii then secrets, secrets then pii, secrets in audit mode, and a call secrets denies."""

from __future__ import annotations

import glob
import subprocess
from pathlib import Path
from typing import Any

import anyio
import httpx2
import orjson
import pytest
from e2e_support import ConfigWriter, fresh_gateway, upstream_entry
from helpers import cli_argv, free_tcp_port, running
from mcp import MCPError

from mcp_interceptors.audit import open_store

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

KEY = "AKIA" + "Z7QH4XK2M9PL3TWB"  # a made-up key in the real format, as in the demo
MAIL = "ana" + "@example.com"
NOTE = f"deploy with key {KEY}, ping {MAIL}"
CHAINS: dict[str, dict[str, Any]] = {
    "pii-then-secrets": {},  # equal priorities: pii first, as in the demo
    "secrets-then-pii": {"overrides": {"secrets": {"priority": {"request": -60_000}}}},
    "shadow-secrets": {"overrides": {"secrets": {"mode": "audit"}}},
    "secrets-denies": {"guards": [{"name": "pii"}, {"name": "secrets", "config": {"action": "deny"}}]},
}


def gateway_config(write_config: ConfigWriter, tmp_path: Path, chain: str, store: str, writer: str = "auto") -> Path:
    interceptors: dict[str, Any] = {"guards": [{"name": "secrets"}, {"name": "pii"}], **CHAINS[chain]}
    audit = {"enabled": True, "store": store, "key_file": str(tmp_path / "audit-key"), "receipts": True}
    return write_config(
        {"upstreams": {"e2e": upstream_entry()}, "interceptors": interceptors, "audit": audit | {"writer": writer}}
    )


async def save_the_note(config: Path, chain: str) -> None:
    async with fresh_gateway("stdio", config, "legacy") as client:
        if chain == "secrets-denies":
            with pytest.raises(MCPError):
                await client.call_tool("save_note", {"name": "ops", "text": NOTE})
        else:
            result = await client.call_tool("save_note", {"name": "ops", "text": NOTE})
            assert KEY not in orjson.dumps(result.model_dump(mode="json")).decode()  # the receipt in _meta too
            # the note as stored upstream (with the key, when secrets only shadows): pii redacts its e-mail
            read = await client.call_tool("read_note", {"name": "ops"})
            assert MAIL not in orjson.dumps(read.model_dump(mode="json")).decode()


def bodies(store: str) -> list[dict[str, Any]]:
    source = open_store(store, create=False)
    try:
        return [orjson.loads(raw)["body"] for _, raw in source.iter_records()]
    finally:
        source.close()


def stored_files(store: Path) -> dict[str, bytes]:
    """The bytes of the database and of whatever SQLite keeps beside it (its WAL, if one is left)."""
    return {path: Path(path).read_bytes() for path in sorted(glob.glob(f"{store}*"))}


def pg_dump(url: str) -> bytes:
    binary = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_dump"))[-1]
    return subprocess.run([binary, "--dbname", url], capture_output=True, check=True).stdout


def export(store: str) -> bytes:
    done = subprocess.run(cli_argv("audit", "export", "--store", store), capture_output=True, check=True)
    return done.stdout


@pytest.mark.parametrize("writer", ["in-process", "process"])
@pytest.mark.parametrize("chain", list(CHAINS))
async def test_no_removed_value_is_in_the_sqlite_files_or_the_export(
    write_config: ConfigWriter, tmp_path: Path, chain: str, writer: str
) -> None:
    store = tmp_path / "trail" / "audit.db"
    config = gateway_config(write_config, tmp_path, chain, str(store), writer)
    with anyio.fail_after(60):
        await save_the_note(config, chain)
    files = stored_files(store)
    assert files
    for path, raw in files.items():
        assert KEY.encode() not in raw and MAIL.encode() not in raw, path
    exported = export(str(store))
    assert KEY.encode() not in exported and MAIL.encode() not in exported
    # what the guards did is still there: the mutations, their placeholders, the denial
    calls = [body for body in bodies(str(store)) if body.get("event") == "tools/call"]
    assert calls
    entries = {entry["name"]: entry for entry in calls[0]["interceptors"]}  # the request's chain
    diffs = orjson.dumps(entries["pii"]["diff"]).decode()
    if chain == "secrets-denies":
        assert calls[-1]["decision"] == "deny" and "[withheld]" in diffs
    else:
        assert "[REDACTED:email]" in diffs
        secrets_diff = orjson.dumps(entries["secrets"]["diff"]).decode()
        assert "[REDACTED:aws_access_key]" in secrets_diff


async def test_no_removed_value_is_in_a_postgresql_dump(
    write_config: ConfigWriter, tmp_path: Path, postgres_url: str
) -> None:
    config = gateway_config(write_config, tmp_path, "pii-then-secrets", postgres_url)
    with anyio.fail_after(60):
        await save_the_note(config, "pii-then-secrets")
    dumped = pg_dump(postgres_url)
    assert b"[REDACTED:email]" in dumped  # the dump holds the trail
    assert KEY.encode() not in dumped and MAIL.encode() not in dumped


async def test_the_web_views_detail_page_shows_no_removed_value(write_config: ConfigWriter, tmp_path: Path) -> None:
    store = tmp_path / "audit.db"
    config = gateway_config(write_config, tmp_path, "pii-then-secrets", str(store))
    with anyio.fail_after(60):
        await save_the_note(config, "pii-then-secrets")
    call_id = next(body["call_id"] for body in bodies(str(store)) if body.get("event") == "tools/call")
    port = free_tcp_port()
    key_file = str(tmp_path / "audit-key")
    argv = cli_argv("ui", "--audit", str(store), "--key-file", key_file, "--listen", f"127.0.0.1:{port}")
    async with running(argv, port=port, label="web view"):
        with anyio.fail_after(30):
            async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                page = (await http.get(f"/calls/{call_id}")).text
    assert "signature valid" in page and "[REDACTED:email]" in page
    assert KEY not in page and MAIL not in page
