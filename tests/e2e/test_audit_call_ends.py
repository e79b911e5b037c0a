"""Every call the audit trail opens is closed, and its records cover what was sent (docs/audit.md): a call
the client cancels in flight gets a `cancelled` error record and its receipt, a payload that has no canonical
form is refused before it is dispatched, with an error naming the field, and a request's `_meta` is hashed.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from e2e_support import ERAS, ConfigWriter, fresh_gateway, raw_request, text_of, unique, upstream_entry
from mcp import MCPError

from mcp_interceptors.audit import SqliteStore, payload_hash, verify_source

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


def audited(write_config: ConfigWriter, tmp_path: Path) -> Path:
    store, key = tmp_path / "audit.db", tmp_path / "audit-key"
    audit = {"enabled": True, "store": str(store), "key_file": str(key), "receipts": True}
    return write_config({"upstreams": {"e2e": upstream_entry()}, "audit": audit})


def calls(store_path: Path, event: str) -> dict[str, list[dict[str, Any]]]:
    """Decision record bodies of `event`, grouped by call id; checks the whole trail verifies."""
    store = SqliteStore(store_path, create=False)
    try:
        assert verify_source(store).ok
        bodies = [orjson.loads(raw)["body"] for _, raw in store.iter_records()]
        closed = {orjson.loads(raw)["call_id"] for kind, raw in store.iter_snapshot() if kind == "receipt"}
    finally:
        store.close()
    grouped: dict[str, list[dict[str, Any]]] = {}
    for body in bodies:
        if body.get("event") == event:
            body["receipt"] = body["call_id"] in closed
            grouped.setdefault(body["call_id"], []).append(body)
    return grouped


@pytest.mark.parametrize(("transport", "era"), [("stdio", "legacy"), ("http", "2026-07-28")])
async def test_a_call_the_client_cancels_is_closed_by_a_cancelled_record(
    write_config: ConfigWriter, tmp_path: Path, transport: str, era: str
) -> None:
    config = audited(write_config, tmp_path)
    token = unique("sleep")
    with anyio.fail_after(60):
        async with fresh_gateway(transport, config, era) as client:
            async with anyio.create_task_group() as tg:
                tg.start_soon(partial(client.call_tool, "sleep", {"seconds": 30, "token": token}))
                await client.call_tool("wait_started", {"token": token, "wait": 10})
                tg.cancel_scope.cancel()  # mcp's client sends notifications/cancelled
            assert text_of(await client.call_tool("was_cancelled", {"token": token, "wait": 10})) == "cancelled"
    recorded = calls(tmp_path / "audit.db", "tools/call")
    assert len(recorded) == 3  # sleep, wait_started, was_cancelled
    (sleep,) = [legs for legs in recorded.values() if legs[-1]["decision"] != "allow"]
    assert [(leg["phase"], leg["decision"], leg["status"], leg["error"]) for leg in sleep] == [
        ("request", "allow", "success", None),
        ("response", "error", "cancelled", {"code": -32800, "message": "Request cancelled"}),
    ]
    assert sleep[-1]["receipt"]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_payload_with_no_canonical_form_is_refused_naming_the_field(
    write_config: ConfigWriter, tmp_path: Path, transport: str
) -> None:
    """An integer past the largest double (10**400) has no RFC 8785 form, so the request cannot be
    recorded: it is refused with -32602 naming the field, never dispatched, and the gateway goes on."""
    config = audited(write_config, tmp_path)
    name = unique("note")
    with anyio.fail_after(60):
        async with fresh_gateway(transport, config, "legacy") as client:
            with pytest.raises(MCPError) as refused:
                await client.call_tool("save_note", {"name": name, "text": "x", "n": 10**400})
            stored = text_of(await client.call_tool("read_note", {"name": name}))
    assert refused.value.code == -32602
    assert refused.value.data is not None
    assert {k: refused.value.data[k] for k in ("reason", "field", "event", "phase")} == {
        "reason": "unrecordable_payload",
        "field": "params.arguments.n",
        "event": "tools/call",
        "phase": "request",
    }
    assert stored == "<missing>"  # never dispatched
    recorded = calls(tmp_path / "audit.db", "tools/call")
    assert all(len(legs) == 2 for legs in recorded.values())  # only the read_note call, opened and closed


@pytest.mark.parametrize("era", ERAS)
async def test_a_requests_forwarded_meta_is_part_of_its_recorded_payload(
    write_config: ConfigWriter, tmp_path: Path, era: str
) -> None:
    """`params._meta` is governed and forwarded, so the record's intent hash covers it (all but what each hop
    sets itself: the 2026-07-28 envelope and the progress token); it once covered the params without it."""
    config = audited(write_config, tmp_path)
    params = {"name": "echo", "arguments": {"text": "tagged"}, "_meta": {"vendor.example/tag": "v1"}}
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", config, era) as client:
            await raw_request(client, "tools/call", params)
    (call,) = calls(tmp_path / "audit.db", "tools/call").values()
    assert call[0]["intent_hash"] == payload_hash({"method": "tools/call", "params": params})
