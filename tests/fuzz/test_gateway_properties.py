"""The gateway as a whole, as a hypothesis state machine: a real stdio gateway (the CLI, with the fuzz upstream,
the fuzz interceptor server, `secrets` and a signed audit trail with receipts) gets interleaved valid and
malformed requests, cancellations, upstream crashes, hangs and broken answers. After every step it answers a
ping, no request is answered twice, every call that got a result has its records in the store (its receipt
names them), and no credential of the corpus reached the upstream's log. After each run every call begun is
closed in the trail; at the end the gateway stops with no traceback and `audit verify` passes with no open
call. The same machine over Streamable HTTP, with disconnects, is `test_http_gateway_properties.py`."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import gateway_fuzz_targets as targets
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from test_gateway_fuzz import lines

pytestmark = pytest.mark.e2e
texts = st.sampled_from(targets.SECRET_CORPUS).map(lambda secret: f"key {secret} here") | st.text(max_size=30)


class GatewayMachine(RuleBasedStateMachine):
    """One gateway serves every run (it takes seconds to start); the checks hold across runs."""

    gateway: ClassVar[targets.StdioGateway | None] = None

    def __init__(self) -> None:
        super().__init__()
        assert self.gateway is not None
        self.gw = self.gateway

    def check_settled(self, answer: dict[str, Any]) -> None:
        targets.assert_settled(self.gw.folder / "audit.db", answer)

    @rule(text=texts)
    def valid_call(self, text: str) -> None:
        answer = self.gw.call("echo", {"text": text})
        assert "result" in answer, answer
        for secret in targets.SECRET_CORPUS:
            assert secret not in json.dumps(answer)
        self.check_settled(answer)

    @rule(fuzzed=lines)
    def malformed_lines(self, fuzzed: list[bytes]) -> None:
        self.gw.send_bytes(b"".join(line.replace(b"\n", b" ") + b"\n" for line in fuzzed))

    @rule(params=st.sampled_from(["x", [1], 7, None, {"name": 5}, {"name": "echo", "arguments": "x"}]))
    def call_with_bad_params(self, params: Any) -> None:
        request_id = targets.next_id("bad")
        self.gw.send_bytes(
            json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}).encode() + b"\n"
        )

    @rule(text=texts)
    def cancelled_call(self, text: str) -> None:
        request_id = targets.next_id("cancel")
        params = {"name": "hang", "arguments": {"text": text}}
        call = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}
        self.gw.send_bytes(json.dumps(call).encode() + b"\n" + json.dumps(cancel).encode() + b"\n")

    @rule()
    def upstream_crashes(self) -> None:
        answer = self.gw.call("crash", {})
        assert "error" in answer or answer.get("result", {}).get("isError"), answer
        targets.assert_recovers(lambda: self.gw.call("echo", {"text": "back"}))

    @rule()
    def upstream_hangs(self) -> None:
        answer = self.gw.call("hang", {})
        assert "error" in answer or answer.get("result", {}).get("isError"), answer

    @rule(line=st.sampled_from(["garbage", '{"jsonrpc": "2.0", "id": $ID, "result": 5}', '{"id": $ID}', "[]"]))
    def upstream_answers_badly(self, line: str) -> None:
        answer = self.gw.call("answer", {"line": line})
        assert targets.is_answer(answer), answer
        self.check_settled(answer)

    @rule(verdict=st.sampled_from([{"valid": False}, {"valid": "no"}, [], {"valid": True}]))
    def interceptor_verdict(self, verdict: Any) -> None:
        answer = self.gw.call("echo", {"text": "v", "verdict": targets.verdict_line(verdict)})
        forwarded = "result" in answer
        assert forwarded == (verdict == {"valid": True}), (verdict, answer)
        self.check_settled(answer)

    @invariant()
    def serves_and_keeps_its_promises(self) -> None:
        self.gw.assert_serving()
        assert not self.gw.answered_twice(), self.gw.answered_twice()
        targets.assert_no_secret_reached(self.gw.folder)

    def teardown(self) -> None:
        targets.assert_calls_close(self.gw.folder / "audit.db")


@pytest.fixture(scope="module")
def machine_gateway() -> Iterator[targets.StdioGateway]:
    with tempfile.TemporaryDirectory() as folder:
        gateway = targets.StdioGateway(Path(folder), upstream_timeout_ms=1000, receipts=True)
        GatewayMachine.gateway = gateway
        try:
            yield gateway
        finally:
            GatewayMachine.gateway = None
            gateway.close()


def test_the_gateway_keeps_serving_and_its_promises_under_interleaved_faults(
    machine_gateway: targets.StdioGateway,
) -> None:
    bounded = settings(max_examples=4, stateful_step_count=12, suppress_health_check=list(HealthCheck))
    run_state_machine_as_test(GatewayMachine, settings=bounded)
    assert machine_gateway.alive
    machine_gateway.close()
    assert machine_gateway.popen.returncode == 0, machine_gateway.stderr_tail()
    assert "Traceback" not in machine_gateway.stderr_tail(10_000), machine_gateway.stderr_tail()
    code, report = targets.audit_verify(machine_gateway.folder / "audit.db")
    assert code == 0, report
    assert "open calls" not in report, report
