"""The gateway's own `requestState` (`gateway/request_state.py`): sealed with HMAC-SHA256 under keys the
replicas share, so a 2026-07-28 retry is accepted by any replica, and a token altered, forged, expired, or
issued to another session or request is refused with -32602 naming why."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from guard_support import E2E_TIMEOUT_S, gateway_config
from helpers import child_env, free_tcp_port, running
from mcp import MCPError
from test_replicas import replicas

from mcp_interceptors.gateway.request_state import RequestStates, opened_retry, request_digest, sealed_round

KEY, OTHER = b"k" * 32, b"o" * 32
ROUND = {
    "resultType": "input_required",
    "inputRequests": {"q1": {"method": "elicitation/create", "params": {"message": "How was it?"}}},
    "requestState": "upstream-own-state",
}
CALL = {"name": "feedback", "arguments": {}}


def refusal(exc: pytest.ExceptionInfo[MCPError]) -> tuple[int, str, str]:
    data = exc.value.error.data
    return exc.value.error.code, data["reason"], exc.value.error.message


def test_a_round_sealed_by_one_replica_opens_on_another_with_the_upstream_state_back() -> None:
    one, two = RequestStates([KEY]), RequestStates([KEY])
    sealed = sealed_round(one, "modern:user:alice", "notes", "tools/call", CALL, ROUND)
    assert sealed["requestState"].startswith("mcpi1.") and sealed["inputRequests"] == ROUND["inputRequests"]
    retry = {**CALL, "inputResponses": {"q1": {"action": "accept"}}, "requestState": sealed["requestState"]}
    params, asked = opened_retry(two, "modern:user:alice", "notes", "tools/call", retry)
    assert params == {**CALL, "inputResponses": {"q1": {"action": "accept"}}, "requestState": "upstream-own-state"}
    assert asked == {"q1": "elicitation/create"}


def test_an_upstream_round_without_state_is_retried_without_one() -> None:
    states = RequestStates([KEY])
    sealed = sealed_round(states, "s", "notes", "tools/call", CALL, {**ROUND, "requestState": None} | {})
    no_state = {k: v for k, v in ROUND.items() if k != "requestState"}
    sealed = sealed_round(states, "s", "notes", "tools/call", CALL, no_state)
    params, _ = opened_retry(states, "s", "notes", "tools/call", {**CALL, "requestState": sealed["requestState"]})
    assert params == CALL


def _token(states: RequestStates, session: str = "s") -> str:
    return states.seal(session, "notes", request_digest("tools/call", CALL), {"q1": "elicitation/create"}, "x")


@pytest.mark.parametrize(
    ("token", "reason", "message"),
    [
        ("made-up", "invalid_request_state", "requestState was not issued by this gateway"),
        (None, "invalid_request_state", "requestState was not issued by this gateway"),
        (
            "mcpi1.e30.AAAA",
            "invalid_request_state",
            "requestState failed its integrity check: it was altered or forged",
        ),
    ],
)
def test_a_token_not_sealed_by_the_gateway_is_refused(token: Any, reason: str, message: str) -> None:
    with pytest.raises(MCPError) as refused:
        RequestStates([KEY]).open(token, "s", "notes", request_digest("tools/call", CALL))
    assert refusal(refused) == (-32602, reason, message)
    assert refused.value.error.data["field"] == "requestState"


def test_an_altered_or_forged_token_fails_its_integrity_check() -> None:
    states = RequestStates([KEY])
    token = _token(states)
    body, _, mac = token.rpartition(".")
    claims = json.loads(_unb64(body[len("mcpi1.") :]))
    claims["s"] = "modern:user:mallory"  # someone else's session, the MAC kept
    altered = f"mcpi1.{_b64(json.dumps(claims).encode())}.{mac}"
    forged = _token(RequestStates([OTHER]))  # sealed with a key the replicas do not share
    for bad in (altered, forged, token[:-2] + ("AA" if not token.endswith("AA") else "BB")):
        with pytest.raises(MCPError) as refused:
            states.open(bad, "modern:user:mallory", "notes", request_digest("tools/call", CALL))
        assert refusal(refused) == (
            -32602,
            "invalid_request_state",
            "requestState failed its integrity check: it was altered or forged",
        )


def test_a_token_of_another_session_or_request_or_past_its_time_is_refused() -> None:
    states = RequestStates([KEY], ttl_s=60)
    digest = request_digest("tools/call", CALL)
    with pytest.raises(MCPError) as refused:
        states.open(_token(states, "alice"), "bob", "notes", digest)
    assert refusal(refused) == (-32602, "request_state_mismatch", "requestState was issued to another session")
    other_call = request_digest("tools/call", {"name": "post", "arguments": {"text": "x"}})
    with pytest.raises(MCPError) as refused:
        states.open(_token(states), "s", "notes", other_call)
    assert refusal(refused)[1] == "request_state_mismatch"
    expired = RequestStates([KEY], ttl_s=-1)
    with pytest.raises(MCPError) as refused:
        states.open(_token(expired), "s", "notes", digest)
    assert refusal(refused) == (-32602, "request_state_expired", "requestState expired (rounds last 60 s): call again")


def test_a_rotated_in_key_seals_while_the_old_one_still_opens() -> None:
    old, rotated = RequestStates([KEY]), RequestStates([OTHER, KEY])
    assert rotated.open(_token(old), "s", "notes", request_digest("tools/call", CALL))["st"] == "x"
    with pytest.raises(MCPError):
        old.open(_token(rotated), "s", "notes", request_digest("tools/call", CALL))


def test_without_a_configured_key_each_process_draws_its_own() -> None:
    one, two = RequestStates(), RequestStates()
    assert not one.shared and one.keys != two.keys
    with pytest.raises(MCPError):
        two.open(_token(one), "s", "notes", request_digest("tools/call", CALL))
    assert time.time() > 0


def _b64(data: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# ----------------------------------------------------------------------------- two real replicas

ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"sampling": {}},
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
}


async def call(http: httpx2.AsyncClient, url: str, params: dict[str, Any]) -> dict[str, Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {**params, "_meta": ENVELOPE}}
    headers = {**ACCEPT, "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": params["name"]}
    response = await http.post(url, json=body, headers=headers)
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        text = [line[5:] for line in text.splitlines() if line.startswith("data:")][-1]
    answer: dict[str, Any] = json.loads(text)
    return answer


E2E_UPSTREAM = Path(__file__).resolve().parents[1] / "e2e" / "e2e_upstream.py"
ASK = {"name": "ask", "arguments": {"question": "why?"}}


@pytest.mark.anyio
@pytest.mark.e2e
async def test_a_retry_lands_on_another_replica_and_a_tampered_one_is_refused(tmp_path: Path) -> None:
    """Both replicas front one HTTP upstream (whose own requestState only it opens); the client's retry of
    an `input_required` round goes to the replica that did not seal it."""
    port = free_tcp_port()
    keys = ["shared-request-state-key-" + "x" * 16]
    config = gateway_config(
        [], upstreams={"notes": {"url": f"http://127.0.0.1:{port}/mcp"}}, state={"request_state_keys": keys}
    )
    argv = [sys.executable, str(E2E_UPSTREAM), "--http", str(port)]
    with anyio.fail_after(2 * E2E_TIMEOUT_S):
        async with (
            running(argv, port=port, env=child_env(), label="HTTP upstream"),
            replicas(tmp_path, config) as (url_a, url_b),
            httpx2.AsyncClient(timeout=30) as http,
        ):
            first = await call(http, url_a, ASK)
            assert "result" in first, first
            round_ = first["result"]
            assert round_["resultType"] == "input_required" and round_["requestState"].startswith("mcpi1.")
            [key] = round_["inputRequests"]
            answer = {"role": "assistant", "content": {"type": "text", "text": "because"}, "model": "m"}
            retry = {**ASK, "inputResponses": {key: answer}, "requestState": round_["requestState"]}
            done = await call(http, url_b, retry)
            assert done.get("result", {}).get("content", [{}])[0].get("text") == "model says: because", done
            tampered = {**retry, "requestState": round_["requestState"][:-3] + "AAA"}
            error = (await call(http, url_b, tampered))["error"]
            assert error["code"] == -32602 and error["data"]["reason"] == "invalid_request_state"
            assert error["message"] == "requestState failed its integrity check: it was altered or forged"
            other = {**retry, "arguments": {"question": "something else"}}
            error = (await call(http, url_a, other))["error"]
            assert error["data"]["reason"] == "request_state_mismatch"
