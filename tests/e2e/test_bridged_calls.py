"""A 2026-07-28 client calling a handshake-era-only upstream (every TypeScript-SDK server today).

The gateway bridges such a call: the upstream's sampling/elicitation/roots requests travel to the
client as `input_required` rounds. The call must otherwise behave as a direct one: the upstream's
progress reaches the request the client is waiting on, and a cancelled call is cancelled upstream.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from e2e_hosts import FORBIDDEN_QUESTION
from e2e_support import ConfigWriter, Sampler, fresh_gateway, gateway_env, raw_request, text_of, unique
from helpers import cli_argv, free_tcp_port, http_transport, running
from mcp import Client, MCPError

HANDSHAKE_UPSTREAM = str(Path(__file__).resolve().parent / "handshake_upstream.py")

pytestmark = pytest.mark.anyio


def handshake_config() -> dict[str, Any]:
    return {"upstreams": {"legacy": {"command": sys.executable, "args": [HANDSHAKE_UPSTREAM]}}}


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_progress_of_a_bridged_call_reaches_the_client(write_config: ConfigWriter, transport: str) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    config = write_config(handshake_config())
    with anyio.fail_after(60):
        async with fresh_gateway(transport, config, "2026-07-28", sampling_callback=Sampler()) as client:
            result = await client.call_tool("countdown", {"steps": 3}, progress_callback=on_progress)
            asked = await client.call_tool("ask", {"question": "q"})  # the bridge itself still works
    assert text_of(result) == "done"
    assert text_of(asked) == "model says: 42"
    assert seen == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_cancelled_bridged_call_is_cancelled_upstream(write_config: ConfigWriter, transport: str) -> None:
    token = unique("bridged")
    config = write_config(handshake_config())
    with anyio.fail_after(60):
        async with fresh_gateway(transport, config, "2026-07-28") as client:
            await client.list_tools()  # the gateway is up: the timeout below measures the call alone
            with pytest.raises(MCPError):
                await client.call_tool("sleep", {"seconds": 60, "token": token}, read_timeout_seconds=1)
            verdict = await client.call_tool("was_cancelled", {"token": token, "wait": 10})
    assert text_of(verdict) == "cancelled"


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_retry_with_an_unknown_request_state_is_refused_not_run(
    write_config: ConfigWriter, transport: str
) -> None:
    """A stale or forged `requestState` gets what a direct 2026-07-28 server answers; the call never runs."""
    name = unique("note")
    config = write_config(handshake_config())
    with anyio.fail_after(60):
        async with fresh_gateway(transport, config, "2026-07-28") as client:
            retry = {
                "name": "save_note",
                "arguments": {"name": name, "text": "twice?"},
                "inputResponses": {"q1": {"action": "accept", "content": {}}},
                "requestState": "not-a-token-this-gateway-minted",
            }
            with pytest.raises(MCPError) as refused:
                await raw_request(client, "tools/call", retry)
            saved = await client.call_tool("read_note", {"name": name})
    assert (refused.value.code, refused.value.message) == (-32602, "Invalid or expired requestState")
    assert refused.value.data == {"reason": "invalid_request_state", "field": "requestState"}
    assert text_of(saved) == "<missing>"  # the refused retry did not run the tool


async def test_a_bridged_question_never_reaches_another_clients_call(write_config: ConfigWriter) -> None:
    """Alice's call asks for sampling while Bob's newer call runs on the same handshake-era upstream.

    Over stdio the upstream does not say which call asks, so the gateway refuses the question rather
    than show Alice's prompt to Bob's model (and hand Alice Bob's answer).
    """
    token = unique("gate")
    config = write_config({**handshake_config(), "auth": {"tokens": ["alice-token-1f3a", "bob-token-9c2e"]}})
    port = free_tcp_port()
    url = f"http://127.0.0.1:{port}/mcp"
    alice_model, bob_model = Sampler(), Sampler()
    outcome: list[Any] = []
    alice_done = anyio.Event()
    argv = cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}")
    with anyio.fail_after(60):
        async with (
            running(argv, port=port, env=gateway_env(), label="HTTP gateway"),
            Client(
                http_transport(url, headers={"Authorization": "Bearer alice-token-1f3a"}),
                mode="2026-07-28",
                sampling_callback=alice_model,
            ) as alice,
            Client(
                http_transport(url, headers={"Authorization": "Bearer bob-token-9c2e"}),
                mode="2026-07-28",
                sampling_callback=bob_model,
            ) as bob,
        ):

            async def alice_asks() -> None:
                try:
                    outcome.append(await alice.call_tool("ask_after", {"question": "alice's secret", "token": token}))
                except MCPError as exc:
                    outcome.append(exc)
                alice_done.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(alice_asks)
                waited = await bob.call_tool("wait_started", {"token": f"asking:{token}"})
                assert text_of(waited) == "started"  # Alice's call is in flight before Bob's starts
                tg.start_soon(bob.call_tool, "sleep", {"seconds": 60, "token": token})
                await alice_done.wait()  # Alice's call ends once the upstream's question is refused
                tg.cancel_scope.cancel()  # Bob's sleep is no longer needed
    assert bob_model.questions == []
    assert alice_model.questions == []  # refused, not guessed: the gateway cannot tell whose call asked
    [refused] = outcome  # the upstream passes the gateway's refusal on as the call's error
    assert isinstance(refused, MCPError)
    assert refused.code == -32600
    assert refused.message.startswith("gateway refused sampling/createMessage: calls of 2 different clients")


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_retry_missing_an_input_response_is_asked_again(write_config: ConfigWriter, transport: str) -> None:
    """The upstream still waits on its question: a retry without the answer gets the question again at once
    (as from a direct server), not a hang until the upstream's timeout."""
    config = write_config(handshake_config())
    with anyio.fail_after(30):
        async with fresh_gateway(transport, config, "2026-07-28", sampling_callback=Sampler()) as client:
            await client.list_tools()
            call = {"name": "ask", "arguments": {"question": "again?"}}
            first = await raw_request(client, "tools/call", call)
            state = first["requestState"]
            again = await raw_request(client, "tools/call", {**call, "requestState": state, "inputResponses": {}})
            answer = {"role": "assistant", "content": {"type": "text", "text": "yes"}, "model": "m"}
            done = await raw_request(
                client, "tools/call", {**call, "requestState": state, "inputResponses": {"q1": answer}}
            )
    assert first["resultType"] == again["resultType"] == "input_required"
    assert again["inputRequests"] == first["inputRequests"]
    assert done["content"] == [{"type": "text", "text": "model says: yes"}]


async def test_a_retry_naming_another_request_is_refused_not_continued(write_config: ConfigWriter) -> None:
    """A `requestState` continues the call it was issued for: a "retry" that names another tool (or other
    arguments) would be governed and recorded as that request while the first call went on."""
    name = unique("note")
    config = write_config(handshake_config())
    answer = {"role": "assistant", "content": {"type": "text", "text": "yes"}, "model": "m"}
    with anyio.fail_after(30):
        async with fresh_gateway("stdio", config, "2026-07-28", sampling_callback=Sampler()) as client:
            await client.list_tools()
            call = {"name": "ask", "arguments": {"question": "q"}}
            state = (await raw_request(client, "tools/call", call))["requestState"]
            other = {"name": "save_note", "arguments": {"name": name, "text": "smuggled"}}
            refusals = []
            for retry in (other, {**call, "arguments": {"question": "another"}}):
                with pytest.raises(MCPError) as refused:
                    await raw_request(client, "tools/call", {**retry, "requestState": state, "inputResponses": {}})
                refusals.append((refused.value.code, refused.value.data))
            done = await raw_request(
                client, "tools/call", {**call, "requestState": state, "inputResponses": {"q1": answer}}
            )
            saved = await client.call_tool("read_note", {"name": name})
    assert refusals == [(-32602, {"reason": "request_state_mismatch", "field": "requestState"})] * 2
    assert done["content"] == [{"type": "text", "text": "model says: yes"}]  # the call itself is intact
    assert text_of(saved) == "<missing>"


async def test_a_blocked_question_is_refused_to_the_upstream_too(write_config: ConfigWriter) -> None:
    """A guard blocks the question a bridged call asks: the client gets the chain's error, and so does the
    upstream request that asked (at once), and the call is over. Left waiting, the call would take the
    questions of the client's other calls."""
    name = unique("asked")
    config = write_config({**handshake_config(), "interceptors": {"hosts": [{"module": "e2e_hosts:question_guard"}]}})
    with anyio.fail_after(30):
        async with fresh_gateway("stdio", config, "2026-07-28", sampling_callback=Sampler()) as client:
            with pytest.raises(MCPError) as blocked:
                await client.call_tool("ask_and_note", {"question": FORBIDDEN_QUESTION, "name": name})
            noted = await client.call_tool("wait_started", {"token": f"noted:{name}"})
            upstream_saw = await client.call_tool("read_note", {"name": name})
            fine = await client.call_tool("ask", {"question": "fine?"})
    assert (blocked.value.code, blocked.value.data["interceptor"]) == (-32602, "deny-questions")
    assert text_of(noted) == "started"
    seen = json.loads(text_of(upstream_saw))
    assert (seen["code"], seen["data"]["interceptor"]) == (-32602, "deny-questions")
    assert text_of(fine) == "model says: 42"


async def test_a_blocked_answer_is_refused_to_the_upstream_too(write_config: ConfigWriter) -> None:
    """A guard blocks the client's answer in its retry: the upstream request that asked gets the chain's
    error too, rather than wait (with its call) for an answer that will not come."""
    name = unique("answered")
    config = write_config({**handshake_config(), "interceptors": {"hosts": [{"module": "e2e_hosts:question_guard"}]}})

    async def leaky(ctx: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=FORBIDDEN_QUESTION), model="m"
        )

    with anyio.fail_after(30):
        async with fresh_gateway("stdio", config, "2026-07-28", sampling_callback=leaky) as client:
            with pytest.raises(MCPError) as blocked:
                await client.call_tool("ask_and_note", {"question": "anything?", "name": name})
            noted = await client.call_tool("wait_started", {"token": f"noted:{name}"})
            upstream_saw = await client.call_tool("read_note", {"name": name})
    assert (blocked.value.code, blocked.value.data["interceptor"]) == (-32602, "deny-answers")
    assert text_of(noted) == "started"
    seen = json.loads(text_of(upstream_saw))
    assert (seen["code"], seen["data"]["interceptor"]) == (-32602, "deny-answers")


@pytest.mark.parametrize("answer", [{"content": {"type": "text", "text": FORBIDDEN_QUESTION}}, "just text"])
async def test_an_answer_runs_the_chain_of_the_question_it_answers_whatever_its_shape(
    write_config: ConfigWriter, answer: Any
) -> None:
    """A sampling answer without `role` or `model` looks like no client feature's result: it still runs the
    sampling response chain, since the gateway knows what it asked under that key; one that is not even an
    object is refused naming it."""
    config = write_config({**handshake_config(), "interceptors": {"hosts": [{"module": "e2e_hosts:question_guard"}]}})
    call = {"name": "ask", "arguments": {"question": "anything?"}}
    with anyio.fail_after(30):
        async with fresh_gateway("stdio", config, "2026-07-28", sampling_callback=Sampler()) as client:
            first = await raw_request(client, "tools/call", call)
            [key] = first["inputRequests"]
            retry = {**call, "requestState": first["requestState"], "inputResponses": {key: answer}}
            with pytest.raises(MCPError) as refused:
                await raw_request(client, "tools/call", retry)
    assert refused.value.code == -32602
    if isinstance(answer, dict):
        assert (refused.value.data["interceptor"], refused.value.data["event"]) == (
            "deny-answers",
            "sampling/createMessage",
        )
    else:
        assert refused.value.data == {"field": f"inputResponses.{key}"}
