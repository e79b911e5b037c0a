"""Every call the audit trail opens is closed, and its records cover what was sent (docs/audit.md): a call
the client cancels in flight gets a `cancelled` error record and its receipt, a payload that has no canonical
form is refused before it is dispatched, with an error naming the field, and a request's `_meta` is hashed.
A call the gateway refuses itself (unknown, not advertised, malformed, a task) gets a `refused` denial, and a
call ended by the denial of a request embedded in it is closed too.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import orjson
import pytest
from e2e_hosts import FORBIDDEN_QUESTION
from e2e_support import (
    E2E_DIR,
    ERAS,
    ConfigWriter,
    Sampler,
    fresh_gateway,
    raw_request,
    text_of,
    unique,
    upstream_entry,
)
from mcp import MCPError
from mcp.client import ClientRequestContext

from mcp_interceptors.audit import SqliteStore, payload_hash, verify_source

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


def audited(write_config: ConfigWriter, tmp_path: Path, **config: Any) -> Path:
    store, key = tmp_path / "audit.db", tmp_path / "audit-key"
    audit = {"enabled": True, "store": str(store), "key_file": str(key), "receipts": True}
    return write_config({"upstreams": {"e2e": upstream_entry()}, "audit": audit, **config})


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
    refused, read = recorded.values()
    assert [(leg["phase"], leg["decision"], leg["status"], leg["intent_hash"]) for leg in refused] == [
        ("request", "deny", "refused", None)
    ]
    assert (refused[0]["error"]["reason"], refused[0]["error"]["field"]) == (
        "unrecordable_payload",
        "params.arguments.n",
    )
    assert [leg["decision"] for leg in read] == ["allow", "allow"]
    assert refused[0]["receipt"] and read[-1]["receipt"]


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


#: Requests the gateway refuses itself, before dispatching them, and what their record's `error` names.
REFUSALS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    # Listed by the upstream but hidden from this session by a response mutator: refused after the request
    # chain ran (advertised equals callable), so its record keeps that chain's interceptors.
    ("tools/call", {"name": "hidden_tool", "arguments": {}}, {"reason": "not advertised to this session"}),
    ("tools/call", {"name": "no_such_tool", "arguments": {}}, {"reason": "not advertised to this session"}),
    ("tools/call", {"name": 5, "arguments": {}}, {"field": "name"}),
    ("tools/call", {"name": "echo", "arguments": "x"}, {"field": "arguments"}),
    ("tools/call", {"name": "echo", "arguments": [1]}, {"field": "arguments"}),
    ("tools/call", {"name": "echo", "arguments": {"text": "x"}, "task": {}}, {"field": "task"}),
    ("prompts/get", {"name": "no_such_prompt"}, {}),
    ("prompts/get", {"name": "greet", "arguments": {"who": 5}}, {"field": "arguments.who"}),
    ("resources/read", {"uri": "nowhere://x"}, {}),
]


@pytest.mark.parametrize(("transport", "era"), [("stdio", "legacy"), ("http", "2026-07-28"), ("http", "legacy")])
async def test_a_call_the_gateway_refuses_is_closed_by_a_refused_denial(
    write_config: ConfigWriter, tmp_path: Path, transport: str, era: str
) -> None:
    """A governed call refused by the gateway, not by an interceptor, is one `deny` record with status
    `refused` and the client's error, closed by its receipt; the trail once had nothing of it, even when its
    request chain had run."""
    config = audited(write_config, tmp_path, interceptors={"hosts": [{"module": "e2e_hosts:host"}]})
    # Over HTTP, a request whose name is no string (2026-07-28: -32020, its Mcp-Name header cannot match) or
    # whose arguments do not fit the schema (-32602) is refused by mcp's transport, before it reaches the
    # gateway's governed path. A 2026-07-28 client's handshake-era task hint is ignored, not refused
    # (SEP-2663; tests/e2e/test_tasks.py).
    malformed = ("name", "arguments", "arguments.who")
    refusals = [
        case
        for case in REFUSALS
        if (transport == "stdio" or case[2].get("field") not in malformed)
        and (era == "legacy" or "task" not in case[1])
    ]
    errors = []
    with anyio.fail_after(60):
        async with fresh_gateway(transport, config, era) as client:
            for method, params, _ in refusals:
                with pytest.raises(MCPError) as refused:
                    await raw_request(client, method, params)
                errors.append(refused.value.error)
    assert [error.code for error in errors] == [-32602] * len(refusals)
    recorded = [
        legs
        for event in ("tools/call", "prompts/get", "resources/read")
        for legs in calls(tmp_path / "audit.db", event).values()
    ]
    assert len(recorded) == len(refusals)
    for legs, error, (method, _, named) in zip(recorded, errors, refusals, strict=True):
        assert [(leg["event"], leg["phase"], leg["decision"], leg["status"]) for leg in legs] == [
            (method, "request", "deny", "refused")
        ]
        assert {key: legs[0]["error"].get(key) for key in ("code", "message", *named)} == {
            "code": error.code,
            "message": error.message,
            **named,
        }
        assert legs[0]["receipt"]
    assert [entry["name"] for entry in recorded[0][0]["interceptors"]] == ["redact-secrets", "deny-tools"]


class Asked:
    """A sampling callback that never answers; `asked` is set once it is called."""

    def __init__(self) -> None:
        self.asked = anyio.Event()

    async def __call__(self, ctx: ClientRequestContext, params: types.CreateMessageRequestParams) -> Any:
        self.asked.set()
        await anyio.sleep_forever()


@pytest.mark.parametrize(("era", "upstream"), [("2026-07-28", "e2e_upstream.py"), ("legacy", "modern_upstream.py")])
async def test_a_call_ended_by_its_denied_input_request_is_closed(
    write_config: ConfigWriter, tmp_path: Path, era: str, upstream: str
) -> None:
    """A tool's sampling request inside an `input_required` result (asked of a 2026-07-28 client, or of a
    handshake-era one through the bridge) is denied: the tool call ends with it, and a `deny` record naming the
    denied call closes the tool call (its request record was once left open)."""
    entry = {"command": sys.executable, "args": [str(E2E_DIR / upstream)]}
    if upstream == "modern_upstream.py":
        entry["era"] = "2026-07-28"
    config = audited(
        write_config,
        tmp_path,
        upstreams={"e2e": entry},
        interceptors={"hosts": [{"module": "e2e_hosts:question_guard"}]},
    )
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", config, era, sampling_callback=Sampler()) as client:
            with pytest.raises(MCPError) as blocked:
                await client.call_tool("ask", {"question": FORBIDDEN_QUESTION})
    assert blocked.value.message == "Blocked by interceptor validation"
    (sampling,) = calls(tmp_path / "audit.db", "sampling/createMessage").values()
    (tool,) = calls(tmp_path / "audit.db", "tools/call").values()
    assert [(leg["phase"], leg["decision"], leg["status"]) for leg in sampling] == [
        ("request", "deny", "validation_failed")
    ]
    assert [(leg["phase"], leg["decision"], leg["status"]) for leg in tool] == [
        ("request", "allow", "success"),
        ("response", "deny", "validation_failed"),
    ]
    assert tool[-1]["error"]["call_id"] == sampling[0]["call_id"]
    assert tool[-1]["receipt"]
