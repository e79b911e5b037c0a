"""Escalations through planning and the executor: a validator asking for a person's approval blocks the run like
any error verdict, unless nothing else blocks it; then the result says which escalations a yes must lift and
withholds the payload that yes lets through (`ChainResult.approved`)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from fakes import FakeSource, crash, descriptor, entry, set_key, verdict

from mcp_interceptors.executor import Call, ChainResult, execute_plan
from mcp_interceptors.planning import Escalated, is_lifted, plan_for
from mcp_interceptors.protocol.descriptors import InterceptorDescriptor
from mcp_interceptors.protocol.escalation import Escalation, escalate
from mcp_interceptors.protocol.results import ValidationResult

pytestmark = pytest.mark.anyio

PAYLOAD = {"method": "tools/call", "params": {"name": "delete_repo", "arguments": {"repo": "x"}}}


def asks(message: str) -> Any:
    async def handler(call: Call) -> ValidationResult:
        return escalate(message, key=call.name).model_copy(update={"interceptor": call.name, "phase": call.phase})

    return handler


async def run(source: FakeSource, *descriptors: InterceptorDescriptor, direction: str = "sending") -> ChainResult:
    entries = [entry(d, "fake") for d in descriptors]
    plan = plan_for(entries, "tools/call", "request", direction)  # type: ignore[arg-type]
    with anyio.fail_after(5):
        return await execute_plan(plan, PAYLOAD, {"fake": source})


async def test_an_escalation_blocks_and_withholds_the_payload_a_yes_lets_through() -> None:
    source = FakeSource({"scrub": set_key("scrubbed", True), "approval": asks("Delete x?"), "ok": verdict(True)})
    result = await run(source, descriptor("scrub", "mutation"), descriptor("approval"), descriptor("ok"))
    assert (result.status, result.final_payload) == ("validation_failed", None)
    assert result.aborted_at is not None
    assert (result.aborted_at.interceptor, result.aborted_at.type) == ("approval", "validation")
    assert result.aborted_at.reason == "validation failed (approval required): Delete x?"
    assert result.escalations == (Escalated("approval", Escalation(message="Delete x?", key="approval")),)
    assert result.pending_payload == {**PAYLOAD, "scrubbed": True}  # after the mutation pass
    assert result.approved([]) is None and result.approved(["ok"]) is None
    approved = result.approved(["approval"])
    assert approved is not None and approved.allowed
    assert (approved.final_payload, approved.aborted_at, approved.escalations) == (result.pending_payload, None, ())


async def test_another_block_wins_over_an_escalation_so_nobody_is_asked() -> None:
    source = FakeSource({"approval": asks("Delete x?"), "policy": verdict(False, "error")})
    result = await run(source, descriptor("approval"), descriptor("policy"))
    assert result.status == "validation_failed"
    assert result.aborted_at is not None and result.aborted_at.interceptor == "policy"
    assert result.escalations == () and result.approved(["approval"]) is None


async def test_a_failed_fail_closed_interceptor_wins_over_an_escalation() -> None:
    source = FakeSource({"approval": asks("Delete x?"), "broken": crash()})
    result = await run(source, descriptor("approval"), descriptor("broken"))
    assert result.status == "validation_failed" and result.escalations == ()


async def test_an_audit_mode_escalation_is_recorded_and_never_blocks() -> None:
    result = await run(FakeSource({"approval": asks("Delete x?")}), descriptor("approval", mode="audit"))
    assert result.allowed and result.final_payload == PAYLOAD and result.escalations == ()
    assert [r.mode for r in result.results] == ["audit"]


async def test_receiving_mutators_run_after_an_escalation_and_their_output_is_withheld() -> None:
    """Validate, then mutate: the escalation does not gate the mutation pass, whose output waits for the yes."""
    source = FakeSource({"approval": asks("Delete x?"), "tag": set_key("tagged", True)})
    result = await run(source, descriptor("approval"), descriptor("tag", "mutation"), direction="receiving")
    assert source.names == ["approval", "tag"]
    assert result.final_payload is None and result.pending_payload == {**PAYLOAD, "tagged": True}


async def test_two_escalations_are_lifted_only_by_a_yes_to_both() -> None:
    source = FakeSource({"a": asks("A?"), "b": asks("B?")})
    result = await run(source, descriptor("a"), descriptor("b"))
    assert [item.interceptor for item in result.escalations] == ["a", "b"]
    assert result.approved(["a"]) is None
    assert not is_lifted((), ["a"])  # no escalation: nothing for a yes to lift
    approved = result.approved(["b", "a"])
    assert approved is not None and approved.final_payload == PAYLOAD


async def test_a_warning_that_carries_an_escalation_does_not_block_or_ask() -> None:
    async def warns(call: Call) -> ValidationResult:
        return escalate("A?").model_copy(update={"interceptor": call.name, "phase": call.phase, "severity": "warn"})

    result = await run(FakeSource({"v": warns}), descriptor("v"))
    assert result.allowed and result.escalations == ()
