"""exfiltration-guard's bounds fail closed (F6): a value it remembers is never pushed out by later ones (300
random look-alikes used to make it forget a tainted secret), and what it has no room to remember, past
`max_values_per_session` or `max_sessions`, is blocked by its shape on the way to any server it may not have
come from."""

from __future__ import annotations

import random
import string
from typing import Any

import pytest
from guard_support import messages, run_chain, tool_call

from mcp_interceptors import guards
from mcp_interceptors.guards._state import TtlMap

pytestmark = pytest.mark.anyio

AWS = "AKIAQYLPMN5HHHFPZAM2"


def look_alike(rng: random.Random) -> str:
    return "AKIA" + "".join(rng.choice(string.ascii_uppercase + "234567") for _ in range(16))


def read_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


async def read_from(host: Any, server: str, text: str, session: str = "s1") -> None:
    outcome = await run_chain(host, "tools/call", "response", read_result(text), sessionId=session, server=server)
    assert outcome.status == "success"  # learning never blocks


async def send_to(host: Any, server: str, text: str, session: str = "s1") -> Any:
    payload = tool_call("post", text=text)
    return await run_chain(host, "tools/call", "request", payload, sessionId=session, server=server)


async def test_f6_a_tainted_secret_is_not_forgotten_after_300_look_alikes() -> None:
    host = guards.load("exfiltration-guard")
    await read_from(host, "A", f"aws_access_key_id = {AWS}")
    rng = random.Random(6)
    for _ in range(30):  # 300 look-alikes, ten a result
        await read_from(host, "A", " ".join(look_alike(rng) for _ in range(10)))
    sent = await send_to(host, "B", f"here: {AWS}")
    assert messages(sent) == [("$.params.arguments.text", "aws_access_key read from 'A' is sent to 'B'")]


async def test_f6_past_max_values_per_session_every_value_of_that_kind_is_blocked_by_shape() -> None:
    host = guards.load("exfiltration-guard", {"max_values_per_session": 2})
    rng = random.Random(7)
    keys = [look_alike(rng) for _ in range(5)]
    for key in keys:
        await read_from(host, "A", f"key {key}")
    remembered = await send_to(host, "B", keys[0])
    assert messages(remembered) == [("$.params.arguments.text", "aws_access_key read from 'A' is sent to 'B'")]
    refused = await send_to(host, "B", keys[4])  # read after the cap: not remembered, still blocked
    assert messages(refused) == [
        (
            "$.params.arguments.text",
            "aws_access_key sent to 'B': more sensitive values were read than exfiltration-guard remembers "
            "(max_values_per_session), so no aws_access_key goes to a server it may not have come from until "
            "they expire",
        )
    ]
    unrelated = look_alike(random.Random(8))  # read by nobody, but of the overflowed kind: blocked too
    assert (await send_to(host, "B", unrelated)).status == "validation_failed"
    assert (await send_to(host, "A", keys[4])).status == "success"  # back to the only server they came from
    assert (await send_to(host, "B", "ghp_" + "Zq8xR2mT5vW9yB3nK6pL1sD4fG7hJ0aC2eF5")).status == "success"
    assert (await send_to(host, "B", keys[4], session="s2")).status == "success"  # another session: its own memory


async def test_f6_a_value_read_from_two_servers_past_the_cap_may_go_back_to_neither() -> None:
    host = guards.load("exfiltration-guard", {"max_values_per_session": 1})
    rng = random.Random(9)
    await read_from(host, "A", f"key {look_alike(rng)}")
    await read_from(host, "A", f"key {look_alike(rng)}")
    await read_from(host, "C", f"key {look_alike(rng)}")
    assert (await send_to(host, "A", look_alike(rng))).status == "validation_failed"


async def test_f6_past_max_sessions_new_sessions_fail_closed_and_the_old_keep_their_memory() -> None:
    host = guards.load("exfiltration-guard", {"max_sessions": 2})
    await read_from(host, "A", f"key {AWS}", session="s1")
    await send_to(host, "B", "nothing secret", session="idle")  # a session that remembers nothing
    rng = random.Random(10)
    second = look_alike(rng)
    await read_from(host, "A", f"key {second}", session="s2")  # takes the idle session's place
    third = look_alike(rng)
    await read_from(host, "A", f"key {third}", session="s3")  # no room: every session blocks the kind
    assert (await send_to(host, "B", AWS, session="s1")).status == "validation_failed"
    assert (await send_to(host, "B", second, session="s2")).status == "validation_failed"
    blocked = await send_to(host, "B", third, session="s3")
    assert "(max_sessions)" in messages(blocked)[0][1]
    assert (await send_to(host, "B", "an ordinary note", session="s4")).status == "success"


def test_ttl_map_add_refuses_a_new_key_when_full_and_evicts_nothing() -> None:
    items: TtlMap[str, int] = TtlMap(max_items=2, ttl_s=60)
    assert items.add("a", 1) and items.add("b", 2)
    assert not items.add("c", 3)
    assert items.add("a", 10)  # a key it holds is updated
    assert sorted(items.items()) == [("a", 10), ("b", 2)]
