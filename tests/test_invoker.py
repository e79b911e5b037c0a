"""The invoker side over real mcp connections: list/invoke, `Chain`, routing, discovery failures, errors.

In-memory in both eras, plus one real stdio subprocess and one real Streamable HTTP server.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import anyio
import pytest
from fakes import ERAS, MethodRecorder, RawHost, connect, serve_http
from mcp import Client, MCPError, StdioServerParameters
from mcp.server import MCPServer

from mcp_interceptors import (
    AbortedAt,
    Chain,
    ChainParamsError,
    ChainResult,
    DiscoveryError,
    InterceptorHost,
    InterceptorTimeoutError,
    Invocation,
    MalformedResultError,
    MutationResult,
    RequiredInterceptor,
    ValidationMessage,
    ValidationResult,
    WideningOverrideError,
    chain_error,
    discover,
    invoke_interceptor,
    list_interceptors,
)
from mcp_interceptors.host import hooks_for
from mcp_interceptors.invoker import invocation_error
from mcp_interceptors.protocol.descriptors import HookEntry, InterceptorDescriptor
from mcp_interceptors.protocol.errors import InvalidParamsError, is_timeout_error
from mcp_interceptors.signatures import generate_signing_key

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MISBEHAVING_HOST = Path(__file__).resolve().parent / "misbehaving_host.py"
CALL = {"method": "tools/call", "params": {"name": "send", "arguments": {"to": "ana@example.com"}}}
SHELL = {"method": "tools/call", "params": {"name": "shell", "arguments": {"cmd": "rm -rf /"}}}
ALLOWED_METHODS = {"initialize", "notifications/initialized", "server/discover", "interceptors/list"}
ALLOWED_METHODS |= {"interceptor/invoke"}
INVOKE_KEYS = {"name", "event", "phase", "payload", "config", "timeoutMs", "context", "_meta"}


class Hang:
    def __init__(self) -> None:
        self.started = False
        self.cancelled = anyio.Event()
        self.finished = False

    async def __call__(self, inv: Invocation) -> bool:
        self.started = True
        try:
            await anyio.sleep(5)  # deadlines in these tests are 200 ms: 25x shorter
        except anyio.get_cancelled_exc_class():
            self.cancelled.set()
            raise
        self.finished = True
        return True


def guard_host(name: str = "guards", hang: Hang | None = None) -> InterceptorHost:
    host = InterceptorHost(name)

    @host.mutator("redact", events=["tools/call"], phase="both", priority={"request": -100, "response": 100})
    async def redact(inv: Invocation) -> Any:
        text = str(inv.payload)
        return inv.payload if "@" not in text else _scrub(inv.payload)

    @host.validator("no-shell", events=["tools/call"], phase="request")
    async def no_shell(inv: Invocation) -> ValidationResult:
        if inv.payload["params"]["name"] == "shell":
            message = ValidationMessage(message="shell is forbidden", severity="error", path="$.params.name")
            return ValidationResult(valid=False, severity="error", messages=(message,))
        return ValidationResult(valid=True)

    @host.validator("audit-log", events=["*"], phase="both", mode="audit")
    async def audit_log(inv: Invocation) -> bool:
        return False

    if hang is not None:
        host.validator("slow", events=["tools/call"], phase="request")(hang)
    return host


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return "[EMAIL]" if "@" in value else value
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items()}
    return value


@pytest.fixture(params=ERAS)
def era(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def summary(result: ChainResult) -> tuple[Any, ...]:
    """Everything but timings: what must be identical in-process and over any transport."""
    return (
        result.status,
        result.final_payload,
        result.aborted_at,
        [(r.interceptor, r.type, r.mode, r.model_dump(exclude={"duration_ms"})) for r in result.results],
        [(f.interceptor, f.code, f.reason) for f in result.failures],
        result.validation_summary,
    )


# --------------------------------------------------------------------------- list / invoke


async def test_list_and_invoke_in_both_eras(era: str) -> None:
    with anyio.fail_after(5):
        async with connect(guard_host().create_server(), era) as client:
            assert [d.name for d in await list_interceptors(client)] == ["redact", "no-shell", "audit-log"]
            assert [d.name for d in await list_interceptors(client, "prompts/get")] == ["audit-log"]
            result = await invoke_interceptor(client, "redact", "tools/call", "request", CALL)
            assert isinstance(result, MutationResult) and result.modified
            assert result.payload["params"]["arguments"]["to"] == "[EMAIL]"
            verdict = await invoke_interceptor(client, "no-shell", "tools/call", "request", SHELL, timeout_ms=1000)
            assert isinstance(verdict, ValidationResult)
            assert (verdict.interceptor, verdict.phase, verdict.valid, verdict.severity) == (
                "no-shell",
                "request",
                False,
                "error",
            )
            with pytest.raises(MCPError) as caught:
                await invoke_interceptor(client, "no-shell", "tools/call", "response", CALL)
            assert caught.value.code == -32602


@pytest.mark.parametrize("pattern", ["*", "tools/*"])
async def test_r10_the_invoker_never_sends_a_wildcard_list_filter(pattern: str) -> None:
    """`list_interceptors(client, "*")` sent the filter and got only the `*`-hooked interceptors (§2.1:
    an invoker omits `event` to list everything); `tools/*` did not even return `no-shell`."""
    recorder = MethodRecorder()
    server = MCPServer("h", extensions=[guard_host()], middleware=[recorder])
    with anyio.fail_after(5):
        async with connect(server, "legacy") as client:
            with pytest.raises(ChainParamsError) as refused:
                await list_interceptors(client, pattern)
            everything = await list_interceptors(client)
    assert (refused.value.code, refused.value.data) == (-32602, {"field": "event", "event": pattern})
    assert all("event" not in params for params in recorder.params_of("interceptors/list"))  # never sent
    assert [d.name for d in everything] == ["redact", "no-shell", "audit-log"]


async def test_invoke_sends_a_stamped_context_and_never_policy() -> None:
    recorder = MethodRecorder()
    server = MCPServer("h", extensions=[guard_host()], middleware=[recorder])
    with anyio.fail_after(5):
        async with connect(server, "legacy") as client:
            await invoke_interceptor(
                client, "no-shell", "tools/call", "request", CALL, config={"k": 1}, context={"traceId": "t"}
            )
    (params,) = recorder.params_of("interceptor/invoke")
    assert set(params) <= INVOKE_KEYS
    assert params["context"]["traceId"] == "t" and params["context"]["timestamp"].endswith("Z")
    assert params["config"] == {"k": 1}


# --------------------------------------------------------------------------- chains: local == remote


@pytest.mark.parametrize(
    ("phase", "payload"),
    [("request", CALL), ("request", SHELL), ("response", {"content": [{"type": "text", "text": "x@y.z"}]})],
)
async def test_add_local_and_add_server_have_identical_semantics(era: str, phase: Any, payload: Any) -> None:
    local = Chain(role="client")
    local.add_local(guard_host())
    expected = summary(await local.execute("tools/call", phase, payload))
    with anyio.fail_after(5):
        async with connect(guard_host().create_server(), era) as client:
            remote = Chain(role="client")
            await remote.add_server(client, name="guards")
            assert summary(await remote.execute("tools/call", phase, payload)) == expected


async def test_add_local_gives_each_handler_its_own_copy() -> None:
    host = InterceptorHost("h")

    @host.validator("vandal", events=["*"], phase="request")
    async def vandal(inv: Invocation) -> bool:
        inv.payload["params"]["name"] = "vandalised"
        return True

    @host.validator("witness", events=["*"], phase="request")
    async def witness(inv: Invocation) -> bool:
        return bool(inv.payload["params"]["name"] == "send")

    chain = Chain(role="client")
    chain.add_local(host)
    payload = {"method": "tools/call", "params": {"name": "send"}}
    result = await chain.execute("tools/call", "request", payload)
    assert result.allowed
    assert payload == {"method": "tools/call", "params": {"name": "send"}}
    assert result.final_payload == payload


async def test_chain_needs_a_direction_or_a_role() -> None:
    chain = Chain()
    chain.add_local(guard_host())
    with pytest.raises(ValueError, match="cannot tell the direction"):
        await chain.execute("tools/call", "request", CALL)
    result = await chain.execute("tools/call", "request", SHELL, direction="receiving")
    assert result.status == "validation_failed"
    with pytest.raises(ValueError, match="already in this chain"):
        chain.add_local(guard_host())


async def test_name_restriction_selects_only_named_interceptors() -> None:
    chain = Chain(role="client")
    chain.add_local(guard_host())
    result = await chain.execute("tools/call", "request", SHELL, interceptors=["redact"])
    assert result.allowed
    assert [s.name for s in result.plan.steps] == ["redact"]


async def test_r21_restricting_a_chain_to_a_name_it_does_not_have_fails_closed() -> None:
    chain = Chain(role="client")
    chain.add_local(guard_host())
    with pytest.raises(ChainParamsError) as typo:  # `no_shell` for `no-shell` used to run an empty plan: success
        await chain.execute("tools/call", "request", SHELL, interceptors=["no_shell", "redact"])
    with pytest.raises(ChainParamsError) as pattern:  # `*` used to select only `*`-hooked interceptors
        await chain.execute("*", "request", SHELL)
    assert (typo.value.code, typo.value.data) == (-32602, {"field": "interceptors", "unknown": ["no_shell"]})
    assert (pattern.value.code, pattern.value.data) == (-32602, {"field": "event", "event": "*"})
    known_but_not_hooked = await chain.execute("tools/call", "response", {}, interceptors=["no-shell"])
    assert known_but_not_hooked.allowed and known_but_not_hooked.plan.steps == ()


async def test_r21_a_chain_config_naming_an_interceptor_the_chain_does_not_have_fails_closed() -> None:
    """`no_shell` for `no-shell` in `config` was dropped silently: the interceptor ran with no config."""
    seen: list[Any] = []
    host = InterceptorHost("h")

    @host.validator("deny-words", events=["tools/call"], phase="request")
    async def deny_words(inv: Invocation) -> bool:
        seen.append(inv.config)
        return not any(word in str(inv.payload) for word in inv.config.get("words", ()))

    chain = Chain(role="client")
    chain.add_local(host)
    with pytest.raises(ChainParamsError) as typo:
        await chain.execute("tools/call", "request", SHELL, config={"deny_words": {"words": ["rm"]}})
    assert (typo.value.code, typo.value.data) == (-32602, {"field": "config", "unknown": ["deny_words"]})
    assert seen == []  # nothing ran
    blocked = await chain.execute("tools/call", "request", SHELL, config={"deny-words": {"words": ["rm"]}})
    assert blocked.status == "validation_failed" and seen == [{"words": ["rm"]}]
    not_hooked_here = await chain.execute("tools/call", "response", {}, config={"deny-words": {"words": []}})
    assert not_hooked_here.allowed  # a known interceptor the event does not select: its config is simply unused


@pytest.mark.parametrize(
    ("config", "data"),
    [
        (
            {"deny-words": "rm"},
            {
                "field": "config",
                "interceptor": "deny-words",
                "reason": "config for 'deny-words' must be an object, got str",
            },
        ),
        (
            ["deny-words"],
            {"field": "config", "reason": "config must map interceptor names to config objects, got list"},
        ),
    ],
)
async def test_r23_a_chain_config_value_that_is_not_an_object_is_invalid_params_naming_the_interceptor(
    config: Any, data: dict[str, Any]
) -> None:
    """It reached the host as `dict(value)`: a -32603 "dictionary update sequence element #0 ..." crash."""
    seen: list[Any] = []
    host = InterceptorHost("h")

    @host.validator("deny-words", events=["tools/call"], phase="request")
    async def deny_words(inv: Invocation) -> bool:
        seen.append(inv.config)
        return True

    chain = Chain(role="client")
    chain.add_local(host)
    with anyio.fail_after(5), pytest.raises(ChainParamsError) as refused:
        await chain.execute("tools/call", "request", SHELL, config=config)
    assert (refused.value.code, refused.value.data) == (-32602, data)
    assert seen == []


async def test_r40_a_phase_direction_or_role_the_spec_does_not_define_fails_closed() -> None:
    """`phase="both"` or `"Request"` selected no hook and returned `success` with nothing run; a direction
    or role typo (`outbound`, `Client`) silently ran the receiving order."""
    chain = Chain(role="client")
    chain.add_local(guard_host())
    for phase in ("both", "Request"):
        with pytest.raises(ChainParamsError) as bad_phase:
            await chain.execute("tools/call", phase, SHELL)  # type: ignore[arg-type]
        assert (bad_phase.value.code, bad_phase.value.data) == (-32602, {"field": "phase", "phase": phase})
    with pytest.raises(ChainParamsError) as bad_direction:
        await chain.execute("tools/call", "request", SHELL, direction="outbound")  # type: ignore[arg-type]
    assert bad_direction.value.data == {"field": "direction", "direction": "outbound"}
    with pytest.raises(ValueError, match="role must be 'client' or 'server', got 'Client'"):
        Chain(role="Client")  # type: ignore[arg-type]
    assert (await chain.execute("tools/call", "request", SHELL)).status == "validation_failed"


@pytest.mark.parametrize("timeout_ms", [float("nan"), float("inf"), 0, -1, True])
async def test_r60_a_chain_deadline_that_is_not_a_finite_positive_number_fails_closed(timeout_ms: Any) -> None:
    """NaN raised anyio's `deadline must not be NaN`; -1 or 0 ran nothing and reported a chain timeout."""
    chain = Chain(role="client")
    chain.add_local(guard_host())
    with pytest.raises(ChainParamsError) as refused:
        await chain.execute("tools/call", "request", CALL, timeout_ms=timeout_ms)
    assert refused.value.code == -32602 and refused.value.data["field"] == "timeoutMs"
    with pytest.raises(ChainParamsError):
        await Chain(role="client", timeout_ms=timeout_ms).execute("tools/call", "request", CALL)


@pytest.mark.parametrize("timeout_ms", [float("inf"), float("nan"), 0, -5, True])
async def test_r26_an_invoke_timeout_json_cannot_carry_is_refused_before_it_is_sent(timeout_ms: Any) -> None:
    """`inf` went out as `"timeoutMs": null` (the host then ran with no deadline), NaN failed in anyio
    ("deadline must not be NaN"), and 0, -5 or `true` were sent for the host to refuse."""
    recorder = MethodRecorder()
    server = MCPServer("h", extensions=[guard_host()], middleware=[recorder])
    with anyio.fail_after(5):
        async with connect(server, "legacy") as client:
            with pytest.raises(InvalidParamsError) as refused:
                await invoke_interceptor(client, "no-shell", "tools/call", "request", CALL, timeout_ms=timeout_ms)
    assert refused.value.code == -32602
    assert refused.value.data["field"] == "timeoutMs"
    assert refused.value.data["interceptor"] == "no-shell"
    assert (refused.value.data["event"], refused.value.data["phase"]) == ("tools/call", "request")
    assert "finite number of milliseconds > 0" in refused.value.data["reason"]
    assert recorder.params_of("interceptor/invoke") == []


async def test_r42_r43_in_process_validators_that_await_run_concurrently() -> None:
    """Validators that await (a moderation API, a database) ran one after another in-process: two 200 ms
    checks under a 300 ms chain deadline blocked as a timeout. Here the first waits for the second."""
    host = InterceptorHost("io")
    released = anyio.Event()

    @host.validator("a-waits", events=["tools/call"])
    async def waits(inv: Invocation) -> bool:
        await released.wait()
        return True

    @host.validator("b-releases", events=["tools/call"])
    async def releases(inv: Invocation) -> bool:
        released.set()
        return True

    chain = Chain(role="client")
    chain.add_local(host)
    with anyio.fail_after(5):
        result = await chain.execute("tools/call", "request", SHELL, timeout_ms=2000)
    assert (result.status, [r.interceptor for r in result.results]) == ("success", ["a-waits", "b-releases"])
    assert host.concurrent
    cpu_only = InterceptorHost("cpu")
    cpu_only.validator("scan", events=["tools/call"])(releases)
    assert not cpu_only.concurrent  # never suspends: nothing to gain from a task group


async def test_r60_the_chain_deadline_cancels_a_decorated_handler_whose_wrapper_awaits() -> None:
    """A `functools.wraps` wrapper that awaits around a handler that never does: the host read only the
    inner code, called itself unable to suspend, and the executor ran the chain without a cancel scope."""
    host = InterceptorHost("wrapped")

    def throttled(handler: Any) -> Any:
        @functools.wraps(handler)
        async def wrapper(inv: Invocation) -> Any:
            await anyio.sleep(5)  # the deadline below is 50x shorter
            return await handler(inv)

        return wrapper

    @host.validator("slow", events=["tools/call"])
    @throttled
    async def slow(inv: Invocation) -> bool:
        return True

    assert host.concurrent
    chain = Chain(role="client")
    chain.add_local(host)
    with anyio.fail_after(2):
        result = await chain.execute("tools/call", "request", SHELL, timeout_ms=100)
    assert result.status == "timeout"
    assert result.aborted_at is not None
    assert (result.aborted_at.interceptor, result.aborted_at.type) == ("slow", "timeout")


async def test_r36_a_chain_does_not_keep_a_plan_for_every_event_it_is_asked_about() -> None:
    """Plans are cached per event; events may come from untrusted traffic, so the cache stays bounded."""
    chain = Chain(role="client")
    chain.add_local(guard_host())
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for index in range(40):
            await chain.execute(f"acme/{index}" + "x" * 1_000_000, "request", {})
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 5_000_000, f"{kept} bytes kept after 40 one-megabyte event names"
    for index in range(3000):
        chain.plan(f"acme/{index}", "request")
    assert len(chain._plans) <= 1024


# --------------------------------------------------------------------------- R61-R66: policy, routing, discovery


async def test_r61_overrides_passed_to_add_server_take_precedence(era: str) -> None:
    with anyio.fail_after(5):
        async with connect(guard_host().create_server(), era) as client:
            chain = Chain(role="client")
            await chain.add_server(client, overrides={"no-shell": {"mode": "audit"}, "redact": {"priority": 5}})
            result = await chain.execute("tools/call", "request", SHELL)
    assert result.status == "success"
    assert [(r.interceptor, r.mode) for r in result.results if r.type == "validation"] == [
        ("no-shell", "audit"),
        ("audit-log", "audit"),
    ]
    assert result.plan.mutators[0].policy.priority == 5


async def test_r62_widening_override_is_rejected_when_the_server_is_added(era: str) -> None:
    with anyio.fail_after(5):
        async with connect(guard_host().create_server(), era) as client:
            chain = Chain(role="client")
            widening = {"no-shell": {"hooks": [{"events": ["tools/call"], "phase": "response"}]}}
            with pytest.raises(WideningOverrideError) as caught:
                await chain.add_server(client, overrides=widening)
            assert caught.value.data == {"interceptor": "no-shell", "event": "tools/call", "phase": "response"}
            with pytest.raises(ValueError, match="override names 'ghost', which host 'h' does not advertise"):
                await chain.add_server(client, name="h", overrides={"ghost": {"mode": "audit"}})
            assert chain.entries == []


async def test_r63_narrowed_override_excludes_the_interceptor_elsewhere() -> None:
    chain = Chain(role="client")
    narrow = {"audit-log": {"hooks": [{"events": ["prompts/get"], "phase": "request"}]}}
    chain.add_local(guard_host(), overrides=narrow)
    assert "audit-log" not in [s.name for s in chain.plan("tools/call", "request").steps]
    assert [s.name for s in chain.plan("prompts/get", "request").steps] == ["audit-log"]


async def test_r64_compat_uses_the_chain_protocol_version() -> None:
    host = InterceptorHost("h")
    host.validator("modern-only", events=["*"], compat={"minProtocol": "2026-07-28"})(_deny)
    legacy = Chain(role="client", protocol_version="2025-11-25")
    legacy.add_local(host)
    assert (await legacy.execute("tools/call", "request", CALL)).allowed
    assert not (await legacy.execute("tools/call", "request", CALL, protocol_version="2026-07-28")).allowed
    switched = Chain(role="client", protocol_version="2025-11-25", enforce_compat=False)
    switched.add_local(host)
    assert not (await switched.execute("tools/call", "request", CALL)).allowed


async def _deny(inv: Invocation) -> bool:
    return False


def test_r64_switching_compat_or_sinks_on_a_chain_changes_its_next_plan() -> None:
    """The plan cache ignored `enforce_compat` and `sinks_enabled`: set after a first plan, they had no effect."""
    host = InterceptorHost("h")

    @host.mutator("old", events=["tools/call"], compat={"minProtocol": "2024-11-05", "maxProtocol": "2025-06-18"})
    async def old(inv: Invocation) -> None:
        return None

    @host.sink("sink", events=["tools/call"])
    async def sink(inv: Invocation) -> bool:
        return True

    chain = Chain(role="client", protocol_version="2026-07-28")
    chain.add_local(host)
    assert [step.name for step in chain.plan("tools/call", "request").steps] == []
    chain.enforce_compat = False
    assert [step.name for step in chain.plan("tools/call", "request").steps] == ["old"]
    chain.sinks_enabled = True
    assert [step.name for step in chain.plan("tools/call", "request").steps] == ["old", "sink"]
    chain.enforce_compat = True
    assert [step.name for step in chain.plan("tools/call", "request").steps] == ["sink"]


async def test_r65_each_invoke_goes_to_the_host_that_advertised_it(era: str) -> None:
    first, second = MethodRecorder(), MethodRecorder()
    a, b = InterceptorHost("a"), InterceptorHost("b")
    a.validator("same-name", events=["tools/call"])(_allow)
    b.validator("same-name", events=["tools/call"])(_deny)
    b.mutator("only-b", events=["tools/call"])(_tag_b)
    with anyio.fail_after(5):
        async with (
            connect(MCPServer("a", extensions=[a], middleware=[first]), era) as client_a,
            connect(MCPServer("b", extensions=[b], middleware=[second]), era) as client_b,
        ):
            chain = Chain(role="client")
            await chain.add_server(client_a, name="a")
            await chain.add_server(client_b, name="b")
            result = await chain.execute("tools/call", "request", CALL)
    assert [(s.name, s.source) for s in result.plan.steps] == [("only-b", "b"), ("same-name", "a"), ("same-name", "b")]
    assert [p["name"] for p in first.params_of("interceptor/invoke")] == ["same-name"]
    assert [p["name"] for p in second.params_of("interceptor/invoke")] == ["only-b", "same-name"]
    assert [(r.interceptor, r.valid) for r in result.results if isinstance(r, ValidationResult)] == [
        ("same-name", True),
        ("same-name", False),
    ]
    assert result.status == "validation_failed"


async def _allow(inv: Invocation) -> bool:
    return True


async def _tag_b(inv: Invocation) -> Any:
    return {**inv.payload, "b": True}


async def test_r66_discovery_failure_without_pins_raises(era: str) -> None:
    with anyio.fail_after(5):
        async with connect(MCPServer("no-extension"), era) as client:
            chain = Chain(role="client")
            with pytest.raises(DiscoveryError, match="interceptors/list failed on 'up'") as failed:
                await chain.add_server(client, name="up")
    # regression: `data` was `{}`, naming neither the host nor what it answered
    assert failed.value.data == {"host": "up", "reason": "Method not found", "code": -32601}


@pytest.mark.parametrize(
    "listed",
    [
        {"type": "mutation", "hooks": [{"events": ["tools/call"], "phase": "request"}]},
        {"type": "validation", "hooks": [{"events": ["prompts/get"], "phase": "request"}]},
        {"type": "validation", "hooks": [{"events": ["tools/call"], "phase": "response"}]},
        {"type": "validation", "hooks": []},
    ],
)
async def test_r66_a_pinned_interceptor_the_host_lists_differently_fails_closed(
    era: str, listed: dict[str, Any]
) -> None:
    """A host listing a pinned interceptor under its name but as another type, or hooked elsewhere, used to
    unpin it silently: the event it was pinned to guard went through with nothing run."""
    pinned = RequiredInterceptor("deny", "validation", (HookEntry(events=("tools/call",), phase="request"),))
    host = RawHost([{"name": "deny", **listed}, {**GOOD}], {"deny": {"valid": True}, "ok": {"valid": True}})
    with anyio.fail_after(5):
        async with connect(host.server(), era) as client:
            chain = Chain(role="client")
            await chain.add_server(client, name="up", required=[pinned])
            result = await chain.execute("tools/call", "request", CALL)
    assert (result.status, [f.interceptor for f in result.failures]) == ("validation_failed", ["deny"])
    assert [r.interceptor for r in result.results] == ["ok"]
    assert [invocation["name"] for invocation in host.invocations] == ["ok"]  # the re-hooked one never runs


async def test_r66_a_pin_the_listing_covers_is_the_hosts_own_interceptor(era: str) -> None:
    pinned = RequiredInterceptor("ok", "validation", (HookEntry(events=("tools/call",), phase="request"),))
    wildcard = {**GOOD, "name": "star", "hooks": [{"events": ["*"], "phase": "request"}]}
    star_pin = RequiredInterceptor("star", "validation", (HookEntry(events=("tools/call",), phase="request"),))
    host = RawHost([GOOD, wildcard], {"ok": {"valid": True}, "star": {"valid": True}})
    with anyio.fail_after(5):
        async with connect(host.server(), era) as client:
            chain = Chain(role="client")
            await chain.add_server(client, name="up", required=[pinned, star_pin])
            result = await chain.execute("tools/call", "request", CALL)
    assert (result.status, result.failures) == ("success", [])
    assert sorted(r.interceptor for r in result.results) == ["ok", "star"]


@pytest.mark.parametrize("listing", [None, {"deny": {"type": "validation"}}, "deny"])
async def test_r66_a_listing_without_an_interceptors_array_is_a_failed_discovery(era: str, listing: Any) -> None:
    """It used to count as a host with no interceptors: the chain then let every operation through."""
    pinned = RequiredInterceptor("deny", "validation", (HookEntry(events=("tools/call",), phase="request"),))
    with anyio.fail_after(5):
        async with connect(RawHost(listing).server(), era) as client:
            with pytest.raises(DiscoveryError, match="no `interceptors` array"):
                await Chain(role="client").add_server(client, name="up")
            chain = Chain(role="client")
            await chain.add_server(client, name="up", required=[pinned])
            result = await chain.execute("tools/call", "request", CALL)
    assert (result.status, [f.interceptor for f in result.failures]) == ("validation_failed", ["deny"])


@pytest.mark.parametrize(("fail_open", "status"), [(False, "validation_failed"), (True, "success")])
async def test_r66_discovery_failure_fails_pinned_interceptors_by_policy(
    era: str, fail_open: bool, status: str
) -> None:
    pinned = RequiredInterceptor(
        "must-check", "validation", (HookEntry(events=("tools/call",), phase="request"),), fail_open=fail_open
    )
    with anyio.fail_after(5):
        async with connect(MCPServer("no-extension"), era) as client:
            chain = Chain(role="client")
            await chain.add_server(client, name="up", required=[pinned])
            result = await chain.execute("tools/call", "request", CALL)
            assert (await chain.execute("prompts/get", "request", CALL)).allowed  # not guarded by the pin
    assert result.status == status
    assert [(f.interceptor, f.code) for f in result.failures] == [("must-check", -32603)]
    assert result.failures[0].reason.startswith("interceptor host unavailable: ")
    if not fail_open:
        assert result.aborted_at is not None and result.aborted_at.interceptor == "must-check"


async def test_r66_pinned_interceptor_missing_from_the_listing_blocks(era: str) -> None:
    pinned = RequiredInterceptor("absent", "validation", (HookEntry(events=("*",), phase="request"),))
    with anyio.fail_after(5):
        async with connect(guard_host().create_server(), era) as client:
            chain = Chain(role="client")
            await chain.add_server(client, name="guards", required=[pinned])
            result = await chain.execute("tools/call", "request", CALL)
    assert result.status == "validation_failed"
    assert result.aborted_at is not None and result.aborted_at.interceptor == "absent"
    assert "pinned interceptor(s) ['absent'] not advertised by 'guards'" in result.failures[0].reason


# --------------------------------------------------------------------------- bad remote hosts


GOOD = {"name": "ok", "type": "validation", "hooks": [{"events": ["tools/call"], "phase": "request"}]}
OPEN = {**GOOD, "name": "ok-open", "failOpen": True}
BAD_LISTING = [
    {"name": "weird", "type": "observability", "hooks": []},
    GOOD,
    {"name": "no-hooks", "type": "mutation"},
    OPEN,
    "garbage",
]


async def test_malformed_remote_descriptor_is_skipped_with_a_warning(
    era: str, caplog: pytest.LogCaptureFixture
) -> None:
    host = RawHost(BAD_LISTING, {"ok": {"valid": True}, "ok-open": {"valid": True}})
    with anyio.fail_after(5):
        async with connect(host.server(), era) as client:
            found = await discover(client)
            assert [d.name for d in found.descriptors] == ["ok", "ok-open"]
            assert [(w.index, w.name, w.reason) for w in found.warnings] == [
                (0, "weird", "type: Input should be 'validation', 'mutation' or 'sink'"),
                (2, "no-hooks", "hooks: Field required"),
                (4, None, "<root>: Input should be a valid dictionary or instance of InterceptorDescriptor"),
            ]
            with caplog.at_level(logging.WARNING, logger="mcp_interceptors.invoker"):
                chain = Chain(role="client")
                await chain.add_server(client, name="raw")
            assert [r.getMessage() for r in caplog.records] == [
                "skipped interceptor descriptor #0 (weird): type: Input should be 'validation', 'mutation' or 'sink'",
                "skipped interceptor descriptor #2 (no-hooks): hooks: Field required",
                "skipped interceptor descriptor #4 (None): <root>: Input should be a valid dictionary or instance "
                "of InterceptorDescriptor",
            ]
            result = await chain.execute("tools/call", "request", CALL)  # the rest is usable
    assert result.allowed
    assert [r.interceptor for r in result.results] == ["ok", "ok-open"]


async def test_r67_every_result_in_the_aggregate_has_a_duration_even_when_the_host_omits_it(era: str) -> None:
    """G4's invoke examples omit `durationMs`; the aggregate requires it, so the invoker measures it."""
    mutator = {"name": "m", "type": "mutation", "hooks": [{"events": ["tools/call"], "phase": "request"}]}
    host = RawHost([GOOD, mutator], {"ok": {"valid": True}, "m": {"modified": True, "payload": {"x": 1}}})
    with anyio.fail_after(5):
        async with connect(host.server(), era) as client:
            chain = Chain(role="client")
            await chain.add_server(client, name="raw")
            result = await chain.execute("tools/call", "request", CALL)
    assert result.allowed
    body = result.to_wire()
    assert [(item["interceptor"], type(item["durationMs"])) for item in body["results"]] == [
        ("m", float),
        ("ok", float),
    ]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"valid": "yes"}, "invalid validation result at valid: Input should be a valid boolean"),
        ({"interceptor": "someone-else", "valid": True}, "result echoes interceptor='someone-else', expected"),
        ({"type": "mutation", "modified": True, "payload": {}}, "result echoes type='mutation', expected"),
        ({"valid": True, "phase": "response"}, "result echoes phase='response', expected 'request'"),
    ],
)
async def test_r58_malformed_remote_result_is_an_invocation_failure_routed_by_fail_open(
    era: str, body: dict[str, Any], reason: str
) -> None:
    host = RawHost([GOOD, OPEN], {"ok": body, "ok-open": body})
    with anyio.fail_after(5):
        async with connect(host.server(), era) as client:
            closed = Chain(role="client")
            await closed.add_server(client, overrides={"ok-open": {"hooks": []}})
            blocked = await closed.execute("tools/call", "request", CALL)
            opened = Chain(role="client")
            await opened.add_server(client, overrides={"ok": {"hooks": []}})
            passed = await opened.execute("tools/call", "request", CALL)
            with pytest.raises(MalformedResultError):
                await invoke_interceptor(client, "ok", "tools/call", "request", CALL, type="validation")
    assert blocked.status == "validation_failed"
    assert blocked.aborted_at is not None and blocked.aborted_at.interceptor == "ok"
    assert blocked.failures[0].code == -32603 and blocked.failures[0].reason.startswith(reason)
    assert passed.status == "success" and passed.final_payload == CALL and passed.results == []


@pytest.mark.parametrize("signature", ["not-an-object", 7, {"algorithm": "ed25519"}])
async def test_r30_malformed_signature_is_ignored_unless_a_key_is_configured(era: str, signature: Any) -> None:
    """The reserved `signature` is accepted and ignored (never required) without a key; with one, a
    malformed signature fails verification and is routed by failOpen like any invocation failure."""
    body = {"valid": True, "signature": signature}
    host = RawHost([GOOD, OPEN], {"ok": body, "ok-open": body})
    key = generate_signing_key().public_key()
    with anyio.fail_after(5):
        async with connect(host.server(), era) as client:
            verdict = await invoke_interceptor(client, "ok", "tools/call", "request", CALL, type="validation")
            unchecked = Chain(role="client")
            await unchecked.add_server(client)
            allowed = await unchecked.execute("tools/call", "request", CALL)
            checked = Chain(role="client")
            await checked.add_server(client, verify_key=key)
            blocked = await checked.execute("tools/call", "request", CALL)
    assert isinstance(verdict, ValidationResult) and verdict.valid and verdict.signature is None
    assert allowed.status == "success" and allowed.failures == []
    assert [r.interceptor for r in allowed.results] == ["ok", "ok-open"]
    assert blocked.status == "validation_failed"
    assert blocked.aborted_at is not None and blocked.aborted_at.interceptor == "ok"
    assert [(f.interceptor, f.code, f.reason, f.fail_open) for f in blocked.failures] == [
        ("ok", -32603, "signature invalid", False),
        ("ok-open", -32603, "signature invalid", True),
    ]


async def test_r58_remote_mutator_claiming_unmodified_with_a_changed_payload_is_never_applied(era: str) -> None:
    listing = [{"name": "m", "type": "mutation", "failOpen": True, "hooks": [{"events": ["*"], "phase": "request"}]}]
    host = RawHost(listing, {"m": {"modified": False, "payload": {"evil": True}}})
    with anyio.fail_after(5):
        async with connect(host.server(), era) as client:
            chain = Chain(role="client")
            await chain.add_server(client)
            result = await chain.execute("tools/call", "request", CALL)
    assert result.status == "success"
    assert result.final_payload == CALL
    assert [(f.interceptor, f.reason) for f in result.failures] == [
        ("m", "modified is false but the payload differs from the input")
    ]


# --------------------------------------------------------------------------- deadlines over the wire


async def test_r60_remote_invokes_carry_the_remaining_budget_and_the_host_stops_work(era: str) -> None:
    hang = Hang()
    recorder = MethodRecorder()
    server = MCPServer("h", extensions=[guard_host(hang=hang)], middleware=[recorder])
    with anyio.fail_after(5):
        async with connect(server, era) as client:
            chain = Chain(role="client")
            await chain.add_server(client)
            result = await chain.execute("tools/call", "request", CALL, timeout_ms=200)
            # The host cancels its handler once the budget it was sent runs out; on a loaded machine the
            # invoker's cancellation can also reach the host before the handler starts, so none runs.
            with anyio.move_on_after(2):
                await hang.cancelled.wait()
    assert hang.cancelled.is_set() or not hang.started
    assert not hang.finished
    assert result.status == "timeout"
    assert result.aborted_at is not None
    assert (result.aborted_at.interceptor, result.aborted_at.type) == ("slow", "timeout")
    budgets = [p.get("timeoutMs") for p in recorder.params_of("interceptor/invoke")]
    assert budgets and all(b is not None and 0 < b <= 200 for b in budgets)


async def test_r59_host_timeout_error_is_an_invocation_failure(era: str) -> None:
    hang = Hang()
    with anyio.fail_after(5):
        async with connect(guard_host(hang=hang).create_server(), era) as client:
            chain = Chain(role="client")
            await chain.add_server(client, overrides={"slow": {"timeoutMs": 100, "failOpen": True}})
            result = await chain.execute("tools/call", "request", CALL)
    assert result.status == "success"
    assert [(f.interceptor, f.timeout) for f in result.failures] == [("slow", True)]


# --------------------------------------------------------------------------- R69, R70


async def test_r69_the_sdk_never_sends_execute_chain_or_a_plan(era: str) -> None:
    recorder = MethodRecorder()
    server = MCPServer("h", extensions=[guard_host()], middleware=[recorder])
    with anyio.fail_after(5):
        async with connect(server, era) as client:
            chain = Chain(role="client")
            await chain.add_server(client)
            for payload in (CALL, SHELL):
                await chain.execute("tools/call", "request", payload, timeout_ms=2000, context={"traceId": "t"})
            await chain.execute("tools/call", "response", {"content": []})
    assert set(recorder.methods) <= ALLOWED_METHODS
    assert "interceptor/executeChain" not in recorder.methods
    for params in recorder.params_of("interceptor/invoke"):
        assert set(params) <= INVOKE_KEYS  # one interceptor per call: no name list, no mode or failOpen


async def test_r70_chain_error_is_redacted_by_default() -> None:
    chain = Chain(role="client")
    chain.add_local(guard_host())
    blocked = await chain.execute("tools/call", "request", SHELL)
    error = chain_error(blocked)
    assert (error.code, error.message) == (-32602, "Blocked by interceptor validation")
    assert error.data == {
        "interceptor": "no-shell",
        "reason": "validation failed",
        "event": "tools/call",
        "phase": "request",
        "status": "validation_failed",
    }
    assert "shell is forbidden" not in str(error.data) and "rm -rf" not in str(error.data)
    detailed = chain_error(blocked, include_details=True)
    assert detailed.data["validationErrors"] == [
        {"interceptor": "no-shell", "severity": "error", "message": "shell is forbidden"}
    ]
    assert detailed.data["abortedAt"]["interceptor"] == "no-shell"
    with pytest.raises(ValueError, match="needs a blocked result"):
        chain_error(await chain.execute("tools/call", "request", CALL))


async def test_r70_chain_error_codes_for_failures_mutations_and_timeouts() -> None:
    host = InterceptorHost("h")
    host.validator("broken", events=["acme/v"])(_crash)
    host.mutator("broken-m", events=["acme/m"])(_crash)
    host.validator("slow", events=["acme/t"])(Hang())
    chain = Chain(role="client")
    chain.add_local(host)
    failed = chain_error(await chain.execute("acme/v", "request", {}))
    assert (failed.code, failed.data["reason"], failed.data["status"]) == (
        -32602,
        "interceptor failed",
        "validation_failed",
    )
    mutation = chain_error(await chain.execute("acme/m", "request", {}))
    assert (mutation.code, mutation.message, mutation.data["reason"]) == (
        -32603,
        "Blocked: interceptor mutation failed",
        "interceptor failed",
    )
    timeout = chain_error(await chain.execute("acme/t", "request", {}, timeout_ms=100))
    assert (timeout.code, timeout.data["reason"], timeout.data["status"]) == (-32603, "timeout", "timeout")
    assert "ValueError" not in str(failed.data) and "ValueError" not in str(mutation.data)


async def _crash(inv: Invocation) -> Any:
    raise ValueError("secret internal detail")


# --------------------------------------------------------------------------- real transports


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_real_stdio_subprocess_host(mode: str) -> None:
    params = StdioServerParameters(command=sys.executable, args=[str(EXAMPLES / "validator_server.py")])
    with anyio.fail_after(30):
        async with Client(params, mode=mode) as client:  # type: ignore[arg-type]
            names = [d.name for d in await list_interceptors(client)]
            chain = Chain(role="client")
            await chain.add_server(client, name="validators")
            blocked = await chain.execute("tools/call", "request", SHELL)
            allowed = await chain.execute("tools/call", "request", CALL)
    assert names == ["deny-dangerous-tools", "max-size"]
    assert blocked.status == "validation_failed"
    assert blocked.aborted_at is not None and blocked.aborted_at.interceptor == "deny-dangerous-tools"
    assert allowed.allowed and allowed.final_payload == CALL


def _nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"x": value}
    return value


@pytest.mark.parametrize("field", ["payload", "config"])
async def test_r23_a_payload_too_deep_for_a_stdio_host_is_refused_before_it_is_sent(field: str) -> None:
    # mcp's stdio transport cannot parse a line nested this deep, so the host would never answer
    deep = {**SHELL, "params": {"name": "shell", "arguments": _nested(250)}}
    payload, config = (deep, None) if field == "payload" else (SHELL, _nested(250))
    params = StdioServerParameters(command=sys.executable, args=[str(EXAMPLES / "validator_server.py")])
    with anyio.fail_after(20):
        async with Client(params, mode="legacy") as client:
            with pytest.raises(InvalidParamsError) as refused:
                await invoke_interceptor(
                    client, "deny-dangerous-tools", "tools/call", "request", payload, config=config
                )
            chain = Chain(role="client")
            await chain.add_server(client, name="validators")
            blocked = await chain.execute("tools/call", "request", _nested(250))
    assert refused.value.code == -32602
    assert refused.value.data["field"] == field
    assert refused.value.data["interceptor"] == "deny-dangerous-tools"
    assert refused.value.data["event"] == "tools/call"
    assert not blocked.allowed and blocked.aborted_at is not None
    assert blocked.aborted_at.interceptor == "deny-dangerous-tools"
    assert blocked.status != "timeout" and "nested more than 200 levels" in blocked.aborted_at.reason


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_real_streamable_http_host(mode: str) -> None:
    hang = Hang()
    app = guard_host(hang=hang).create_server().streamable_http_app()
    with anyio.fail_after(30):
        async with serve_http(app) as url, Client(url, mode=mode) as client:  # type: ignore[arg-type]
            expected_era = "2025-11-25" if mode == "legacy" else "2026-07-28"
            assert client.protocol_version == expected_era
            chain = Chain(role="client")
            await chain.add_server(client, name="http")
            allowed = await chain.execute("tools/call", "request", CALL, interceptors=["redact", "no-shell"])
            timed_out = await chain.execute("tools/call", "request", CALL, timeout_ms=200)
            await hang.cancelled.wait()
    assert allowed.final_payload == _scrub(CALL)
    assert timed_out.status == "timeout"


async def test_r61_ill_typed_overrides_are_rejected_when_the_host_is_added() -> None:
    chain = Chain(role="client")
    with pytest.raises(ValueError, match="override mode must be 'active' or 'audit'"):
        chain.add_local(guard_host(), overrides={"no-shell": {"mode": "Active"}})
    assert chain.entries == []


# --------------------------------------------------------------------------- misbehaving hosts over real stdio


def misbehaving_host(listing: str = "ok", **client_kwargs: Any) -> Client:
    """A client for `misbehaving_host.py` in a subprocess; `listing` picks its `interceptors/list` answer."""
    params = StdioServerParameters(command=sys.executable, args=[str(MISBEHAVING_HOST)], env={"LISTING": listing})
    return Client(params, mode="legacy", **client_kwargs)


async def test_r60_a_host_crashing_mid_invoke_is_a_connection_failure_not_a_chain_timeout() -> None:
    with anyio.fail_after(30):
        async with misbehaving_host() as client:
            chain = Chain(role="client")
            await chain.add_server(client, name="bad")
            crashed = await chain.execute("tools/call", "request", CALL, interceptors=["crash"], timeout_ms=5000)
            afterwards = await chain.execute("tools/call", "request", CALL, interceptors=["ok"], timeout_ms=5000)
    # mcp reports the closed connection as -32000, G4's timeout code: it used to read as `status: timeout`.
    for result, name in ((crashed, "crash"), (afterwards, "ok")):
        assert result.status == "validation_failed"
        reason = "invocation failed: interceptor host connection closed"
        assert result.aborted_at == AbortedAt(interceptor=name, reason=reason, type="validation")
        failures = [(f.interceptor, f.code, f.reason, f.timeout) for f in result.failures]
        assert failures == [(name, -32603, "interceptor host connection closed", False)]
    assert chain_error(crashed).data["reason"] == "interceptor failed"


async def test_r59_the_hosts_timeout_error_and_mcps_local_request_timeout_are_timeouts() -> None:
    with anyio.fail_after(30):
        async with misbehaving_host(read_timeout_seconds=1.0) as client:
            chain = Chain(role="client")
            await chain.add_server(client, name="bad", overrides={"host-timeout": {"failOpen": True}})
            host = await chain.execute("tools/call", "request", CALL, interceptors=["host-timeout"])
            local = await chain.execute("tools/call", "request", CALL, interceptors=["silent"])
    assert host.status == "success"
    assert [(f.code, f.reason, f.timeout) for f in host.failures] == [(-32000, "Interceptor execution timeout", True)]
    assert local.status == "validation_failed"  # mcp's own -32001 used to be an ordinary failure
    assert [(f.code, f.reason, f.timeout) for f in local.failures] == [(-32000, "timeout", True)]
    assert local.aborted_at is not None and local.aborted_at.reason == "timeout"


HOST_TIMEOUT_DATA = {"interceptor": "v", "timeoutMs": 5, "phase": "request"}


@pytest.mark.parametrize(
    ("error", "code", "timeout"),
    [
        (MCPError(-32000, "Connection closed"), -32603, False),  # raised by mcp itself: no data
        (MCPError(-32000, "SSE stream ended without a response"), -32603, False),
        (MCPError(-32000, "Interceptor execution timeout", HOST_TIMEOUT_DATA), -32000, True),  # G4 host timeout
        (MCPError(-32603, "Interceptor execution timeout", {**HOST_TIMEOUT_DATA, "reason": "timeout"}), -32603, True),
        (MCPError(-32001, "Request 'interceptor/invoke' timed out"), -32000, True),  # mcp's request timeout
        (MCPError(-32001, "a host's own -32001", {"why": "host"}), -32001, False),
        (MCPError(-32603, "Interceptor execution failed", {"interceptor": "v", "reason": "boom"}), -32603, False),
    ],
)
def test_r59_errors_mcp_raises_locally_are_told_from_the_hosts_error_responses(
    error: MCPError, code: int, timeout: bool
) -> None:
    failure = invocation_error(error, "v")
    assert (failure.code, is_timeout_error(failure.code, failure.data)) == (code, timeout)
    if error.data is None:
        assert failure.data["interceptor"] == "v"
    else:
        assert failure.data == error.data  # the host's own data is kept


@pytest.mark.parametrize("name", ["array-result", "null-result", "string-result", "silent"])
async def test_r58_an_invoke_result_that_is_not_an_object_fails_instead_of_hanging(name: str) -> None:
    with anyio.fail_after(30):  # mcp's client drops such a response: the invoke used to wait forever
        async with misbehaving_host() as client:
            chain = Chain(role="client")
            await chain.add_server(client, name="bad", default_timeout_ms=300)
            result = await chain.execute("tools/call", "request", CALL, interceptors=[name])
            with pytest.raises(InterceptorTimeoutError) as direct:
                await invoke_interceptor(client, name, "tools/call", "request", CALL, default_timeout_ms=300)
    assert result.status == "validation_failed"
    assert result.aborted_at is not None and (result.aborted_at.interceptor, result.aborted_at.reason) == (
        name,
        "timeout",
    )
    assert [(f.interceptor, f.code, f.timeout) for f in result.failures] == [(name, -32000, True)]
    assert direct.value.data == {"interceptor": name, "reason": "timeout", "timeoutMs": 300, "phase": "request"}


@pytest.mark.parametrize("listing", ["array", "silent"])
async def test_r66_a_listing_that_never_arrives_fails_discovery_and_pinned_interceptors_closed(listing: str) -> None:
    pinned = RequiredInterceptor("must-check", "validation", (HookEntry(events=("tools/call",), phase="request"),))
    with anyio.fail_after(30):  # an array result is dropped by mcp's client: add_server used to wait forever
        async with misbehaving_host(listing) as client:
            with pytest.raises(DiscoveryError, match="no usable answer within 300 ms"):
                await Chain(role="client").add_server(client, name="bad", discovery_timeout_ms=300)
            chain = Chain(role="client")
            await chain.add_server(client, name="bad", required=[pinned], discovery_timeout_ms=300)
            result = await chain.execute("tools/call", "request", CALL)
    assert result.status == "validation_failed"
    assert result.aborted_at is not None and result.aborted_at.interceptor == "must-check"
    assert result.failures[0].reason.startswith(
        "interceptor host unavailable: interceptors/list got no usable answer within 300 ms"
    )


def _versioned_host(*names: str) -> InterceptorHost:
    host = InterceptorHost("versioned")
    for name in names:
        host.validator(name, events=["tools/call"], phase="request")(lambda inv: inv.payload["params"]["name"] != "bad")
    return host


async def test_r66_replace_discovered_swaps_a_hosts_listing_between_calls_and_pins_it_drops_fail_closed() -> None:
    """A host that comes back as a new version: `replace_discovered` plans its new list (overrides applied
    to it) from the next call on, while a call already running keeps its plan; a pinned interceptor the new
    list drops fails closed. A widening override leaves the previous list in place."""
    pin = RequiredInterceptor("v1", "validation", (HookEntry(events=("tools/call",), phase="request"),))
    chain = Chain(role="client")
    old, new = _versioned_host("v1", "keep"), _versioned_host("keep", "v2")
    overrides = {"v2": {"mode": "audit"}, "keep": {"fail_open": True}}
    with anyio.fail_after(5):
        await chain.add_discovered(
            old, lambda: _listed(old), name="h", overrides=overrides, required=[pin], strict_overrides=False
        )
        running = chain.plan("tools/call", "request")
        chain.replace_discovered(
            new, new.descriptors, name="h", overrides=overrides, required=[pin], strict_overrides=False
        )
        planned = chain.plan("tools/call", "request")
        result = await chain.execute("tools/call", "request", CALL)
        with pytest.raises(WideningOverrideError):
            narrower = {"keep": {"hooks": [{"events": ["tools/list"], "phase": "request"}]}}
            chain.replace_discovered(new, new.descriptors, name="h", overrides=narrower)
    assert sorted(step.name for step in running.validators) == ["keep", "v1"]
    assert sorted((e.name, e.source, e.effective().mode) for e in chain.entries) == [
        ("keep", "h", "active"),
        ("v1", "h#missing", "active"),
        ("v2", "h", "audit"),
    ]
    assert sorted(step.name for step in planned.validators) == ["keep", "v1", "v2"]
    assert result.status == "validation_failed"
    assert result.aborted_at is not None and result.aborted_at.interceptor == "v1"
    assert "pinned interceptor(s) ['v1'] not advertised by 'h'" in result.failures[0].reason


async def _listed(host: InterceptorHost) -> list[Any]:
    return list(host.descriptors)


# --------------------------------------------------------------------------- chains of handlers that never suspend


def _busy(seconds: float) -> None:
    done = time.perf_counter() + seconds
    while time.perf_counter() < done:  # no await: nothing can cancel it
        pass


#: name -> (type, options, what the handler returns for the payload it sees, or raises)
Behaviour = dict[str, tuple[str, dict[str, Any], Any]]


def _with_key(key: str) -> Any:
    def answer(payload: Any) -> Any:
        return {**payload, "params": {**payload["params"], key: True}}

    return answer


def _raise(payload: Any) -> Any:
    raise RuntimeError("boom")


STILL_SCENARIOS: dict[str, Behaviour] = {
    "all pass, two mutations": {
        "m1": ("mutation", {"priority": 1}, _with_key("m1")),
        "m2": ("mutation", {"priority": 2}, lambda payload: None),
        "m3": ("mutation", {"priority": 3}, _with_key("m3")),
        "v1": ("validation", {}, lambda payload: True),
        "v2": ("validation", {}, lambda payload: ValidationResult(valid=False, severity="warn")),
        "v3": ("validation", {"mode": "audit"}, lambda payload: False),
    },
    "a validator blocks after a mutation": {
        "m1": ("mutation", {"priority": 1}, _with_key("m1")),
        "v1": ("validation", {}, lambda payload: True),
        "v2": ("validation", {}, lambda payload: (False, "no")),
        "v3": ("validation", {}, lambda payload: bool(payload["params"].get("m1"))),
        "v4": ("validation", {"mode": "audit"}, lambda payload: False),
    },
    "a mutator crashes fail-closed, audit observers still run": {
        "m1": ("mutation", {"priority": 1}, _with_key("m1")),
        "m2": ("mutation", {"priority": 2}, _raise),
        "m3": ("mutation", {"priority": 3, "mode": "audit"}, _with_key("m3")),
        "v1": ("validation", {}, lambda payload: True),
        "v2": ("validation", {"mode": "audit"}, lambda payload: True),
    },
    "fail-open crashes, an audit mutator, a malformed and a non-JSON mutation": {
        "m1": ("mutation", {"priority": 1, "failOpen": True}, _raise),
        "m2": ("mutation", {"priority": 2, "mode": "audit"}, _with_key("m2")),
        "m3": ("mutation", {"priority": 3, "failOpen": True}, lambda _: MutationResult(modified=False, payload={})),
        "m4": ("mutation", {"priority": 4, "failOpen": True}, lambda payload: {**payload, "x": {1, 2}}),
        "m5": ("mutation", {"priority": 5}, _with_key("m5")),
        "v1": ("validation", {"failOpen": True}, _raise),
        "v2": ("validation", {}, lambda payload: True),
    },
    "an audit mutator first": {
        "m1": ("mutation", {"priority": 1, "mode": "audit"}, _with_key("m1")),
        "m2": ("mutation", {"priority": 2}, _with_key("m2")),
        "v1": ("validation", {}, lambda payload: "m1" not in payload["params"]),
    },
    "a validator answers a mutation result": {
        "v1": ("validation", {}, lambda payload: True),
        "v2": ("validation", {}, lambda payload: MutationResult(modified=False, payload=payload)),
        "v3": ("validation", {}, lambda payload: True),
    },
}


def _scenario_host(behaviour: Behaviour, seen: list[str], *, awaits: bool) -> InterceptorHost:
    """The scenario's interceptors, whose handlers await (the general path) or never do (a still plan)."""
    host = InterceptorHost("awaits" if awaits else "still")
    for name, (kind, options, answer) in behaviour.items():
        register = host.mutator if kind == "mutation" else host.validator
        mode = options.get("mode", "active")
        fail_open = options.get("failOpen", False)

        def handler(answer: Any = answer, name: str = name) -> Any:
            if awaits:

                async def awaiting(inv: Invocation) -> Any:
                    await anyio.lowlevel.checkpoint()
                    seen.append(name)
                    return answer(inv.payload)

                return awaiting

            async def still(inv: Invocation) -> Any:
                seen.append(name)
                return answer(inv.payload)

            return still

        register(name, events=["tools/call"], mode=mode, fail_open=fail_open, priority=options.get("priority"))(
            handler()
        )
    return host


@pytest.mark.parametrize("scenario", STILL_SCENARIOS)
async def test_a_chain_of_handlers_that_never_suspend_decides_as_the_general_path_does(scenario: str) -> None:
    """Such a chain runs in one loop that hands over to `ChainRun` at the first outcome needing the spec's
    tables (a failure, a block, an audit mutator, a malformed result): everything but timings must be
    what the same interceptors give when they await."""
    outcomes = []
    for awaits in (True, False):
        seen: list[str] = []
        chain = Chain(role="client")
        chain.add_local(_scenario_host(STILL_SCENARIOS[scenario], seen, awaits=awaits))
        with anyio.fail_after(5):
            result = await chain.execute("tools/call", "request", CALL, timeout_ms=5000)
        outcomes.append((summary(result), [f.to_wire() for f in result.failures], seen))
        still = chain.plan("tools/call", "request").prepared[1]
        assert (still is None) == awaits  # the still host's chain took the one-loop path
    assert outcomes[0] == outcomes[1]


async def test_r60_a_late_handler_that_never_awaits_in_a_still_chain_is_a_deadline_failure() -> None:
    """No cancel scope runs such a chain: the clock read after each invocation decides the deadline, and
    nothing starts past it."""
    seen: list[str] = []
    host = InterceptorHost("cpu")

    @host.mutator("busy", events=["tools/call"], priority=1, fail_open=True)
    async def busy(inv: Invocation) -> Any:
        seen.append("busy")
        _busy(0.2)
        return None

    @host.mutator("after", events=["tools/call"], priority=2)
    async def after(inv: Invocation) -> Any:
        seen.append("after")
        return None

    @host.validator("v", events=["tools/call"])
    async def v(inv: Invocation) -> bool:
        seen.append("v")
        return True

    chain = Chain(role="client")
    chain.add_local(host)
    with anyio.fail_after(5):
        result = await chain.execute("tools/call", "request", CALL, timeout_ms=50)
    assert chain.plan("tools/call", "request").prepared[1] is not None
    assert seen == ["busy"]
    assert (result.status, result.final_payload) == ("timeout", None)
    assert result.aborted_at is not None
    assert (result.aborted_at.interceptor, result.aborted_at.type) == ("after", "timeout")
    assert [(f.interceptor, f.timeout) for f in result.failures] == [("busy", True), ("after", True)]


async def test_run_plan_runs_the_plan_it_is_given_and_checks_params_as_execute_does() -> None:
    """A gateway plans a leg to learn whether it is governed, then runs that plan: the plan's point is the
    one run (not one planned again), and the config and deadline are refused as `execute` refuses them."""
    host = InterceptorHost("h")

    @host.validator("deny-send", events=["tools/call"], phase="both")
    async def deny_send(inv: Invocation) -> bool:
        return inv.phase != "response"

    chain = Chain(role="client")
    chain.add_local(host)
    plan = chain.plan("tools/call", "response", direction="receiving")
    with anyio.fail_after(5):
        ran = await chain.run_plan(plan, {"content": []}, timeout_ms=1000)
        executed = await chain.execute("tools/call", "response", {"content": []}, direction="receiving")
        with pytest.raises(ChainParamsError) as bad_deadline:
            await chain.run_plan(plan, {"content": []}, timeout_ms=0)
        with pytest.raises(ChainParamsError) as typo:
            await chain.run_plan(plan, {"content": []}, config={"deny_send": {}})
    assert ran.plan is plan
    assert (ran.status, ran.phase, ran.direction) == (executed.status, "response", "receiving")
    assert ran.status == "validation_failed"
    assert bad_deadline.value.data["field"] == "timeoutMs"
    assert typo.value.data["field"] == "config"


async def test_a_mutators_output_in_a_still_chain_is_isolated_from_the_interceptors_after_it() -> None:
    """A validator that changes what it is shown must corrupt neither the committed payload nor the
    mutator's recorded result, nor what the validators beside it see, nor the caller's payload."""
    host = InterceptorHost("h")

    @host.mutator("tag", events=["tools/call"])
    async def tag(inv: Invocation) -> Any:
        return {**inv.payload, "params": {**inv.payload["params"], "tagged": True}}

    @host.validator("vandal", events=["tools/call"])
    async def vandal(inv: Invocation) -> bool:
        inv.payload["params"]["tagged"] = "vandalised"
        inv.payload["params"].pop("name")
        return True

    @host.validator("witness", events=["tools/call"])
    async def witness(inv: Invocation) -> bool:
        return bool(inv.payload["params"].get("tagged") is True and "name" in inv.payload["params"])

    chain = Chain(role="client")
    chain.add_local(host)
    payload = {"method": "tools/call", "params": {"name": "send"}}
    result = await chain.execute("tools/call", "request", payload)
    assert chain.plan("tools/call", "request").prepared[1] is not None
    assert result.allowed
    tagged = {"method": "tools/call", "params": {"name": "send", "tagged": True}}
    assert result.final_payload == tagged
    assert isinstance(result.results[0], MutationResult)
    assert result.results[0].payload == tagged
    assert payload == {"method": "tools/call", "params": {"name": "send"}}


async def test_r22_a_chain_told_of_hooks_its_host_lacks_still_gets_the_hosts_hook_error() -> None:
    """A still chain prepares each step's runner once: a step whose host does not hook its event gets
    none, and `invoke` answers it with -32602 as before (a guard: the old code passes it too)."""
    host = InterceptorHost("h")

    @host.validator("narrow", events=["tools/list"])
    async def narrow(inv: Invocation) -> bool:
        return True

    claimed = InterceptorDescriptor(name="narrow", type="validation", hooks=hooks_for(["tools/call"], "request"))
    chain = Chain(role="client")
    chain.add_source(host, [claimed], name="h")
    result = await chain.execute("tools/call", "request", CALL)
    assert chain.plan("tools/call", "request").prepared[1] is None
    assert result.status == "validation_failed"
    assert [(f.interceptor, f.code) for f in result.failures] == [("narrow", -32602)]
