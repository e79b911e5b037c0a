"""No call is left open in the audit trail once the gateway is done with it (docs/audit.md): an input request
a client never answers is closed when the gateway forgets it, the requests of an `input_required` round that a
denial stopped are closed naming it, and a call cancelled while its request chain runs is closed too.
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from e2e_hosts import FORBIDDEN_QUESTION, HOLD_TEXT
from e2e_support import E2E_DIR, ConfigWriter, Sampler, fresh_gateway, gateway_env, raw_request, text_of
from helpers import run_cli
from mcp import MCPError
from test_audit_call_ends import Asked, audited, calls

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]


def upstream(script: str, **extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(E2E_DIR / script)], **extra}


def outline(legs: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(leg["phase"], leg["decision"], leg["status"]) for leg in legs]


@pytest.mark.parametrize(("transport", "script"), [("stdio", "e2e_upstream.py"), ("http", "handshake_upstream.py")])
async def test_an_input_request_never_answered_is_closed_when_the_gateway_stops(
    write_config: ConfigWriter, tmp_path: Path, transport: str, script: str
) -> None:
    """A 2026-07-28 client gets a sampling request in an `input_required` result and never retries: the
    sampling call, recorded as sent, is closed by a `cancelled` record as the gateway stops (it was left open
    forever), directly from a 2026-07-28 upstream or bridged from a handshake-era one."""
    config = audited(write_config, tmp_path, upstreams={"e2e": upstream(script)})
    with anyio.fail_after(60):
        async with fresh_gateway(transport, config, "2026-07-28", sampling_callback=Sampler()) as client:
            first = await raw_request(client, "tools/call", {"name": "ask", "arguments": {"question": "why?"}})
    assert first["resultType"] == "input_required"
    (sampling,) = calls(tmp_path / "audit.db", "sampling/createMessage").values()
    (tool,) = calls(tmp_path / "audit.db", "tools/call").values()
    assert outline(tool) == [("request", "allow", "success"), ("response", "allow", "success")]
    assert outline(sampling) == [("request", "allow", "success"), ("response", "error", "cancelled")]
    assert sampling[-1]["error"] == {
        "code": -32800,
        "message": "never answered: the gateway stopped",
        "reason": "input_unanswered",
    }
    assert sampling[-1]["receipt"]
    verified = await run_cli("audit", "verify", "--config", str(config), env=gateway_env())
    assert verified.returncode == 0
    assert "open calls" not in verified.stdout.decode()  # the note on calls left open (docs/audit.md)


@pytest.mark.parametrize("bridged", [False, True], ids=["handshake-era upstream", "2026-07-28 upstream, bridged"])
async def test_a_sampling_request_the_client_is_cancelled_answering_is_closed(
    write_config: ConfigWriter, tmp_path: Path, bridged: bool
) -> None:
    """A handshake-era client cancels a tool call while it answers the upstream's sampling request (a server
    request of a handshake-era upstream, or a 2026-07-28 upstream's question asked through the bridge): the
    sampling call, recorded as sent, gets a `cancelled` record (it was left open). Written once the cancellation
    reaches the gateway, or as the gateway stops: either way, by the time it has exited (the writer flushes)."""
    extra = {"upstreams": {"e2e": upstream("modern_upstream.py", era="2026-07-28")}} if bridged else {}
    config = audited(write_config, tmp_path, **extra)
    sampler = Asked()
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", config, "legacy", sampling_callback=sampler) as client:
            async with anyio.create_task_group() as tg:
                tg.start_soon(partial(client.call_tool, "ask", {"question": "never answered"}))
                await sampler.asked.wait()
                tg.cancel_scope.cancel()
            assert text_of(await client.call_tool("echo", {"text": "still serving"})) == "still serving"
    (sampling,) = calls(tmp_path / "audit.db", "sampling/createMessage").values()
    assert outline(sampling) == [("request", "allow", "success"), ("response", "error", "cancelled")]
    assert sampling[-1]["receipt"]


@pytest.mark.parametrize(("era", "script"), [("2026-07-28", "e2e_upstream.py"), ("legacy", "modern_upstream.py")])
async def test_the_requests_a_denial_withheld_from_the_client_are_closed_naming_it(
    write_config: ConfigWriter, tmp_path: Path, era: str, script: str
) -> None:
    """Two sampling requests in one `input_required` round, the second denied: the first, approved, never
    reaches the client; it is closed by a `refused` record naming the denied call (it was recorded as sent
    and left open), with its own chain's interceptors."""
    extra = {"era": "2026-07-28"} if script == "modern_upstream.py" else {}
    config = audited(
        write_config,
        tmp_path,
        upstreams={"e2e": upstream(script, **extra)},
        interceptors={"hosts": [{"module": "e2e_hosts:question_guard"}]},
    )
    sampler = Sampler()
    with anyio.fail_after(60):
        async with fresh_gateway("stdio", config, era, sampling_callback=sampler) as client:
            with pytest.raises(MCPError) as blocked:
                await client.call_tool("ask_two", {"first": "fine?", "second": FORBIDDEN_QUESTION})
    assert blocked.value.message == "Blocked by interceptor validation"
    assert sampler.questions == []
    denied, withheld = calls(tmp_path / "audit.db", "sampling/createMessage").values()
    (tool,) = calls(tmp_path / "audit.db", "tools/call").values()
    assert outline(denied) == [("request", "deny", "validation_failed")]
    assert outline(withheld) == [("request", "deny", "refused")]
    assert withheld[0]["intent_hash"] is None  # not recorded as sent
    assert withheld[0]["error"]["reason"] == "input_request_withheld"
    assert withheld[0]["error"]["call_id"] == denied[0]["call_id"]
    assert [entry["name"] for entry in withheld[0]["interceptors"]] == ["deny-questions"]
    assert withheld[0]["receipt"]
    assert outline(tool) == [("request", "allow", "success"), ("response", "deny", "validation_failed")]


@pytest.mark.parametrize(("transport", "era"), [("stdio", "legacy"), ("http", "2026-07-28")])
async def test_a_call_cancelled_while_its_request_chain_runs_is_closed(
    write_config: ConfigWriter, tmp_path: Path, transport: str, era: str
) -> None:
    """The client gives up on a call while its request chain still runs: a request-phase `cancelled` record
    closes it (the trail had nothing of it, although a chain ran)."""
    config = audited(write_config, tmp_path, interceptors={"hosts": [{"module": "e2e_hosts:hold_guard"}]})
    with anyio.fail_after(60):
        async with fresh_gateway(transport, config, era) as client:
            await client.list_tools()
            with pytest.raises(MCPError) as timed_out:
                await client.call_tool("echo", {"text": HOLD_TEXT}, read_timeout_seconds=0.5)
            assert text_of(await client.call_tool("echo", {"text": "next"})) == "next"
    assert timed_out.value.code == -32001
    recorded = calls(tmp_path / "audit.db", "tools/call").values()
    (held,) = [legs for legs in recorded if legs[0]["decision"] != "allow"]
    (following,) = [legs for legs in recorded if legs[0]["decision"] == "allow"]
    assert outline(held) == [("request", "error", "cancelled")]
    assert held[0]["error"] == {"code": -32800, "message": "Request cancelled"}
    assert held[0]["intent_hash"] is None
    assert held[0]["receipt"]
    assert outline(following) == [("request", "allow", "success"), ("response", "allow", "success")]
