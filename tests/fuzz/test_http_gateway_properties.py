"""The gateway as a whole over Streamable HTTP, as a hypothesis state machine: a real HTTP gateway (the CLI with
`--http` on a loopback port, the fuzz upstream and interceptor server as subprocesses, `secrets`, a signed
audit trail with receipts) gets, in both eras, interleaved valid calls carrying credentials from a corpus,
malformed bodies and headers, calls with params of the wrong type, cancellations (`notifications/cancelled`
in a handshake-era session), clients that drop their connection mid-call, concurrent calls, upstream
crashes, hangs and broken answers, and failing verdicts.

After every step: the gateway answers a ping in both eras, no request has been answered twice (on its POST
or anywhere else: a GET stream held open on the session catches answers sent there), every call answered
with a result has the records its receipt names in the store, and no credential of the corpus is in the
upstream's log. After each run every call begun is closed in the trail; at the end the gateway stops with
no traceback and `audit verify` passes with no open call.
"""

from __future__ import annotations

import json
import socket
import struct
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import gateway_fuzz_targets as targets
import httpx2
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from test_gateway_fuzz import header_names, header_values, http_bodies

pytestmark = pytest.mark.e2e

HANDSHAKE = "2025-11-25"
ACCEPT = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
#: How long a run's dropped and cancelled calls may take to be closed in the trail (a `hang` waits out the
#: upstream's 1 s timeout), with room for a loaded machine.
SETTLE_S = 30.0
eras = st.sampled_from(["modern", "session"])
BAD_ANSWERS = ["garbage", '{"jsonrpc": "2.0", "id": $ID, "result": 5}', '{"id": $ID}', "[]"]
texts = st.sampled_from(targets.SECRET_CORPUS).map(lambda secret: f"key {secret} here") | st.text(max_size=30)


def messages_in(reply: httpx2.Response) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a reply's body: a JSON object, or the `data:` of each SSE event."""
    if reply.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in reply.text.splitlines() if line.startswith("data:")]
        return [json.loads(item) for item in data if item]
    if reply.headers.get("content-type", "").startswith("application/json") and reply.content:
        return [reply.json()]
    return []


class HttpHarness:
    """The gateway, its handshake-era session (with a GET stream held open on it) and every answer seen."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.store = folder / "audit.db"
        self.gw = targets.HttpGateway(folder, audit=True, upstream_timeout_ms=1000, receipts=True)
        self.http = httpx2.Client(timeout=targets.ANSWER_TIMEOUT_S)
        self.answers: Counter[Any] = Counter()
        self.stray: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.session = self.open_session()
        self.listening = threading.Event()
        threading.Thread(target=self.listen, daemon=True).start()
        assert self.listening.wait(targets.ANSWER_TIMEOUT_S), "the session's GET stream did not open"

    def headers(self, era: str, method: str, name: str | None = None) -> dict[str, str]:
        if era == "modern":
            named = {"mcp-name": name} if name is not None else {}
            return {**ACCEPT, "mcp-protocol-version": targets.MODERN, "mcp-method": method, **named}
        return {**ACCEPT, "mcp-protocol-version": HANDSHAKE, "mcp-session-id": self.session}

    def body(self, era: str, request_id: Any, method: str, params: Any) -> dict[str, Any]:
        if era == "modern" and isinstance(params, dict):
            params = {**params, "_meta": targets.META}
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        return body if request_id is None else {**body, "id": request_id}

    def open_session(self) -> str:
        client = {"name": "property-client", "version": "1"}
        params = {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": client}
        reply = self.http.post(self.gw.url, json=self.body("session", "init", "initialize", params), headers=ACCEPT)
        assert reply.status_code == 200, (reply.status_code, reply.text[:300])
        self.session = reply.headers["mcp-session-id"]
        initialized = self.body("session", None, "notifications/initialized", {})
        assert self.http.post(self.gw.url, json=initialized, headers=self.headers("session", "")).status_code == 202
        assert "result" in self.request("session", "tools/list", {})
        return self.session

    def listen(self) -> None:
        """Hold the session's GET stream: the gateway may send its own requests there, never an answer."""
        headers = {"accept": "text/event-stream", "mcp-protocol-version": HANDSHAKE, "mcp-session-id": self.session}
        with httpx2.Client(timeout=None) as client, client.stream("GET", self.gw.url, headers=headers) as stream:
            if stream.status_code != 200:
                return  # no stream: `listening` stays unset and the harness fails to start
            self.listening.set()
            try:
                for line in stream.iter_lines():
                    if line.startswith("data:") and line[5:].strip():
                        self.heard(json.loads(line[5:]))
            except httpx2.HTTPError:
                return  # the gateway stopped

    def heard(self, message: Any) -> None:
        if isinstance(message, dict) and "method" not in message:
            with self.lock:
                self.stray.append(message)
                self.answers[json.dumps(message.get("id"))] += 1

    def post(self, era: str, request_id: Any, method: str, params: Any, name: str | None = None) -> httpx2.Response:
        body = self.body(era, request_id, method, params)
        reply = self.http.post(self.gw.url, json=body, headers=self.headers(era, method, name))
        assert reply.status_code < 500, (reply.status_code, reply.text[:300], self.gw.stderr_tail())
        with self.lock:
            for message in messages_in(reply):
                if isinstance(message, dict) and "method" not in message:
                    self.answers[json.dumps(message.get("id"))] += 1
        return reply

    def request(self, era: str, method: str, params: Any, name: str | None = None) -> dict[str, Any]:
        """Send a request and return its one answer (a 4xx's JSON-RPC error counts as one)."""
        request_id = targets.next_id("h")
        reply = self.post(era, request_id, method, params, name)
        answers = [m for m in messages_in(reply) if isinstance(m, dict) and m.get("id") == request_id]
        assert len(answers) == 1, (method, params, reply.status_code, reply.text[:500])
        assert targets.is_answer(answers[0]), answers[0]
        return answers[0]

    def call(self, era: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return self.request(era, "tools/call", {"name": tool, "arguments": arguments}, tool)

    def ping(self) -> None:
        self.gw.ping()
        assert self.request("session", "ping", {}).get("result") == {}
        assert self.gw.popen.poll() is None, self.gw.stderr_tail()

    def answered_twice(self) -> list[str]:
        with self.lock:
            return [key for key, count in self.answers.items() if key != "null" and count > 1]

    def drop(self, era: str, tool: str, arguments: dict[str, Any], where: str, reset: bool) -> None:
        """A client that sends a call and lets go: inside its body, once it is sent, or once the answer's
        headers came; with a close or a reset."""
        request_id = targets.next_id("drop")
        payload = json.dumps(self.body(era, request_id, "tools/call", {"name": tool, "arguments": arguments}))
        lines = ["POST /mcp HTTP/1.1", f"host: 127.0.0.1:{self.gw.port}", f"content-length: {len(payload)}"]
        lines += [f"{key}: {value}" for key, value in self.headers(era, "tools/call", tool).items()]
        request = ("\r\n".join(lines) + "\r\n\r\n" + payload).encode()
        with socket.create_connection(("127.0.0.1", self.gw.port), timeout=targets.ANSWER_TIMEOUT_S) as sock:
            sock.sendall(request[: len(request) - len(payload) // 2] if where == "request-body" else request)
            if where == "answer-headers":
                got = b""
                while b"\r\n\r\n" not in got and (chunk := sock.recv(4096)):
                    got += chunk
            if reset:  # an RST rather than a FIN: what a killed client or a dropped network leaves
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def recovered(self, era: str) -> None:
        """After a crash the upstream is back: an echo in `era` gets its result."""
        targets.assert_recovers(lambda: self.call(era, "echo", {"text": "back"}))

    def close(self) -> None:
        self.http.close()
        self.gw.close()


class HttpGatewayMachine(RuleBasedStateMachine):
    """One gateway serves every run (it takes seconds to start); the checks hold across runs."""

    harness: ClassVar[HttpHarness | None] = None

    def __init__(self) -> None:
        super().__init__()
        assert self.harness is not None
        self.h = self.harness

    def settled(self, answer: dict[str, Any]) -> None:
        targets.assert_settled(self.h.store, answer)

    @rule(era=eras, text=texts)
    def valid_call(self, era: str, text: str) -> None:
        answer = self.h.call(era, "echo", {"text": text})
        assert "result" in answer, answer
        for secret in targets.SECRET_CORPUS:
            assert secret not in json.dumps(answer)
        self.settled(answer)

    @rule(era=eras, body=http_bodies, headers=st.dictionaries(header_names, header_values, max_size=3))
    def malformed_request(self, era: str, body: bytes, headers: dict[str, str]) -> None:
        status = self.h.gw.send("POST", "/mcp", {**self.h.headers(era, "tools/call", "echo"), **headers}, body)
        assert status < 500, (status, headers, body[:200])

    @rule(era=eras, params=st.sampled_from(["x", [1], 7, None, {"name": 5}, {"name": "echo", "arguments": "x"}]))
    def call_with_bad_params(self, era: str, params: Any) -> None:
        answer = self.h.request(era, "tools/call", params, "echo")
        assert "error" in answer, (params, answer)

    @rule(text=texts, after_s=st.sampled_from([0.0, 0.05, 0.3]))
    def cancelled_call(self, text: str, after_s: float) -> None:
        """A handshake-era `hang` cancelled by `notifications/cancelled` gets one error answer (cancelled, or
        timed out when the cancellation came first and named no call yet)."""
        request_id = targets.next_id("cancel")
        answered: list[httpx2.Response | BaseException] = []
        params = {"name": "hang", "arguments": {"text": text}}

        def call() -> None:
            try:
                answered.append(self.h.post("session", request_id, "tools/call", params))
            except BaseException as exc:  # raised again in the test's thread below
                answered.append(exc)

        caller = threading.Thread(target=call)
        caller.start()
        time.sleep(after_s)  # where the cancellation lands in the call: before it is read, in the chain, upstream
        cancel = self.h.post("session", None, "notifications/cancelled", {"requestId": request_id})
        assert cancel.status_code == 202, (cancel.status_code, cancel.text[:300])
        caller.join(SETTLE_S)
        assert answered, "a cancelled call's POST never ended"
        if isinstance(answered[0], BaseException):
            raise answered[0]
        answers = [m for m in messages_in(answered[0]) if m.get("id") == request_id]
        assert len(answers) == 1 and "error" in answers[0], answered[0].text[:500]

    @rule(
        era=eras,
        tool=st.sampled_from(["hang", "progress", "echo"]),
        text=texts,
        where=st.sampled_from(["request-body", "request-sent", "answer-headers"]),
        reset=st.booleans(),
    )
    def client_disconnects(self, era: str, tool: str, text: str, where: str, reset: bool) -> None:
        self.h.drop(era, tool, {"text": text, "count": 3, "pause_ms": 100}, where, reset)

    @rule(
        calls=st.lists(
            st.tuples(eras, st.sampled_from(["echo", "hang", "crash", "answer"]), texts), min_size=2, max_size=4
        )
    )
    def concurrent_calls(self, calls: list[tuple[str, str, str]]) -> None:
        """Calls at once, faults among them: each gets one answer; an echo its result, unless a crash in the
        same batch took the upstream down under it."""
        answers: list[tuple[str, str, dict[str, Any]]] = []

        def one(era: str, tool: str, text: str) -> None:
            arguments = {"text": text, "line": "garbage"}
            answers.append((era, tool, self.h.call(era, tool, arguments)))

        threads = [threading.Thread(target=one, args=call) for call in calls]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(SETTLE_S)
        assert len(answers) == len(calls), f"calls not answered within {SETTLE_S:.0f} s: {calls}"
        crashed = {era for era, tool, _ in calls if tool == "crash"}
        for era, tool, answer in answers:
            if tool == "echo" and era not in crashed:
                assert "result" in answer, (calls, answer)
            elif "error" in answer and tool != "answer":
                assert answer["error"]["code"] in targets.FAULT_CODES, (calls, answer)
            self.settled(answer)
        for era in crashed:
            self.h.recovered(era)

    @rule(era=eras)
    def upstream_crashes(self, era: str) -> None:
        answer = self.h.call(era, "crash", {})
        assert answer.get("error", {}).get("code") == -32000, answer
        self.h.recovered(era)

    @rule(era=eras)
    def upstream_hangs(self, era: str) -> None:
        answer = self.h.call(era, "hang", {})
        assert answer.get("error", {}).get("code") == -32001, answer

    @rule(era=eras, line=st.sampled_from(BAD_ANSWERS))
    def upstream_answers_badly(self, era: str, line: str) -> None:
        self.settled(self.h.call(era, "answer", {"line": line}))

    @rule(era=eras, verdict=st.sampled_from([{"valid": False}, {"valid": "no"}, [], {"valid": True}]))
    def interceptor_verdict(self, era: str, verdict: Any) -> None:
        answer = self.h.call(era, "echo", {"text": "v", "verdict": targets.verdict_line(verdict)})
        assert ("result" in answer) == (verdict == {"valid": True}), (verdict, answer)
        self.settled(answer)

    @invariant()
    def serves_and_keeps_its_promises(self) -> None:
        self.h.ping()
        assert not self.h.answered_twice(), self.h.answered_twice()
        assert not self.h.stray, f"answers on the session's GET stream: {self.h.stray[:3]}"
        targets.assert_no_secret_reached(self.h.folder)

    def teardown(self) -> None:
        targets.assert_calls_close(self.h.store, SETTLE_S)


@pytest.fixture(scope="module")
def http_harness() -> Iterator[HttpHarness]:
    with tempfile.TemporaryDirectory() as folder:
        harness = HttpHarness(Path(folder))
        HttpGatewayMachine.harness = harness
        try:
            yield harness
        finally:
            HttpGatewayMachine.harness = None
            harness.close()


def test_the_http_gateway_keeps_serving_and_its_promises_under_interleaved_faults(http_harness: HttpHarness) -> None:
    bounded = settings(max_examples=4, stateful_step_count=10, deadline=None, suppress_health_check=list(HealthCheck))
    run_state_machine_as_test(HttpGatewayMachine, settings=bounded)
    http_harness.close()
    stderr = (http_harness.folder / "http.stderr").read_text(errors="replace")
    assert "Traceback" not in stderr, stderr[-3000:]
    code, report = targets.audit_verify(http_harness.store)
    assert code == 0, report
    assert "open calls" not in report, report
