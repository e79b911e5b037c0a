"""A denial closes its call with one `deny` record (docs/audit.md), whatever the phase and era.

A response-phase block reaches the client as the gateway's own error; it is not the upstream's, so no
`error/upstream_error` record may follow the `deny` one.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from e2e_hosts import LEAK_MARKER
from e2e_support import E2E_DIR, ERAS, ConfigWriter, Sampler, fresh_gateway, raw_request, upstream_entry
from mcp import MCPError

from mcp_interceptors.audit import SqliteStore
from mcp_interceptors.gateway.recording import RECEIPT_META_KEY

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


def decisions(store_path: Path) -> list[dict[str, Any]]:
    """Every decision record's body, in store order."""
    store = SqliteStore(store_path, create=False)
    try:
        bodies = [orjson.loads(raw)["body"] for _, raw in store.iter_records()]
    finally:
        store.close()
    return [body for body in bodies if "decision" in body]


@pytest.mark.parametrize("era", ERAS)
async def test_a_response_denial_is_the_one_record_that_closes_the_call(
    write_config: ConfigWriter, tmp_path: Path, era: str
) -> None:
    store = tmp_path / "audit.db"
    config = write_config(
        {
            "upstreams": {"e2e": upstream_entry()},
            "interceptors": {"hosts": [{"module": "e2e_hosts:response_guard"}]},
            "audit": {"enabled": True, "store": str(store), "key_file": str(tmp_path / "audit-key")},
        }
    )
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", config, era) as client:
            with pytest.raises(MCPError) as blocked:
                await client.call_tool("echo", {"text": f"here is a {LEAK_MARKER}"})
    assert (blocked.value.code, blocked.value.message) == (-32602, "Blocked by interceptor validation")
    records = [body for body in decisions(store) if body["event"] == "tools/call"]
    assert [(r["phase"], r["decision"], r["status"]) for r in records] == [
        ("request", "allow", "success"),
        ("response", "deny", "validation_failed"),
    ]
    assert len({r["call_id"] for r in records}) == 1


@pytest.mark.parametrize("era", ERAS)
async def test_execute_chain_runs_are_recorded_and_answered_with_their_receipt(
    write_config: ConfigWriter, tmp_path: Path, era: str
) -> None:
    """`interceptor/executeChain` is a chain the gateway runs: it gets its record (durable before the
    answer) whatever the verdict, and an opted-in client gets that record in the result's `_meta`."""
    store = tmp_path / "audit.db"
    config = write_config(
        {
            "upstreams": {"e2e": upstream_entry()},
            "interceptors": {"guards": [{"name": "tool-policy", "config": {"deny": ["shell"]}}]},
            "expose_execute_chain": True,
            "audit": {"enabled": True, "store": str(store), "key_file": str(tmp_path / "audit-key"), "receipts": True},
        }
    )
    answers = []
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", config, era) as client:
            for tool in ("echo", "shell"):
                payload = {"method": "tools/call", "params": {"name": tool, "arguments": {}}}
                params = {"event": "tools/call", "phase": "request", "payload": payload}
                answers.append(await raw_request(client, "interceptor/executeChain", params))
    assert [answer["status"] for answer in answers] == ["success", "validation_failed"]
    records = [body for body in decisions(store) if body["event"] == "tools/call"]
    assert [(r["phase"], r["decision"], r["status"]) for r in records] == [
        ("request", "allow", "success"),
        ("request", "deny", "validation_failed"),
    ]
    assert records[1]["interceptors"][0]["name"] == "tool-policy"
    # The chain approved a payload, but the gateway dispatched nothing: no executed hash, so the record
    # cannot be read as a tools/call that was sent upstream.
    assert records[0]["intent_hash"] is not None
    assert (records[0]["executed_hash"], records[0]["drift"]) == (None, None)
    receipts = [answer["_meta"][RECEIPT_META_KEY] for answer in answers]
    assert [len(receipt["records"]) for receipt in receipts] == [1, 1]
    assert receipts[1]["receipt"]["request"]["id"] == receipts[1]["records"][0]["id"]


async def test_a_2026_input_request_and_its_answer_make_one_compound_receipt(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    """A 2026-07-28 client gets the sampling request inside an `input_required` result and answers it with
    its retry: the two legs are one call of the audit trail, closed by one receipt naming both."""
    store_path = tmp_path / "audit.db"
    config = write_config(
        {
            "upstreams": {"e2e": upstream_entry()},
            "audit": {"enabled": True, "store": str(store_path), "key_file": str(tmp_path / "audit-key")},
        }
    )
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", config, "2026-07-28", sampling_callback=Sampler()) as client:
            result = await client.call_tool("ask", {"question": "what is six times seven?"})
    assert not result.is_error
    store = SqliteStore(store_path, create=False)
    try:
        records = [orjson.loads(raw) for _, raw in store.iter_records()]
        sampling = [r for r in records if r["body"].get("event") == "sampling/createMessage"]
        assert [(r["body"]["phase"], r["body"]["decision"]) for r in sampling] == [
            ("request", "allow"),
            ("response", "allow"),
        ]
        assert sampling[0]["body"]["call_id"] == sampling[1]["body"]["call_id"]
        receipt = store.get_receipt(sampling[1]["id"])
    finally:
        store.close()
    assert receipt is not None
    assert orjson.loads(receipt)["request"]["id"] == sampling[0]["id"]


async def test_a_2026_upstreams_input_request_bridged_to_a_handshake_era_client_makes_one_compound_receipt(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    """A 2026-07-28 upstream's sampling request reaches a handshake-era client as a server request (the bridge):
    the request and the client's answer are still one call of the audit trail, closed by one receipt."""
    store_path = tmp_path / "audit.db"
    upstream = {"command": sys.executable, "args": [str(E2E_DIR / "modern_upstream.py")], "era": "2026-07-28"}
    config = write_config(
        {
            "upstreams": {"e2e": upstream},
            "audit": {"enabled": True, "store": str(store_path), "key_file": str(tmp_path / "audit-key")},
        }
    )
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", config, "legacy", sampling_callback=Sampler()) as client:
            result = await client.call_tool("ask", {"question": "what is six times seven?"})
    assert not result.is_error
    store = SqliteStore(store_path, create=False)
    try:
        records = [orjson.loads(raw) for _, raw in store.iter_records()]
        sampling = [r for r in records if r["body"].get("event") == "sampling/createMessage"]
        assert [(r["body"]["phase"], r["body"]["decision"]) for r in sampling] == [
            ("request", "allow"),
            ("response", "allow"),
        ]
        assert sampling[0]["body"]["call_id"] == sampling[1]["body"]["call_id"]
        receipt = store.get_receipt(sampling[1]["id"])
    finally:
        store.close()
    assert receipt is not None
    assert orjson.loads(receipt)["request"]["id"] == sampling[0]["id"]
