"""The executor over `FakeSource`s made of plain async functions (no mcp): order, parallelism, deadlines."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from fakes import FakeSource, crash, descriptor, entry, set_key, unchanged, verdict

from mcp_interceptors.executor import Call, ChainResult, execute_plan
from mcp_interceptors.planning import Overrides, plan_for
from mcp_interceptors.protocol.descriptors import InterceptorDescriptor
from mcp_interceptors.protocol.errors import InterceptorsError, InterceptorTimeoutError
from mcp_interceptors.protocol.results import SinkResult, ValidationResult

pytestmark = pytest.mark.anyio

PAYLOAD = {"method": "tools/call", "params": {"name": "t", "arguments": {"x": 1}}}


async def run(
    source: FakeSource,
    *descriptors: InterceptorDescriptor,
    direction: str = "sending",
    overrides: dict[str, Overrides] | None = None,
    sinks: bool = False,
    **options: Any,
) -> ChainResult:
    entries = [entry(d, "fake", overrides=(overrides or {}).get(d.name)) for d in descriptors]
    plan = plan_for(entries, "tools/call", "request", direction, sinks_enabled=sinks)  # type: ignore[arg-type]
    with anyio.fail_after(5):
        return await execute_plan(plan, PAYLOAD, {"fake": source}, **options)


class Hang:
    """A handler that simulates a hung interceptor and records whether it was cancelled."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []
        self.finished: list[str] = []

    async def __call__(self, call: Call) -> ValidationResult:
        try:
            await anyio.sleep(5)  # deadlines in these tests are >= 25x shorter
        except anyio.get_cancelled_exc_class():
            self.cancelled.append(call.name)
            raise
        self.finished.append(call.name)
        return ValidationResult(valid=True)


# --------------------------------------------------------------------------- order (R37-R41)


async def test_r38_sending_runs_every_mutator_before_any_validator() -> None:
    source = FakeSource({"m1": set_key("a", 1), "m2": set_key("b", 2), "v1": verdict(True), "v2": verdict(True)})
    result = await run(
        source,
        descriptor("v1"),
        descriptor("m2", "mutation", priorityHint=2),
        descriptor("v2"),
        descriptor("m1", "mutation", priorityHint=1),
    )
    assert source.names[:2] == ["m1", "m2"]
    assert sorted(source.names[2:]) == ["v1", "v2"]
    assert [c.payload for c in source.calls[2:]] == [{**PAYLOAD, "a": 1, "b": 2}] * 2  # validators see the output
    assert result.status == "success"
    assert result.final_payload == {**PAYLOAD, "a": 1, "b": 2}


async def test_r39_receiving_runs_every_validator_before_any_mutator() -> None:
    source = FakeSource({"m": set_key("a", 1), "v1": verdict(True), "v2": verdict(True)})
    result = await run(source, descriptor("m", "mutation"), descriptor("v1"), descriptor("v2"), direction="receiving")
    assert sorted(source.names[:2]) == ["v1", "v2"]
    assert source.names[2] == "m"
    assert [c.payload for c in source.calls[:2]] == [PAYLOAD, PAYLOAD]
    assert result.final_payload == {**PAYLOAD, "a": 1}


async def test_r37_each_mutator_receives_the_previous_output() -> None:
    source = FakeSource({"a": set_key("a", 1), "b": set_key("b", 2), "c": set_key("c", 3)})
    result = await run(source, *(descriptor(n, "mutation", priorityHint=i) for i, n in enumerate("abc")))
    assert [c.payload for c in source.calls] == [PAYLOAD, {**PAYLOAD, "a": 1}, {**PAYLOAD, "a": 1, "b": 2}]
    assert result.final_payload == {**PAYLOAD, "a": 1, "b": 2, "c": 3}


async def test_r41_validators_in_a_pass_share_one_snapshot() -> None:
    source = FakeSource({f"v{i}": verdict(True) for i in range(4)})
    await run(source, *(descriptor(f"v{i}") for i in range(4)))
    assert len({id(c.payload) for c in source.calls}) == 1


# --------------------------------------------------------------------------- parallel validators (R42, R43, R36)


async def test_r42_r43_every_validator_runs_and_the_decision_waits_for_all() -> None:
    gate = anyio.Event()
    done: list[str] = []

    async def waits(call: Call) -> ValidationResult:
        await gate.wait()  # only released by a validator later in plan order: proves they run concurrently
        done.append(call.name)
        return ValidationResult(interceptor=call.name, valid=True, severity="info")

    async def releases(call: Call) -> ValidationResult:
        gate.set()
        done.append(call.name)
        return ValidationResult(interceptor=call.name, valid=False, severity="warn")

    source = FakeSource({"blocker": verdict(False, "error"), "waits": waits, "releases": releases})
    result = await run(source, descriptor("blocker"), descriptor("waits"), descriptor("releases"))
    assert sorted(source.names) == ["blocker", "releases", "waits"]
    assert done == ["releases", "waits"]
    assert result.status == "validation_failed"
    assert result.aborted_at is not None and result.aborted_at.interceptor == "blocker"
    assert [r.interceptor for r in result.results] == ["blocker", "waits", "releases"]  # plan order, not completion
    assert result.validation_summary.model_dump() == {"errors": 1, "warnings": 1, "infos": 1}


async def test_r36_completion_order_does_not_change_results_or_decision() -> None:
    second_done = anyio.Event()

    async def slow_first(call: Call) -> ValidationResult:
        await second_done.wait()
        return ValidationResult(interceptor=call.name, valid=False, severity="error")

    async def fast_second(call: Call) -> ValidationResult:
        second_done.set()
        return ValidationResult(interceptor=call.name, valid=False, severity="error")

    source = FakeSource({"a": slow_first, "b": fast_second})
    result = await run(source, descriptor("a"), descriptor("b"))
    assert [r.interceptor for r in result.results] == ["a", "b"]
    assert result.aborted_at is not None and result.aborted_at.interceptor == "a"  # R68


# --------------------------------------------------------------------------- routing of failures (R50-R57)


async def test_r50_audit_mutator_output_is_never_applied() -> None:
    source = FakeSource({"shadow": set_key("shadow", 1), "next": set_key("next", 1)})
    result = await run(
        source, descriptor("shadow", "mutation", mode="audit", priorityHint=-1), descriptor("next", "mutation")
    )
    assert source.calls[1].payload == PAYLOAD
    assert result.final_payload == {**PAYLOAD, "next": 1}
    assert [(r.interceptor, r.mode) for r in result.results] == [("shadow", "audit"), ("next", None)]


async def test_r52_fail_open_mutator_failure_keeps_current_payload() -> None:
    source = FakeSource({"a": set_key("a", 1), "broken": crash(), "c": set_key("c", 1)})
    result = await run(
        source,
        descriptor("a", "mutation", priorityHint=1),
        descriptor("broken", "mutation", priorityHint=2, failOpen=True),
        descriptor("c", "mutation", priorityHint=3),
    )
    assert result.status == "success"
    assert source.calls[2].payload == {**PAYLOAD, "a": 1}
    assert result.final_payload == {**PAYLOAD, "a": 1, "c": 1}
    assert [(f.interceptor, f.code, f.reason) for f in result.failures] == [
        ("broken", -32603, "RuntimeError: broken crashed")
    ]


@pytest.mark.parametrize("local", [False, True])
@pytest.mark.parametrize("answer", [None, {"valid": True}, True])
async def test_r58_a_source_answering_with_no_result_is_a_failure_routed_by_fail_open(local: bool, answer: Any) -> None:
    """A `Source` returning None, a dict or a bool raised AttributeError out of the chain ('dict' object
    has no attribute 'type'), or (None) was recorded as a failure with code 0 and an empty reason."""

    async def wrong(call: Call) -> Any:
        return answer

    source = FakeSource({"m": wrong, "v": wrong, "open": wrong})
    if local:
        source.local = True  # type: ignore[attr-defined]  # the executor's in-process hot path
    blocked = await run(source, descriptor("m", "mutation"), direction="sending")
    validated = await run(source, descriptor("v"), descriptor("open", failOpen=True), direction="receiving")
    reason = f"the source returned {type(answer).__name__}, not an interceptor result"
    assert (blocked.status, blocked.final_payload) == ("mutation_failed", None)
    assert blocked.aborted_at is not None and blocked.aborted_at.reason == f"invocation failed: {reason}"
    assert [(f.interceptor, f.code, f.reason) for f in blocked.failures] == [("m", -32603, reason)]
    assert validated.status == "validation_failed"  # `v` is fail-closed; `open` fails open
    assert [(f.interceptor, f.code, f.fail_open) for f in validated.failures] == [
        ("v", -32603, False),
        ("open", -32603, True),
    ]


async def test_r55_r56_fail_closed_mutator_aborts_atomically_and_gates_validators() -> None:
    source = FakeSource({"a": set_key("a", 1), "broken": crash(), "v": verdict(True), "watch": verdict(True)})
    result = await run(
        source,
        descriptor("a", "mutation", priorityHint=1),
        descriptor("broken", "mutation", priorityHint=2),
        descriptor("v"),
        descriptor("watch", mode="audit"),
    )
    assert result.status == "mutation_failed"
    assert result.final_payload is None
    assert result.aborted_at is not None
    assert result.aborted_at.model_dump() == {
        "interceptor": "broken",
        "reason": "invocation failed: RuntimeError: broken crashed",
        "type": "mutation",
    }
    assert source.names == ["a", "broken", "watch"]  # no active validator after the abort
    assert source.calls[-1].payload == PAYLOAD  # the observer sees the pass input
    assert "finalPayload" not in result.to_wire()


async def test_r57_receiving_block_gates_active_mutators() -> None:
    source = FakeSource({"v": verdict(False, "error"), "m": set_key("m", 1), "shadow": set_key("s", 1)})
    result = await run(
        source,
        descriptor("v"),
        descriptor("m", "mutation"),
        descriptor("shadow", "mutation", mode="audit"),
        direction="receiving",
    )
    assert source.names == ["v", "shadow"]
    assert result.status == "validation_failed"


async def test_r51_source_errors_keep_their_code_and_reason() -> None:
    async def host_error(call: Call) -> ValidationResult:
        raise InterceptorsError("bad", data={"reason": "config rejected"}, code=-32602)

    source = FakeSource({"v": host_error})
    result = await run(source, descriptor("v"))
    assert result.status == "validation_failed"
    assert [(f.code, f.reason, f.timeout) for f in result.failures] == [(-32602, "config rejected", False)]


async def test_r59_remote_timeout_error_is_classified_as_timeout() -> None:
    async def timed_out(call: Call) -> ValidationResult:
        raise InterceptorTimeoutError(call.name, 10, call.phase, style="g5")

    result = await run(FakeSource({"v": timed_out}), descriptor("v"))
    assert result.aborted_at is not None
    assert (result.aborted_at.reason, result.aborted_at.type) == ("timeout", "validation")
    assert result.failures[0].timeout


async def test_missing_source_is_an_invocation_failure() -> None:
    plan = plan_for([entry(descriptor("v"), "gone")], "tools/call", "request", "sending")
    with anyio.fail_after(5):
        result = await execute_plan(plan, PAYLOAD, {})
    assert result.failures[0].reason == "host 'gone' is not connected"
    assert result.status == "validation_failed"


# --------------------------------------------------------------------------- deadlines (R59, R60)


@pytest.mark.parametrize(("fail_open", "status"), [(False, "validation_failed"), (True, "success")])
async def test_r59_per_invocation_timeout_is_enforced_locally(fail_open: bool, status: str) -> None:
    hang = Hang()
    overrides = {"slow": Overrides(timeout_ms=100, fail_open=fail_open)}
    result = await run(FakeSource({"slow": hang}), descriptor("slow"), overrides=overrides)
    assert result.status == status
    assert hang.cancelled == ["slow"] and hang.finished == []
    assert [(f.interceptor, f.timeout, f.reason) for f in result.failures] == [("slow", True, "timeout")]
    if not fail_open:
        assert result.aborted_at is not None
        assert result.aborted_at.model_dump() == {"interceptor": "slow", "reason": "timeout", "type": "validation"}


async def test_r59_a_handler_that_never_awaits_past_its_timeout_is_a_timeout() -> None:
    async def busy(call: Call) -> ValidationResult:
        done = time.perf_counter() + 0.2
        while time.perf_counter() < done:  # CPU-bound work with no await: nothing can cancel it
            pass
        return ValidationResult(valid=True)

    overrides = {"busy": Overrides(timeout_ms=50)}
    result = await run(FakeSource({"busy": busy}), descriptor("busy"), overrides=overrides)
    assert result.status == "validation_failed"
    assert [(f.interceptor, f.timeout, f.reason) for f in result.failures] == [("busy", True, "timeout")]


async def test_r60_chain_deadline_cancels_in_flight_and_reports_timeout() -> None:
    hang = Hang()
    source = FakeSource({"slow": hang, "quick": verdict(True)})
    result = await run(source, descriptor("slow"), descriptor("quick"), timeout_ms=200)
    assert hang.cancelled == ["slow"] and hang.finished == []
    assert result.status == "timeout"
    assert result.aborted_at is not None
    assert result.aborted_at.model_dump() == {
        "interceptor": "slow",
        "reason": "chain deadline exceeded",
        "type": "timeout",
    }
    assert result.final_payload is None
    assert [r.interceptor for r in result.results] == ["quick"]


async def test_r60_deadline_routes_fail_open_interceptors_g5_unless_switched() -> None:
    hang = Hang()
    source = FakeSource({"slow": hang})
    slow = descriptor("slow", failOpen=True)
    g5 = await run(source, slow, timeout_ms=100)
    assert g5.status == "success"
    assert g5.final_payload == PAYLOAD
    assert [(f.interceptor, f.timeout) for f in g5.failures] == [("slow", True)]
    py = await run(source, slow, timeout_ms=100, deadline_always_blocks=True)
    assert py.status == "timeout"
    assert py.aborted_at is not None and py.aborted_at.type == "timeout"
    assert hang.cancelled == ["slow", "slow"]


async def test_r60_interceptors_not_yet_invoked_at_the_deadline_are_routed_by_policy() -> None:
    hang = Hang()

    async def hang_mutation(call: Call) -> Any:
        return await hang(call)

    source = FakeSource({"first": hang_mutation, "second": set_key("second", 1)})
    result = await run(
        source,
        descriptor("first", "mutation", priorityHint=1, failOpen=True),
        descriptor("second", "mutation", priorityHint=2),
        timeout_ms=100,
    )
    assert source.names == ["first"]  # `second` was never invoked
    assert result.status == "timeout"
    assert result.aborted_at is not None
    assert (result.aborted_at.interceptor, result.aborted_at.type) == ("second", "timeout")
    assert [(f.interceptor, f.timeout) for f in result.failures] == [("first", True), ("second", True)]


class InProcessSource(FakeSource):
    """A `FakeSource` taking the executor's in-process path, as an `InterceptorHost` does."""

    local = True


@pytest.mark.parametrize("source_type", [FakeSource, InProcessSource])
async def test_r60_a_handler_that_never_awaits_past_the_chain_deadline_is_a_deadline_failure(
    source_type: type[FakeSource],
) -> None:
    """The chain's scope cancels only at a checkpoint: CPU-bound work past the deadline used to be accepted,
    and what came after it ran (a 1 ms `interceptor/executeChain` ran 37 ms of in-process guards: `success`)."""

    async def busy(call: Call) -> Any:
        done = time.perf_counter() + 0.2
        while time.perf_counter() < done:  # no await: nothing can cancel it
            pass
        return await set_key("busy", 1)(call)

    source = source_type({"busy": busy, "after": set_key("after", 1), "v": verdict(True)})
    result = await run(
        source,
        descriptor("busy", "mutation", priorityHint=1, failOpen=True),
        descriptor("after", "mutation", priorityHint=2),
        descriptor("v"),
        timeout_ms=50,
    )
    assert source.names == ["busy"]  # nothing starts after the deadline
    assert result.status == "timeout"
    assert result.final_payload is None
    assert result.aborted_at is not None
    assert (result.aborted_at.interceptor, result.aborted_at.type) == ("after", "timeout")
    assert [(f.interceptor, f.timeout) for f in result.failures] == [("busy", True), ("after", True)]


async def test_r60_each_invocation_is_sent_the_remaining_budget() -> None:
    source = FakeSource({"v": verdict(True), "own": verdict(True)})
    await run(source, descriptor("v"), descriptor("own"), overrides={"own": Overrides(timeout_ms=50)}, timeout_ms=2000)
    budget = {c.name: c.timeout_ms for c in source.calls}
    assert budget["own"] == 50
    assert budget["v"] is not None and 0 < budget["v"] <= 2000
    await run(source, descriptor("v"))
    assert source.calls[-1].timeout_ms is None


# --------------------------------------------------------------------------- result and sinks


async def test_r67_chain_result_fields_and_wire() -> None:
    source = FakeSource({"m": set_key("m", 1), "v": verdict(True, "info"), "keep": unchanged()})
    result = await run(source, descriptor("m", "mutation"), descriptor("keep", "mutation"), descriptor("v"))
    assert result.allowed
    assert (result.event, result.phase, result.direction) == ("tools/call", "request", "sending")
    assert result.total_duration_ms > 0
    wire = result.to_wire()
    assert set(wire) == {
        "status",
        "event",
        "phase",
        "results",
        "finalPayload",
        "validationSummary",
        "totalDurationMs",
        "failures",
    }
    assert [r["interceptor"] for r in wire["results"]] == ["keep", "m", "v"]
    assert wire["validationSummary"] == {"errors": 0, "warnings": 0, "infos": 1}


async def test_sinks_run_last_never_block_and_crashes_are_recorded() -> None:
    hang = Hang()

    async def sink_ok(call: Call) -> SinkResult:
        return SinkResult(interceptor=call.name, phase=call.phase, recorded=True)

    source = FakeSource({"v": verdict(True), "s1": sink_ok, "s2": crash(), "s3": hang})
    result = await run(
        source,
        descriptor("s1", "sink"),
        descriptor("s2", "sink"),
        descriptor("s3", "sink"),
        descriptor("v"),
        sinks=True,
        overrides={"s3": Overrides(timeout_ms=100)},
    )
    assert source.names[0] == "v"
    assert result.status == "success"
    assert [(r.interceptor, getattr(r, "recorded", None)) for r in result.results] == [
        ("v", None),
        ("s1", True),
        ("s2", False),
        ("s3", False),
    ]


async def test_r43_the_decision_waits_for_every_started_validator() -> None:
    fast_done, release = anyio.Event(), anyio.Event()
    finished: list[ChainResult] = []

    async def fast(call: Call) -> ValidationResult:
        fast_done.set()
        return ValidationResult(interceptor=call.name, valid=True)

    async def held(call: Call) -> ValidationResult:
        await release.wait()
        return ValidationResult(interceptor=call.name, valid=False, severity="error")

    source = FakeSource({"fast": fast, "held": held})

    async def chain() -> None:
        finished.append(await run(source, descriptor("fast"), descriptor("held")))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(chain)
            await fast_done.wait()
            await anyio.wait_all_tasks_blocked()
            assert finished == []  # one verdict is in, but a started validator is still running
            release.set()
    assert finished[0].status == "validation_failed"
    assert finished[0].aborted_at is not None and finished[0].aborted_at.interceptor == "held"


@pytest.mark.parametrize("kind", ["invalid", "crash"])
async def test_r49_audit_validator_never_blocks_whatever_it_returns(kind: str) -> None:
    handler = verdict(False, "error") if kind == "invalid" else crash()
    result = await run(FakeSource({"watch": handler}), descriptor("watch", mode="audit"))
    assert result.status == "success"
    assert result.final_payload == PAYLOAD
    assert result.aborted_at is None


@pytest.mark.parametrize("fail_open", [False, True])
async def test_r53_audit_failure_proceeds_whatever_fail_open(fail_open: bool) -> None:
    source = FakeSource({"m": crash(), "v": crash()})
    result = await run(
        source, descriptor("m", "mutation", mode="audit", failOpen=fail_open), descriptor("v", mode="audit")
    )
    assert result.status == "success"
    assert [(f.interceptor, f.mode, f.fail_open) for f in result.failures] == [
        ("m", "audit", fail_open),
        ("v", "audit", False),
    ]
