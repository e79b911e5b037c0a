"""Bridged calls (a 2026-07-28 client on a handshake-era upstream) across their input rounds."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from mcp import MCPError

from mcp_interceptors.gateway.bridge import BridgedCall, Bridges

pytestmark = pytest.mark.anyio


async def test_a_call_that_ends_between_rounds_keeps_its_result_for_the_retry() -> None:
    """The upstream stops waiting for its answer and returns: the client's late retry gets that result."""
    runs = 0
    waiting = anyio.CancelScope()

    async def call(bridged: BridgedCall) -> dict[str, Any]:
        nonlocal runs
        runs += 1
        with waiting:  # the upstream stops waiting when the test says so
            await bridged.ask("sampling/createMessage", {"messages": []})
        return {"content": [{"type": "text", "text": "gave up waiting"}]}

    bridges = Bridges()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            bridged = bridges.start(tg, "owner", "legacy", call)
            first = await bridged.next_reply()
            assert first["resultType"] == "input_required"
            token = first["requestState"]
            waiting.cancel()
            await anyio.wait_all_tasks_blocked()  # the upstream call is over before the client answers
            late = bridges.find(token, "owner")
            assert late is bridged
            assert bridges.asker("legacy", "roots/list") is None  # no longer a target for upstream requests
            late.deliver({"q1": {"role": "assistant", "content": {"type": "text", "text": "too late"}}})
            assert await late.next_reply() == {"content": [{"type": "text", "text": "gave up waiting"}]}
            await anyio.wait_all_tasks_blocked()
            assert bridges.find(token, "owner") is None  # delivered once, then forgotten
    assert runs == 1


async def test_an_error_that_ends_the_call_between_rounds_reaches_the_retry() -> None:
    waiting = anyio.CancelScope()

    async def call(bridged: BridgedCall) -> dict[str, Any]:
        with waiting:
            await bridged.ask("elicitation/create", {})
        raise MCPError(-32603, "upstream failed")

    bridges = Bridges()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            bridged = bridges.start(tg, "owner", "legacy", call)
            token = (await bridged.next_reply())["requestState"]
            waiting.cancel()
            await anyio.wait_all_tasks_blocked()  # the call ended between rounds
            late = bridges.find(token, "owner")
            assert late is not None
            with pytest.raises(MCPError, match="upstream failed"):
                await late.next_reply()


async def test_tokens_belong_to_their_owner() -> None:
    async def call(bridged: BridgedCall) -> dict[str, Any]:
        return {"answer": await bridged.ask("roots/list", {})}

    bridges = Bridges()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            bridged = bridges.start(tg, "alice", "legacy", call)
            token = (await bridged.next_reply())["requestState"]
            assert bridges.find(token, "mallory") is None
            assert bridges.find(token, "alice") is bridged
            bridged.deliver({"q1": {"roots": []}})
            assert await bridged.next_reply() == {"answer": {"roots": []}}


async def test_a_client_waiting_on_a_call_that_times_out_gets_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mcp_interceptors.gateway.bridge.BRIDGE_TIMEOUT_S", 0.1)

    async def call(bridged: BridgedCall) -> dict[str, Any]:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    bridges = Bridges()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            bridged = bridges.start(tg, "owner", "legacy", call)
            with pytest.raises(MCPError, match="ended without an answer") as ended:
                await bridged.next_reply()
    assert ended.value.code == -32603
    assert bridges.find(bridged.token, "owner") is None


async def test_a_server_request_goes_to_the_newest_call_only_when_all_calls_have_one_owner() -> None:
    """The wire does not say which call a server request belongs to: with two owners, no guess."""
    release = anyio.Event()

    async def call(bridged: BridgedCall) -> dict[str, Any]:
        await release.wait()
        return {}

    bridges = Bridges()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            first = bridges.start(tg, "alice", "legacy", call)
            second = bridges.start(tg, "alice", "legacy", call)
            assert bridges.asker("legacy", "sampling/createMessage") is second
            third = bridges.start(tg, "bob", "legacy", call)
            with pytest.raises(MCPError) as refused:
                bridges.asker("legacy", "sampling/createMessage")
            assert bridges.asker("other", "sampling/createMessage") is None
            release.set()
            for bridged in (first, second, third):
                await bridged.next_reply()  # each call's outcome is taken, so its task ends
    assert refused.value.code == -32600
    assert refused.value.data == {"reason": "ambiguous_caller", "upstream": "legacy"}


async def test_a_retry_without_an_answer_is_asked_again() -> None:
    """A retry that leaves a question unanswered gets it again at once, as from a direct server (not a hang)."""
    answer = {"role": "assistant", "content": {"type": "text", "text": "42"}, "model": "m"}

    async def call(bridged: BridgedCall) -> dict[str, Any]:
        return {"answer": await bridged.ask("sampling/createMessage", {"messages": []})}

    bridges = Bridges()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            bridged = bridges.start(tg, "owner", "legacy", call)
            first = await bridged.resume({})
            again = await bridged.resume({"q9": answer})  # not the key asked: q1 is still unanswered
            assert again == first
            assert await bridged.resume({"q1": answer}) == {"answer": answer}


async def test_a_question_the_upstream_stopped_waiting_for_is_not_asked_again() -> None:
    waiting = anyio.CancelScope()
    gave_up = anyio.Event()
    release = anyio.Event()

    async def call(bridged: BridgedCall) -> dict[str, Any]:
        with waiting:
            await bridged.ask("roots/list", {})
        gave_up.set()
        await release.wait()
        return {"roots": "none"}

    bridges = Bridges()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            bridged = bridges.start(tg, "owner", "legacy", call)
            assert list((await bridged.resume({}))["inputRequests"]) == ["q1"]
            waiting.cancel()  # the upstream stops waiting for its answer
            await gave_up.wait()
            release.set()
            assert await bridged.resume({}) == {"roots": "none"}


async def test_a_replayed_retry_is_refused_while_another_waits_on_the_call() -> None:
    """Two requests with one `requestState` at once: the second is refused precisely; the first gets the result."""
    answer = {"roots": []}
    release = anyio.Event()

    async def call(bridged: BridgedCall) -> dict[str, Any]:
        got = await bridged.ask("roots/list", {})
        await release.wait()
        return {"answer": got}

    bridges = Bridges()
    outcome: list[dict[str, Any]] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            bridged = bridges.start(tg, "owner", "legacy", call)
            await bridged.resume({})

            async def first_retry() -> None:
                outcome.append(await bridged.resume({"q1": answer}))

            tg.start_soon(first_retry)
            await anyio.wait_all_tasks_blocked()
            with pytest.raises(MCPError) as refused:
                await bridged.resume({"q1": {"roots": ["forged"]}})
            release.set()
    assert refused.value.code == -32602
    assert refused.value.data == {"reason": "request_state_in_use", "field": "requestState"}
    assert outcome == [{"answer": answer}]


async def test_an_abandoned_call_refuses_its_questions_and_takes_no_more() -> None:
    """A guard refused a call's question: the upstream request gets that error, and the owner's other
    call gets its own question (the abandoned one, though newer, is no longer a target)."""
    refusal = MCPError(-32602, "Blocked by interceptor validation", {"interceptor": "deny-questions"})
    release = anyio.Event()
    seen: list[Any] = []

    async def asks_later(bridged: BridgedCall) -> dict[str, Any]:
        await release.wait()
        target = bridges.asker("legacy", "sampling/createMessage")
        assert target is not None
        return {"answer": await target.ask("sampling/createMessage", {"messages": ["later"]})}

    async def asks_now(bridged: BridgedCall) -> dict[str, Any]:
        try:
            await bridged.ask("sampling/createMessage", {"messages": ["refused"]})
        except MCPError as exc:
            seen.append(exc)
            raise
        raise AssertionError("unreachable")

    bridges = Bridges()
    answer = {"role": "assistant", "content": {"type": "text", "text": "42"}, "model": "m"}
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            older = bridges.start(tg, "owner", "legacy", asks_later)
            newer = bridges.start(tg, "owner", "legacy", asks_now)
            await newer.resume({})
            newer.abandon(refusal)
            await anyio.wait_all_tasks_blocked()
            release.set()
            round_ = await older.resume({})
            assert round_["inputRequests"] == {
                "q1": {"method": "sampling/createMessage", "params": {"messages": ["later"]}}
            }
            assert await older.resume({"q1": answer}) == {"answer": answer}
    assert seen == [refusal]
    assert bridges.find(newer.token, "owner") is None


async def test_questions_left_open_when_a_call_ends_get_an_error() -> None:
    """A call cancelled (its client gave up) with a question still open: the upstream request that asked
    is answered with an error at once, not left waiting for the bridge timeout."""
    outcome: list[Any] = []

    async def call(bridged: BridgedCall) -> dict[str, Any]:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def upstream_request(bridged: BridgedCall) -> None:
        try:
            outcome.append(await bridged.ask("elicitation/create", {}))
        except MCPError as exc:
            outcome.append(exc.code)

    bridges = Bridges()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            bridged = bridges.start(tg, "owner", "legacy", call)
            tg.start_soon(upstream_request, bridged)
            await bridged.resume({})
            bridged.scope.cancel()
    assert outcome == [-32603]


async def test_a_server_request_goes_to_a_call_whose_client_is_waiting() -> None:
    """The newer call is between rounds (its client may never retry: a retry is optional); the older
    call's client waits on it: the upstream's next request goes where a client will see it."""
    release = anyio.Event()

    async def asks_now(bridged: BridgedCall) -> dict[str, Any]:
        return {"answer": await bridged.ask("roots/list", {})}

    async def waits(bridged: BridgedCall) -> dict[str, Any]:
        await release.wait()
        return {}

    bridges = Bridges()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            older = bridges.start(tg, "owner", "legacy", waits)
            newer = bridges.start(tg, "owner", "legacy", asks_now)
            assert (await newer.resume({}))["resultType"] == "input_required"  # the client does not come back
            tg.start_soon(older.resume, {})
            await anyio.wait_all_tasks_blocked()
            assert bridges.asker("legacy", "sampling/createMessage") is older
            release.set()
            tg.cancel_scope.cancel()


async def test_server_requests_asked_at_once_go_to_calls_of_their_own() -> None:
    """Three calls of one client wait while the upstream asks three questions at once: each goes to a
    different call, so every client request gets its round (before, the newest call, still marked
    waiting until its round went back, took them all and the others waited out the bridge timeout)."""
    rounds: list[dict[str, Any]] = []
    all_rounds = anyio.Event()

    async def call(bridged: BridgedCall) -> dict[str, Any]:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def client(bridged: BridgedCall) -> None:
        rounds.append(await bridged.resume({}))
        if len(rounds) == 3:
            all_rounds.set()

    async def upstream_request(n: int) -> None:
        target = bridges.asker("legacy", "sampling/createMessage")
        assert target is not None
        await target.ask("sampling/createMessage", {"n": n})

    bridges = Bridges()
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            calls = [bridges.start(tg, "owner", "legacy", call) for _ in range(3)]
            for bridged in calls:
                tg.start_soon(client, bridged)
            await anyio.wait_all_tasks_blocked()
            for n in range(3):
                tg.start_soon(upstream_request, n)
            await all_rounds.wait()
            tg.cancel_scope.cancel()
    assert sorted(len(round_["inputRequests"]) for round_ in rounds) == [1, 1, 1]
    assert sorted(round_["requestState"] for round_ in rounds) == sorted(bridged.token for bridged in calls)
