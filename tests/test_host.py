"""`InterceptorHost` served by a real `MCPServer`, reached in-memory in both protocol eras (spec §2, §4)."""

from __future__ import annotations

import threading
import time
import tracemalloc
from types import SimpleNamespace
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from fakes import ERAS, connect, raw_call
from mcp import MCPError
from mcp.client import advertise
from mcp.server import MCPServer

from mcp_interceptors import (
    EXTENSION_ID,
    Chain,
    InterceptorHost,
    Invocation,
    MutationResult,
    PhasePriority,
    ValidationMessage,
    ValidationResult,
    guards,
)
from mcp_interceptors.executor import Call
from mcp_interceptors.protocol.errors import InterceptorsError, InvalidParamsError, is_timeout_error
from mcp_interceptors.protocol.invoke import RawParams

pytestmark = pytest.mark.anyio

TOOL_CALL = {"method": "tools/call", "params": {"name": "t", "arguments": {"text": "hi"}}}
CONFIG_SCHEMA = {
    "type": "object",
    "properties": {"limit": {"type": "integer"}},
    "required": ["limit"],
    "additionalProperties": False,
}


class Spy:
    """What the handlers of `build_host` observed."""

    def __init__(self) -> None:
        self.invocations: list[Invocation] = []
        self.threads: list[int] = []
        self.cancelled = anyio.Event()
        self.finished = False


def build_host(spy: Spy, **options: Any) -> InterceptorHost:
    host = InterceptorHost("test-host", **options)

    @host.validator("deny", events=["tools/call"], phase="request", config_schema=CONFIG_SCHEMA)
    async def deny(inv: Invocation) -> ValidationResult:
        spy.invocations.append(inv)
        too_long = len(str(inv.payload)) > inv.config["limit"]
        if too_long:
            message = ValidationMessage(message="payload too long", severity="error", path="$")
            return ValidationResult(valid=False, severity="error", messages=(message,))
        return ValidationResult(valid=True)

    @host.mutator("tag", events=["*"], phase="both", priority={"request": -10, "response": 10})
    async def tag(inv: Invocation) -> Any:
        spy.invocations.append(inv)
        if inv.payload is None or inv.payload.get("keep"):
            return None  # unchanged
        inv.payload["tagged"] = inv.phase  # handlers get their own copy
        return inv.payload

    @host.validator("prompts-only", events=["prompts/get"], phase="response", mode="audit", fail_open=True)
    def prompts_only(inv: Invocation) -> tuple[bool, list[str]]:
        spy.threads.append(threading.get_ident())
        return False, ["prompt looks odd"]

    @host.validator("crash", events=["tools/call"], phase="request")
    async def crash(inv: Invocation) -> bool:
        raise ValueError("nope")

    @host.validator("hang", events=["tools/call"], phase="request")
    async def hang(inv: Invocation) -> bool:
        try:
            await anyio.sleep(5)  # the tests' deadline is 100 ms: 50x shorter
        except anyio.get_cancelled_exc_class():
            spy.cancelled.set()
            raise
        spy.finished = True
        return True

    @host.validator("raises-timeout", events=["tools/call"], phase="request")
    async def raises_timeout(inv: Invocation) -> bool:
        raise TimeoutError("upstream lookup timed out")

    @host.validator("garbage", events=["tools/call"], phase="request")
    async def garbage(inv: Invocation) -> Any:
        return "garbage"

    @host.mutator("garbage-object", events=["tools/call"], phase="request")
    async def garbage_object(inv: Invocation) -> Any:
        return {"x": object()}

    @host.mutator("wrong-type", events=["tools/call"], phase="request")
    async def wrong_type(inv: Invocation) -> Any:
        return ValidationResult(valid=True)

    @host.mutator("lies", events=["tools/call"], phase="request")
    async def lies(inv: Invocation) -> Any:
        return MutationResult(modified=False, payload={"changed": True})

    @host.validator("empty", hooks=[])
    async def empty(inv: Invocation) -> bool:
        return True

    return host


@pytest.fixture(params=ERAS)
def era(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def invoke(era: str, body: dict[str, Any], host: InterceptorHost | None = None) -> dict[str, Any]:
    server = (host or build_host(Spy())).create_server()
    with anyio.fail_after(5):
        async with connect(server, era) as client:
            return await raw_call(client, "interceptor/invoke", body)


async def invoke_error(era: str, body: dict[str, Any], host: InterceptorHost | None = None) -> MCPError:
    server = (host or build_host(Spy())).create_server()
    with anyio.fail_after(5):
        async with connect(server, era) as client:
            with pytest.raises(MCPError) as caught:
                await raw_call(client, "interceptor/invoke", body)
    return caught.value


def call(name: str, payload: Any = TOOL_CALL, event: str = "tools/call", phase: str = "request", **kw: Any) -> Any:
    return {"name": name, "event": event, "phase": phase, "payload": payload, **kw}


def without_duration(result: dict[str, Any]) -> dict[str, Any]:
    """The result body without the measured duration and the modern era's envelope keys."""
    assert isinstance(result.pop("durationMs"), float)
    result.pop("_meta", None)
    result.pop("resultType", None)
    return result


# --------------------------------------------------------------------------- R1, R6, R69: methods


async def test_r1_host_serves_exactly_the_two_method_names(era: str) -> None:
    server = build_host(Spy()).create_server()
    with anyio.fail_after(5):
        async with connect(server, era) as client:
            assert "interceptors" in await raw_call(client, "interceptors/list", {})
            result = await raw_call(client, "interceptor/invoke", call("tag", {"keep": True}))
            assert result["interceptor"] == "tag"
            for wrong in ("interceptor/list", "interceptors/invoke"):
                with pytest.raises(MCPError) as caught:
                    await raw_call(client, wrong, {})
                assert caught.value.code == -32601


async def test_r6_server_without_the_extension_answers_method_not_found(era: str) -> None:
    plain = MCPServer("plain")

    @plain.tool()
    async def echo(text: str) -> str:
        return text

    with anyio.fail_after(5):
        async with connect(plain, era) as client:
            for method, params in (("interceptors/list", {}), ("interceptor/invoke", call("x"))):
                with pytest.raises(MCPError) as caught:
                    await raw_call(client, method, params)
                assert caught.value.code == -32601


async def test_r69_execute_chain_sent_to_a_host_is_method_not_found(era: str) -> None:
    body = {"event": "tools/call", "phase": "request", "payload": TOOL_CALL}
    server = build_host(Spy()).create_server()
    with anyio.fail_after(5):
        async with connect(server, era) as client:
            with pytest.raises(MCPError) as caught:
                await raw_call(client, "interceptor/executeChain", body)
    assert (caught.value.code, caught.value.data) == (-32601, "interceptor/executeChain")


# --------------------------------------------------------------------------- R2-R5: capability


def settings_of(capabilities: Any, where: str) -> Any:
    return (getattr(capabilities, where) or {}).get(EXTENSION_ID)


async def test_r2_capability_is_advertised_in_both_eras_by_create_server() -> None:
    host = build_host(Spy())
    expected = {"supportedEvents": ["*", "prompts/get", "tools/call"]}
    with anyio.fail_after(5):
        async with connect(host.create_server(), "legacy") as legacy:
            assert settings_of(legacy.server_capabilities, "experimental") == expected
        for era in ("auto", "2026-07-28-jsonrpc"):  # the modern era learns capabilities from server/discover
            async with connect(host.create_server(), era) as modern:
                assert modern.protocol_version == "2026-07-28"
                assert settings_of(modern.server_capabilities, "extensions") == expected


async def test_r2_extension_alone_cannot_reach_legacy_initialize_middleware_can() -> None:
    host = build_host(Spy())
    with anyio.fail_after(5):
        async with connect(MCPServer("bare", extensions=[host]), "legacy") as bare:
            # mcp strips `extensions` from a 2025-11-25 initialize result and an Extension has no
            # hook on `initialize`: without our middleware a legacy client sees nothing.
            assert bare.server_capabilities.extensions is None
            assert settings_of(bare.server_capabilities, "experimental") is None
        wired = MCPServer("wired", extensions=[host], middleware=[host.capability_middleware])
        async with connect(wired, "legacy") as legacy:
            assert settings_of(legacy.server_capabilities, "experimental") == host.settings()
        async with connect(MCPServer("bare", extensions=[host]), "auto") as modern:
            assert settings_of(modern.server_capabilities, "extensions") == host.settings()


async def test_r3_settings_are_an_object_with_a_string_array() -> None:
    assert InterceptorHost().settings() == {"supportedEvents": []}
    settings = build_host(Spy()).settings()
    assert list(settings) == ["supportedEvents"]
    assert all(isinstance(event, str) for event in settings["supportedEvents"])
    assert "*" in settings["supportedEvents"]


async def test_r4_supported_events_agree_with_the_list(era: str) -> None:
    host = build_host(Spy())
    with anyio.fail_after(5):
        async with connect(host.create_server(), era) as client:
            listed = (await raw_call(client, "interceptors/list"))["interceptors"]
    events = sorted({e for d in listed for h in d["hooks"] for e in h["events"]})
    assert host.settings()["supportedEvents"] == events


async def test_r4_both_eras_advertise_interceptors_registered_after_create_server() -> None:
    """mcp stores an extension's settings when the server is built: the 2026-07-28 advertisement
    used to miss interceptors registered afterwards, which `interceptors/list` (and legacy) showed."""
    host = InterceptorHost("late")
    host.validator("early", events=["tools/call"])(returning(True))
    server = host.create_server()
    host.validator("late", events=["prompts/get"])(returning(True))
    expected = {"supportedEvents": ["prompts/get", "tools/call"]}
    with anyio.fail_after(5):
        async with connect(server, "legacy") as legacy:
            assert settings_of(legacy.server_capabilities, "experimental") == expected
        for era in ("auto", "2026-07-28-jsonrpc"):
            async with connect(server, era) as modern:
                assert settings_of(modern.server_capabilities, "extensions") == expected


async def test_r5_behaviour_does_not_depend_on_client_declaring_the_extension(era: str) -> None:
    host = build_host(Spy())
    outputs = []
    for extensions in ([], [advertise(EXTENSION_ID, {})]):
        with anyio.fail_after(5):
            async with connect(host.create_server(), era, extensions=extensions) as client:
                listing = await raw_call(client, "interceptors/list", {"event": "tools/call"})
                result = without_duration(await raw_call(client, "interceptor/invoke", call("tag")))
                try:
                    await raw_call(client, "interceptor/invoke", call("nope"))
                except MCPError as exc:
                    error = (exc.code, exc.data)
        outputs.append((listing, result, error))
    assert outputs[0] == outputs[1]


# --------------------------------------------------------------------------- R7-R16: interceptors/list


async def test_r7_list_without_params_returns_all_in_registration_order(era: str) -> None:
    host = build_host(Spy())
    expected = [
        "deny",
        "tag",
        "prompts-only",
        "crash",
        "hang",
        "raises-timeout",
        "garbage",
        "garbage-object",
        "wrong-type",
        "lies",
        "empty",
    ]
    with anyio.fail_after(5):
        async with connect(host.create_server(), era) as client:
            for params in (None, {}):
                listed = (await raw_call(client, "interceptors/list", params))["interceptors"]
                assert [d["name"] for d in listed] == expected
    assert [d.name for d in host.descriptors] == expected


@pytest.mark.parametrize(
    ("event", "names"),
    [
        ("prompts/get", ["tag", "prompts-only"]),
        ("tools/list", ["tag"]),
        ("acme/custom", ["tag"]),
        (
            "tools/call",
            ["deny", "tag", "crash", "hang", "raises-timeout", "garbage", "garbage-object", "wrong-type", "lies"],
        ),
    ],
)
async def test_r8_r9_event_filter_matches_literal_and_star_in_any_phase(event: str, names: list[str]) -> None:
    host = build_host(Spy())
    with anyio.fail_after(5):
        async with connect(host.create_server(), "legacy") as client:
            listed = (await raw_call(client, "interceptors/list", {"event": event}))["interceptors"]
    assert [d["name"] for d in listed] == names
    assert all(any(event in h["events"] or "*" in h["events"] for h in d["hooks"]) for d in listed)


async def test_r10_wildcard_filter_strict_switch(era: str) -> None:
    with anyio.fail_after(5):
        async with connect(build_host(Spy()).create_server(), era) as lenient:
            listed = (await raw_call(lenient, "interceptors/list", {"event": "*"}))["interceptors"]
            assert [d["name"] for d in listed] == ["tag"]  # [PY] default: those hooked to a literal `*`
            with pytest.raises(MCPError) as caught:
                await raw_call(lenient, "interceptors/list", {"event": 5})
            assert (caught.value.code, caught.value.data) == (-32602, {"field": "event"})
        async with connect(build_host(Spy(), strict_list_filter=True).create_server(), era) as strict:
            for pattern in ("*", "tools/*"):
                with pytest.raises(MCPError) as caught:
                    await raw_call(strict, "interceptors/list", {"event": pattern})
                assert caught.value.code == -32602
                assert caught.value.data == {"field": "event", "event": pattern}
            assert len((await raw_call(strict, "interceptors/list", {"event": "tools/call"}))["interceptors"]) == 9


def test_r11_duplicate_names_are_rejected_at_registration() -> None:
    host = InterceptorHost("h")

    @host.validator("same", events=["tools/call"])
    async def first(inv: Invocation) -> bool:
        return True

    with pytest.raises(ValueError, match="interceptor 'same' is already registered on host 'h'"):

        @host.mutator("same", events=["tools/call"])
        async def second(inv: Invocation) -> None:
            return None


async def test_r12_r13_r14_r15_r16_descriptors_on_the_wire(era: str) -> None:
    with anyio.fail_after(5):
        async with connect(build_host(Spy()).create_server(), era) as client:
            listed = {d["name"]: d for d in (await raw_call(client, "interceptors/list"))["interceptors"]}
    assert listed["tag"] == {
        "name": "tag",
        "type": "mutation",
        "hooks": [{"events": ["*"], "phase": "request"}, {"events": ["*"], "phase": "response"}],  # R14
        "priorityHint": {"request": -10, "response": 10},  # R15
    }
    assert listed["prompts-only"] == {
        "name": "prompts-only",
        "type": "validation",
        "hooks": [{"events": ["prompts/get"], "phase": "response"}],
        "mode": "audit",
        "failOpen": True,
    }
    assert listed["deny"]["configSchema"] == CONFIG_SCHEMA
    assert listed["empty"] == {"name": "empty", "type": "validation", "hooks": []}  # R16
    for d in listed.values():  # R12, R13
        assert d["type"] in ("validation", "mutation")
        assert all(h["phase"] in ("request", "response") for h in d["hooks"])
        assert "hook" not in d and d.get("mode") != "active" and d.get("failOpen") is not False


def test_r15_priority_outside_int32_is_rejected_at_registration() -> None:
    host = InterceptorHost()
    with pytest.raises(ValueError, match="interceptor 'big': invalid priorityHint"):
        host.mutator("big", events=["*"], priority=2**31)
    with pytest.raises(ValueError, match="phase must be 'request', 'response' or 'both'"):
        host.validator("p", events=["*"], phase="sideways")
    with pytest.raises(ValueError, match="pass exactly one of events"):
        host.validator("p")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"events": [5]}, r"interceptor 'bad': invalid events.0: Input should be a valid string"),
        ({"hooks": [5]}, r"interceptor 'bad': hooks must be HookEntry objects or mappings"),
        ({"events": ["*"], "compat": 1}, r"interceptor 'bad': hooks must be .*, compat a Compat or a mapping"),
        ({"events": ["*"], "config_schema": 3}, r"interceptor 'bad': invalid configSchema"),
    ],
)
def test_r12_options_of_the_wrong_shape_are_refused_naming_the_interceptor(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        InterceptorHost().validator("bad", **options)


def test_r15_per_phase_priority_with_an_unknown_key_is_refused_at_registration() -> None:
    # regression: `{"req": -100}` was accepted and advertised as `priorityHint: {}`, i.e. priority 0
    host = InterceptorHost()
    with pytest.raises(ValueError, match=r"interceptor 'm': priority keys must be 'request' and/or 'response'"):
        host.mutator("m", events=["*"], priority={"req": -100, "response": 5})
    host.mutator("ok", events=["*"], priority={"response": 5})(_unchanged)
    assert host.list()[0].priority_hint == PhasePriority(response=5)


async def _unchanged(inv: Invocation) -> None:
    return None


async def _agen(inv: Invocation) -> Any:
    yield True


def _gen(inv: Invocation) -> Any:
    yield True


async def _no_args() -> bool:
    return True


def _two_args(inv: Invocation, extra: int) -> bool:
    return True


@pytest.mark.parametrize(
    ("handler", "message"),
    [
        (42, r"interceptor 'bad': the handler must be callable, got int"),
        (_agen, r"interceptor 'bad': the handler is a generator function"),
        (_gen, r"interceptor 'bad': the handler is a generator function"),
        (_no_args, r"interceptor 'bad': the handler must accept one positional argument \(the Invocation\)"),
        (_two_args, r"interceptor 'bad': the handler must accept one positional argument .* is \(inv: .*, extra: "),
    ],
)
def test_r12_a_handler_that_cannot_produce_a_result_is_refused_at_registration(handler: Any, message: str) -> None:
    # regression: these registered fine, were advertised, and then failed (closed) on every invocation
    host = InterceptorHost()
    with pytest.raises(TypeError, match=message):
        host.validator("bad", events=["tools/call"])(handler)
    assert host.list() == []


def test_r12_an_invalid_nested_config_schema_is_refused_naming_the_interceptor_and_path() -> None:
    # regression: jsonschema's own SchemaError (a multi-page message naming no interceptor) escaped
    host = InterceptorHost()
    schema = {"type": "object", "properties": {"limit": {"type": "count"}}}
    with pytest.raises(ValueError, match=r"interceptor 'bad': invalid configSchema at properties/limit/type: 'count'"):
        host.validator("bad", events=["tools/call"], config_schema=schema)(_unchanged)
    assert host.list() == []


@pytest.mark.parametrize(
    ("events", "named"),
    [
        (["initialize"], "'initialize'"),
        (["tools/call", "ping"], "'ping'"),
        (["server/discover"], "'server/discover'"),
        (["notifications/cancelled", "notifications/*"], "'notifications/\\*', 'notifications/cancelled'"),
    ],
)
def test_r12_a_hook_on_an_event_no_interceptor_runs_on_is_refused_at_registration(
    events: list[str], named: str
) -> None:
    """Such a handler never ran (§1.2: not even `*` matches these), while `supportedEvents` advertised it."""
    host = InterceptorHost("h")
    with pytest.raises(ValueError, match=f"interceptor 'guard' hooks {named}, which no interceptor ever runs on"):

        @host.validator("guard", events=events, phase="both")
        async def guard(inv: Invocation) -> bool:
            return False

    assert host.descriptors == [] and host.settings() == {"supportedEvents": []}


# --------------------------------------------------------------------------- R17-R20: results


async def test_r17_r19_flat_validation_result_with_echo(era: str) -> None:
    result = await invoke(era, call("deny", config={"limit": 10}))
    assert without_duration(result) == {
        "interceptor": "deny",
        "type": "validation",
        "phase": "request",
        "valid": False,
        "severity": "error",
        "messages": [{"message": "payload too long", "severity": "error", "path": "$"}],
    }


async def test_r18_r19_flat_mutation_result_with_echo(era: str) -> None:
    result = await invoke(era, call("tag", {"a": 1}, event="acme/custom", phase="response"))
    assert without_duration(result) == {
        "interceptor": "tag",
        "type": "mutation",
        "phase": "response",
        "modified": True,
        "payload": {"a": 1, "tagged": "response"},
    }


@pytest.mark.parametrize("payload", [{"keep": True, "n": [1, 2]}, None])
async def test_r20_unmodified_result_carries_the_unchanged_input(era: str, payload: Any) -> None:
    result = await invoke(era, call("tag", payload))
    assert without_duration(result) == {
        "interceptor": "tag",
        "type": "mutation",
        "phase": "request",
        "modified": False,
        "payload": payload,
    }


@pytest.mark.parametrize(("payload", "returned"), [({"flag": 1}, {"flag": True}), ({"n": [0]}, {"n": [False]})])
async def test_r20_a_payload_python_calls_equal_but_json_does_not_is_modified(
    era: str, payload: Any, returned: Any
) -> None:
    """`True == 1` in Python: a mutator turning `1` into `true` changed the payload, and says so."""
    host = InterceptorHost("types")
    host.mutator("to-bool", events=["tools/call"])(returning(returned))
    host.mutator("as-result", events=["tools/call"])(returning(MutationResult(modified=False, payload=returned)))
    result = await invoke(era, call("to-bool", payload), host)
    assert (result["modified"], result["payload"]) == (True, returned)
    error = await invoke_error(era, call("as-result", payload), host)
    assert (error.code, error.data) == (
        -32603,
        {"interceptor": "as-result", "reason": "mutator returned modified=false with a changed payload"},
    )


async def test_short_returns_bool_tuple_and_sync_handler_in_a_worker_thread(era: str) -> None:
    spy = Spy()
    result = await invoke(
        era, call("prompts-only", {"messages": []}, event="prompts/get", phase="response"), build_host(spy)
    )
    assert without_duration(result) == {
        "interceptor": "prompts-only",
        "type": "validation",
        "phase": "response",
        "valid": False,
        "severity": "error",
        "messages": [{"message": "prompt looks odd", "severity": "error"}],
    }
    assert spy.threads and spy.threads[0] != threading.get_ident()


async def test_invocation_carries_event_phase_payload_config_and_context(era: str) -> None:
    spy = Spy()
    context = {"traceId": "t-1", "timestamp": "2026-09-01T10:00:00Z", "principal": {"type": "user", "id": "u"}}
    await invoke(era, call("deny", config={"limit": 1000}, context=context), build_host(spy))
    inv = spy.invocations[0]
    assert (inv.name, inv.event, inv.phase, inv.payload, dict(inv.config)) == (
        "deny",
        "tools/call",
        "request",
        TOOL_CALL,
        {"limit": 1000},
    )
    assert inv.context is not None and inv.context.trace_id == "t-1" and inv.context.principal is not None
    await invoke(era, call("tag", {"keep": True}), build_host(spy))
    assert spy.invocations[-1].config == {} and spy.invocations[-1].context is None


async def test_in_process_invoke_deep_copies_the_payload() -> None:
    payload = {"a": {"b": 1}}
    for copy_payloads, leaked in ((True, False), (False, True)):
        host = build_host(Spy(), copy_payloads=copy_payloads)
        result = await host.invoke(Call(name="tag", type="mutation", event="x/y", phase="request", payload=payload))
        assert isinstance(result, MutationResult) and result.payload["tagged"] == "request"
        assert ("tagged" in payload) is leaked
        payload.pop("tagged", None)


async def test_r22_event_names_a_caller_sends_are_not_kept_without_bound() -> None:
    """Event names are the caller's: a host kept every one it was asked about (1 MB names: 1 MB each)."""
    host = InterceptorHost("events")
    host.validator("any", events=["*"])(returning(True))
    host.validator("calls", events=["tools/call"])(returning(True))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for index in range(40):
            event = f"acme/{index}" + "x" * 1_000_000
            await host.invoke(Call("any", "validation", event, "request", {}))
            with pytest.raises(InvalidParamsError):
                await host.invoke(Call("calls", "validation", event, "request", {}))
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 5_000_000, f"{kept} bytes kept after 40 one-megabyte event names"
    for index in range(5000):
        await host.invoke(Call("any", "validation", f"acme/{index}", "request", {}))
    assert len(host._covered) <= 4096


# --------------------------------------------------------------------------- R21-R23 and malformed params


async def test_r21_unknown_name_is_invalid_params(era: str) -> None:
    error = await invoke_error(era, call("nope"))
    assert (error.code, error.data) == (-32602, {"name": "nope", "interceptor": "nope"})


@pytest.mark.parametrize(("event", "phase"), [("prompts/get", "request"), ("tools/call", "response")])
async def test_r22_event_phase_outside_hooks_is_invalid_params(era: str, event: str, phase: str) -> None:
    error = await invoke_error(era, call("deny", event=event, phase=phase, config={"limit": 5}))
    assert error.code == -32602
    assert error.data == {
        "name": "deny",
        "interceptor": "deny",
        "event": event,
        "phase": phase,
        "advertisedHooks": [{"events": ["tools/call"], "phase": "request"}],
    }


async def test_r16_r22_empty_hooks_interceptor_is_never_invocable(era: str) -> None:
    error = await invoke_error(era, call("empty"))
    assert (error.code, error.data["advertisedHooks"]) == (-32602, [])


@pytest.mark.parametrize(
    ("config", "field", "reason"),
    [
        ({"limit": "x"}, "config.limit", "'x' is not of type 'integer'"),
        ({}, "config", "'limit' is a required property"),
        ({"limit": 1, "x": 2}, "config", "Additional properties are not allowed ('x' was unexpected)"),
    ],
)
async def test_r23_config_violating_config_schema_is_invalid_params(
    era: str, config: dict[str, Any], field: str, reason: str
) -> None:
    error = await invoke_error(era, call("deny", config=config))
    assert error.code == -32602
    assert error.data == {"name": "deny", "interceptor": "deny", "field": field, "reason": reason}


LIMITED = {
    "type": "object",
    "properties": {"limit": {"type": "integer"}, "tags": {"type": "array"}},
    "required": ["limit"],
    "additionalProperties": False,
}


def limited_host() -> InterceptorHost:
    host = InterceptorHost("limited")

    @host.validator("limited", events=["tools/call"], config_schema=LIMITED)
    async def limited(inv: Invocation) -> bool:
        return True

    return host


def limited_call(config: dict[str, Any]) -> Call:
    return Call("limited", "validation", "tools/call", "request", {}, config)


async def test_r23_a_config_is_checked_against_its_schema_once_per_distinct_value() -> None:
    """A gateway sends the same configured object with every invocation: it was validated every time (17-50 µs
    each for the built-in guards' schemas)."""
    host = limited_host()
    for _ in range(3):
        await host.invoke(limited_call({"limit": 1, "tags": ["a"]}))
    assert len(host._checked_configs) == 1
    await host.invoke(limited_call({"tags": ["a"], "limit": 1}))  # the same value, keys in another order
    assert len(host._checked_configs) == 1
    await host.invoke(limited_call({"limit": 2}))
    assert len(host._checked_configs) == 2


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"limit": True}, "config.limit"),  # JSON writes it `true`: no integer
        ({"limit": 1, "tags": ("a",)}, "config.tags"),  # orjson writes a tuple as the accepted list
        ({"limit": 1, "x": 2}, "config"),
    ],
)
async def test_r23_a_config_once_accepted_vouches_for_no_other(config: dict[str, Any], field: str) -> None:
    host = limited_host()
    await host.invoke(limited_call({"limit": 1, "tags": ["a"]}))
    for _ in range(2):  # a refused config is never remembered
        with pytest.raises(InvalidParamsError) as refused:
            await host.invoke(limited_call(config))
        assert refused.value.data["field"] == field
    assert len(host._checked_configs) == 1


MALFORMED_PARAMS = [
    ({"name": "deny", "event": "tools/call", "payload": {}}, {"field": "phase", "reason": "Field required"}),
    (
        {"name": "deny", "event": "tools/call", "phase": "both", "payload": {}},
        {"field": "phase", "reason": "Input should be 'request' or 'response'"},
    ),
    ({"name": "deny", "phase": "request", "payload": {}}, {"field": "event", "reason": "Field required"}),
    ({"name": "deny", "event": "tools/call", "phase": "request"}, {"field": "payload", "reason": "Field required"}),
    (
        {**call("deny"), "timeoutMs": -1},
        {"field": "timeoutMs", "reason": "Input should be greater than 0"},
    ),
    ({**call("deny"), "timeoutMs": "soon"}, {"field": "timeoutMs", "reason": "Input should be a valid number"}),
    ({**call("deny"), "config": "x"}, {"field": "config", "reason": "Input should be a valid dictionary"}),
    (
        {**call("deny"), "context": {"principal": {"type": "robot"}}},
        {"field": "context.principal.type", "reason": "Input should be 'user', 'service' or 'anonymous'"},
    ),
]


@pytest.mark.parametrize(("params", "data"), MALFORMED_PARAMS)
async def test_r23_malformed_invoke_params_name_the_field_and_interceptor(
    era: str, params: dict[str, Any], data: dict[str, Any]
) -> None:
    error = await invoke_error(era, params)
    assert error.code == -32602
    assert error.data == {**data, "interceptor": "deny"}


@pytest.mark.parametrize(
    ("params", "data"),
    [
        ({**call("tag"), "timeoutMs": True}, {"field": "timeoutMs", "reason": "Input should be a valid number"}),
        ({**call("tag"), "timeoutMs": "50"}, {"field": "timeoutMs", "reason": "Input should be a valid number"}),
        ({**call("tag"), "timeoutMs": "inf"}, {"field": "timeoutMs", "reason": "Input should be a valid number"}),
        ({**call("tag"), "timeoutMs": [50]}, {"field": "timeoutMs", "reason": "Input should be a valid number"}),
        ({**call("tag"), "event": ""}, {"field": "event", "reason": "String should have at least 1 character"}),
        (
            {**call("tag"), "event": "*"},
            {"field": "event", "reason": "must be one concrete event name, not a wildcard or pattern"},
        ),
        (
            {**call("tag"), "event": "tools/*"},
            {"field": "event", "reason": "must be one concrete event name, not a wildcard or pattern"},
        ),
    ],
)
async def test_r23_ill_typed_timeout_or_pattern_event_is_invalid_params(
    era: str, params: dict[str, Any], data: dict[str, Any]
) -> None:
    """`tag` hooks `*`, so a pattern event would match and run; `true` would be a 1 ms deadline."""
    error = await invoke_error(era, params)
    assert error.code == -32602
    assert error.data == {**data, "interceptor": "tag"}


async def test_r23_pattern_or_empty_event_is_rejected_in_process_too() -> None:
    host = build_host(Spy())
    for event, kind in (("*", "a wildcard or pattern"), ("", "empty")):
        with pytest.raises(InvalidParamsError) as caught:
            await host.invoke(Call(name="tag", type="mutation", event=event, phase="request", payload={}))
        reason = f"must be one concrete event name, not {kind}"
        assert caught.value.data == {"field": "event", "reason": reason, "interceptor": "tag"}


async def test_r26_integral_timeout_ms_is_accepted(era: str) -> None:
    result = await invoke(era, call("tag", timeoutMs=5000))
    assert result["modified"] is True


@pytest.mark.parametrize(
    ("params", "data"),
    [
        ({**call("x"), "name": 5}, {"field": "name", "reason": "Input should be a valid string"}),
        ({"event": "tools/call", "phase": "request", "payload": {}}, {"field": "name", "reason": "Field required"}),
    ],
)
async def test_r21_params_without_a_usable_name(era: str, params: dict[str, Any], data: dict[str, Any]) -> None:
    error = await invoke_error(era, params)
    assert (error.code, error.data) == (-32602, data)


# --------------------------------------------------------------------------- R24-R28: failures


async def test_r24_r25_handler_exception_is_an_error_never_a_verdict(era: str) -> None:
    error = await invoke_error(era, call("crash"))
    assert error.code == -32603
    assert error.message == "Interceptor execution failed"
    assert error.data == {"interceptor": "crash", "reason": "ValueError: nope"}


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("garbage", "validator returned str, expected ValidationResult, bool or (bool, messages)"),
        ("wrong-type", "mutator returned a validation result, expected a mutation result"),
        ("lies", "mutator returned modified=false with a changed payload"),
        ("garbage-object", "result is not JSON-serialisable: payload.x holds a object, not a JSON value"),
    ],
)
async def test_r25_handler_returning_garbage_is_internal_error(era: str, name: str, reason: str) -> None:
    error = await invoke_error(era, call(name))
    assert (error.code, error.data) == (-32603, {"interceptor": name, "reason": reason})


def nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


def non_json_host() -> InterceptorHost:
    """Handlers whose results pydantic would mangle (set -> list, NaN -> null) or fail to serialise."""
    host = InterceptorHost("non-json")
    returns: dict[str, Any] = {
        "set": {"tags": {"a"}},
        "nan": {"score": float("nan")},
        "infinity": [float("inf")],
        "int-key": {1: "one"},
        "deep": nested(300),
        "bytes": b"raw",
    }
    for name, value in returns.items():
        host.mutator(name, events=["tools/call"])(returning(value))
    info = ValidationResult(valid=True, info={"ratio": float("nan")})
    host.validator("info-nan", events=["tools/call"])(returning(info))
    return host


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ((False, [{"path": "$"}]), "validator returned an invalid result: message: Field required"),
        ((False, 5), "validator returned an invalid result: TypeError: 'int' object is not iterable"),
    ],
)
async def test_r25_a_return_no_result_can_be_built_from_is_internal_error_naming_it(
    era: str, value: Any, reason: str
) -> None:
    """Was `-32602 Invalid request parameters` (blaming the invoker) or code 0 with no data."""
    host = InterceptorHost("malformed")
    host.validator("odd", events=["tools/call"])(returning(value))
    error = await invoke_error(era, call("odd"), host)
    assert (error.code, error.data) == (-32603, {"interceptor": "odd", "reason": reason})


@pytest.mark.parametrize("timeout_ms", [None, 5000])
async def test_r24_r25_a_handler_raising_a_cancellation_of_its_own_is_internal_error_and_the_server_lives(
    era: str, timeout_ms: float | None
) -> None:
    """A stray CancelledError (from a future another task cancelled) ended the server for every client."""
    host = InterceptorHost("stray")

    @host.validator("stray", events=["tools/call"])
    async def stray(inv: Invocation) -> bool:
        raise anyio.get_cancelled_exc_class()()

    host.validator("fine", events=["tools/call"])(returning(True))
    extra = {} if timeout_ms is None else {"timeoutMs": timeout_ms}
    with anyio.fail_after(5):
        async with connect(host.create_server(), era) as client:
            with pytest.raises(MCPError) as caught:
                await raw_call(client, "interceptor/invoke", call("stray", **extra))
            assert caught.value.code == -32603
            assert caught.value.data == {"interceptor": "stray", "reason": "CancelledError: raised by the handler"}
            assert (await raw_call(client, "interceptor/invoke", call("fine")))["valid"] is True


@pytest.mark.parametrize(
    ("result", "severity"),
    [
        ({"valid": False, "severity": "critical"}, "critical"),
        (ValidationResult(valid=False, severity="fatal"), "fatal"),
        ({"valid": False, "severity": "warn", "messages": [{"message": "m", "severity": "fatal"}]}, "fatal"),
        (ValidationResult(valid=True, messages=(ValidationMessage(message="m", severity="Error"),)), "Error"),
    ],
)
async def test_r17_r25_severity_outside_the_spec_is_a_malformed_result(era: str, result: Any, severity: str) -> None:
    """The spec's severities are info, warn and error; anything else never leaves the host as a verdict."""
    host = InterceptorHost("severities")
    host.validator("odd", events=["tools/call"])(returning(result))
    error = await invoke_error(era, call("odd"), host)
    reason = f"validator returned severity {severity!r}, expected one of 'info', 'warn', 'error'"
    assert (error.code, error.data) == (-32603, {"interceptor": "odd", "reason": reason})


@pytest.mark.parametrize("depth", [201, 260, 5000])
async def test_r23_payload_nested_too_deep_is_invalid_params_naming_it(depth: int) -> None:
    """Past 200 levels a payload can be neither copied for the handler nor sent back: `-32602` naming it.

    mcp clients cannot send one past ~250 levels (the CLI's stdio can); 5000 levels used to exhaust the
    recursion of the handler's copy and answer a data-less `-32603`, even for an unknown interceptor.
    """
    host = InterceptorHost("deep")
    host.mutator("unchanged", events=["tools/call"])(returning(None))
    reason = "payload is nested more than 200 levels deep"
    for name in ("unchanged", "nope"):
        context = SimpleNamespace(params=call(name, {"deep": nested(depth)}))  # what `_serve_invoke` reads
        with pytest.raises(MCPError) as caught:
            await host._serve_invoke(context, RawParams())  # type: ignore[arg-type]
        assert (caught.value.code, caught.value.data) == (
            -32602,
            {"interceptor": name, "field": "payload", "reason": reason},
        )


async def test_r23_config_nested_too_deep_is_invalid_params_naming_it() -> None:
    """A `config` nested past 200 levels is refused like such a payload: `-32602` naming `config`.

    It used to reach the handler: tool-policy (whose `arguments[].schema` takes any object) answered
    `-32603 Interceptor execution failed` with `reason: "TypeError: Recursion limit reached"`.
    """
    deep: Any = {}
    for _ in range(300):
        deep = {"a": deep}
    host = guards.load("tool-policy")
    context = SimpleNamespace(params=call("tool-policy", TOOL_CALL, config={"arguments": [{"schema": deep}]}))
    with pytest.raises(MCPError) as caught:
        await host._serve_invoke(context, RawParams())  # type: ignore[arg-type]
    assert (caught.value.code, caught.value.data) == (
        -32602,
        {"interceptor": "tool-policy", "field": "config", "reason": "config is nested more than 200 levels deep"},
    )


async def test_r23_payload_nested_too_deep_is_invalid_params_over_the_wire(era: str) -> None:
    host = InterceptorHost("deep")
    host.mutator("unchanged", events=["tools/call"])(returning(None))
    result = await invoke(era, call("unchanged", nested(200)), host)  # the deepest accepted
    assert result["modified"] is False
    error = await invoke_error(era, call("unchanged", nested(201)), host)
    assert (error.code, error.data) == (
        -32602,
        {"interceptor": "unchanged", "field": "payload", "reason": "payload is nested more than 200 levels deep"},
    )


def returning(value: Any) -> Any:
    async def handler(inv: Invocation) -> Any:
        return value

    return handler


@pytest.mark.parametrize(
    ("name", "payload", "reason"),
    [
        ("set", TOOL_CALL, "payload.tags holds a set, not a JSON value"),
        ("nan", TOOL_CALL, "payload.score holds nan, which JSON cannot carry"),
        ("infinity", TOOL_CALL, "payload[0] holds inf, which JSON cannot carry"),
        ("int-key", TOOL_CALL, "payload has a non-string key 1"),
        ("bytes", TOOL_CALL, "payload holds a bytes, not a JSON value"),
        ("deep", TOOL_CALL, "payload is nested more than 254 levels deep (or holds a cycle)"),
        ("info-nan", TOOL_CALL, "info.ratio holds nan, which JSON cannot carry"),
    ],
)
async def test_r24_r25_result_that_is_not_json_is_internal_error_with_data(
    era: str, name: str, payload: Any, reason: str
) -> None:
    """Never code 0, a data-less -32603, or a silently changed value (a set sent as a list, NaN as null)."""
    error = await invoke_error(era, call(name, payload), non_json_host())
    assert error.code == -32603
    assert error.message == "Interceptor execution failed"
    assert error.data == {"interceptor": name, "reason": f"result is not JSON-serialisable: {reason}"}


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("set", "payload.tags holds a set, not a JSON value"),
        ("nan", "payload.score holds nan, which JSON cannot carry"),
        ("bytes", "payload holds a bytes, not a JSON value"),
        ("info-nan", "info.ratio holds nan, which JSON cannot carry"),
    ],
)
async def test_r25_in_process_a_result_that_is_not_json_fails_as_over_a_transport(name: str, reason: str) -> None:
    """`Chain.add_local` promises a transport's semantics: a set, NaN or bytes in a new payload was applied
    in-process (`success`, a non-JSON `final_payload`) while a host over a transport failed it (R25)."""
    chain = Chain(role="client")
    chain.add_local(non_json_host())
    with anyio.fail_after(5):
        result = await chain.execute("tools/call", "request", TOOL_CALL, interceptors=[name])
    assert result.status in ("mutation_failed", "validation_failed") and result.final_payload is None
    assert [(f.interceptor, f.code, f.reason) for f in result.failures] == [
        (name, -32603, f"result is not JSON-serialisable: {reason}")
    ]


async def test_r26_r27_timeout_cancels_the_handler_and_reports_it(era: str) -> None:
    spy = Spy()
    error = await invoke_error(era, call("hang", timeoutMs=100), build_host(spy))
    assert error.code == -32000
    assert error.message == "Interceptor execution timeout"
    assert error.data == {"interceptor": "hang", "reason": "timeout", "timeoutMs": 100, "phase": "request"}
    with anyio.fail_after(1):
        await spy.cancelled.wait()  # R27: the handler was cancelled, not left running
    assert not spy.finished


async def test_r26_non_yielding_handler_past_its_deadline_is_a_timeout(era: str) -> None:
    """A handler that never yields cannot be cancelled; its late result is answered as the timeout (D10)."""
    host = InterceptorHost("busy")

    @host.validator("busy", events=["tools/call"])
    async def busy(inv: Invocation) -> bool:
        end = time.perf_counter() + 0.3  # CPU-bound, never awaits: the 10 ms deadline (30x shorter) cannot preempt it
        while time.perf_counter() < end:
            pass
        return True

    error = await invoke_error(era, call("busy", timeoutMs=10), host)
    assert error.code == -32000
    assert error.message == "Interceptor execution timeout"
    assert error.data == {"interceptor": "busy", "reason": "timeout", "timeoutMs": 10, "phase": "request"}
    g5 = InterceptorHost("busy-g5", timeout_code="g5")
    g5.add(host.descriptors[0], busy)
    error = await invoke_error(era, call("busy", timeoutMs=10), g5)
    assert (error.code, error.data["reason"]) == (-32603, "timeout")


async def test_r26_g5_timeout_code_switch(era: str) -> None:
    error = await invoke_error(era, call("hang", timeoutMs=100), build_host(Spy(), timeout_code="g5"))
    assert error.code == -32603
    assert error.data == {"interceptor": "hang", "reason": "timeout", "timeoutMs": 100, "phase": "request"}


async def test_r28_handler_raising_timeout_error_is_not_a_timeout(era: str) -> None:
    error = await invoke_error(era, call("raises-timeout", timeoutMs=5000))
    assert error.code == -32603
    assert error.data == {"interceptor": "raises-timeout", "reason": "TimeoutError: upstream lookup timed out"}


async def test_r27_outer_cancellation_propagates_instead_of_becoming_a_verdict() -> None:
    spy = Spy()
    host = build_host(spy)
    with anyio.move_on_after(0.1) as scope:
        await host.invoke(Call(name="hang", type="validation", event="tools/call", phase="request", payload={}))
    assert scope.cancelled_caught
    assert spy.cancelled.is_set() and not spy.finished


async def test_r27_outer_cancellation_under_a_timeout_propagates_too() -> None:
    spy = Spy()
    host = build_host(spy)
    with anyio.move_on_after(0.1) as scope:
        hang = Call(name="hang", type="validation", event="tools/call", phase="request", payload={}, timeout_ms=5000)
        await host.invoke(hang)
    assert scope.cancelled_caught
    assert spy.cancelled.is_set() and not spy.finished


async def test_the_hot_path_runner_kept_per_point_stamps_each_point_and_carries_on_a_handler_that_suspends() -> None:
    """An async handler with no timeout of its own runs through a runner the host keeps per (name, event,
    phase): a handler that suspends midway completes through it, each point's result carries that point's
    phase, the handler's changes to its copy reach neither the caller's payload nor the next invocation,
    and a timeout still takes the general path (R26)."""
    host = InterceptorHost("h")

    @host.validator("v", events=["tools/call"], phase="both")
    async def v(inv: Invocation) -> bool:
        await anyio.lowlevel.checkpoint()  # suspends midway
        seen = "tampered" in inv.payload
        inv.payload["tampered"] = True
        return inv.phase == "request" and not seen

    @host.validator("slow", events=["tools/call"])
    async def slow(inv: Invocation) -> bool:
        await anyio.sleep(5)
        return True

    payload = {"method": "tools/call", "params": {"name": "echo"}}
    with anyio.fail_after(5):
        first = await host.invoke(Call("v", "validation", "tools/call", "request", payload))
        response = await host.invoke(Call("v", "validation", "tools/call", "response", payload))
        again = await host.invoke(Call("v", "validation", "tools/call", "request", payload))
        with pytest.raises(InterceptorsError) as late:
            await host.invoke(Call("slow", "validation", "tools/call", "request", payload, timeout_ms=20))
    assert [(r.phase, r.valid, r.interceptor) for r in (first, response, again)] == [
        ("request", True, "v"),
        ("response", False, "v"),
        ("request", True, "v"),
    ]
    assert all(r.duration_ms is not None and r.duration_ms >= 0 for r in (first, response, again))
    assert payload == {"method": "tools/call", "params": {"name": "echo"}}
    assert is_timeout_error(late.value.code, late.value.data)
