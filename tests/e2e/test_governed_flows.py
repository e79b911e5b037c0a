"""The real CLI gateway, over stdio and Streamable HTTP, in both eras, enforcing the e2e guards.

Every test runs against `python -m mcp_interceptors gateway --config ...` fronting the real
`e2e_upstream.py` subprocess. A module-scoped `session` holds one client per (transport, era):
over stdio that client spawned its own gateway, over HTTP one gateway process serves the module.
Tests use distinct note names and tokens, so they don't interfere. Tests that need a session of
their own (fresh state, handshake variants) open one. What the upstream received is read back
from the upstream itself.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream
from e2e_hosts import WHOAMI
from e2e_support import (
    ERAS,
    ConfigWriter,
    Sampler,
    Target,
    gateway_env,
    raw_request,
    standard_config,
    text_of,
    unique,
    write_yaml,
)
from helpers import cli_argv, free_tcp_port, http_transport, running
from mcp import Client, MCPError
from mcp.client import ClientRequestContext
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY

from mcp_interceptors import EXTENSION_ID, list_interceptors

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

STANDARD_GUARDS = ["redact-secrets", "deny-tools", "hide-tools", "tag-sampling"]
STANDARD_EVENTS = ["sampling/createMessage", "tools/call", "tools/list"]
MODERN_META = {
    PROTOCOL_VERSION_META_KEY: "2026-07-28",
    CLIENT_INFO_META_KEY: {"name": "raw-client", "version": "1.0.0"},
    CLIENT_CAPABILITIES_META_KEY: {},
}
VICTIM_TOKEN = "e2e-victim-token-2b7d"
ATTACKER_TOKEN = "e2e-attacker-token-9c4e"
COMBOS = [("stdio", "legacy"), ("stdio", "2026-07-28"), ("http", "legacy"), ("http", "2026-07-28")]


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """Module scope, so one gateway process and one client per combination serve the module."""
    return "asyncio"


@dataclass
class Callbacks:
    """The long-lived clients' callbacks; each test resets what it reads."""

    sampler: Sampler = field(default_factory=Sampler)
    logs: list[types.LoggingMessageNotificationParams] = field(default_factory=list)
    logged: anyio.Event = field(default_factory=anyio.Event)

    def reset(self) -> None:
        self.sampler = Sampler()
        self.logs = []
        self.logged = anyio.Event()

    async def sampling(self, ctx: ClientRequestContext, params: types.CreateMessageRequestParams) -> Any:
        return await self.sampler(ctx, params)

    async def logging(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params)
        self.logged.set()


@dataclass
class Session:
    transport: str
    era: str
    client: Client
    callbacks: Callbacks


@pytest.fixture(scope="module")
def standard_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_yaml(tmp_path_factory.mktemp("standard") / "gateway.yaml", standard_config())


@pytest.fixture(scope="module")
async def standard_http(standard_file: Path) -> AsyncIterator[str]:
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(standard_file), "--http", f"127.0.0.1:{port}")
    async with running(argv, port=port, env=gateway_env(), label="standard HTTP gateway"):
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.fixture(scope="module", params=COMBOS, ids=["-".join(combo) for combo in COMBOS])
async def session(request: pytest.FixtureRequest, standard_file: Path, standard_http: str) -> AsyncIterator[Session]:
    transport, era = request.param
    target = Target(transport, standard_file, standard_http)
    callbacks = Callbacks()
    done = anyio.Event()

    async def hold(*, task_status: anyio.abc.TaskStatus[Client]) -> None:
        options: dict[str, Any] = {"sampling_callback": callbacks.sampling, "logging_callback": callbacks.logging}
        if era != "legacy":
            options["log_level"] = "debug"  # 2026-07-28 clients opt in to log notifications per request
        async with target.client(era, **options) as client:
            task_status.started(client)
            await done.wait()

    async with anyio.create_task_group() as tg:
        with anyio.fail_after(60):
            client = await tg.start(hold)
        yield Session(transport, era, client, callbacks)
        done.set()


@pytest.fixture
def s(session: Session) -> Session:
    """The module's session for this combination, with its callbacks reset."""
    session.callbacks.reset()
    return session


@pytest.fixture(params=["stdio", "http"])
def gateway(request: pytest.FixtureRequest, standard_file: Path, standard_http: str) -> Target:
    """A target to open fresh sessions on."""
    return Target(request.param, standard_file, standard_http)


# --------------------------------------------------------------------------- the chain on tools/call


async def test_secret_in_arguments_is_redacted_before_it_reaches_the_upstream(s: Session) -> None:
    note = unique("note")
    with anyio.fail_after(30):
        saved = await s.client.call_tool("save_note", {"name": note, "text": "key=sk-live-ABCDEF123456 end"})
        stored = await s.client.call_tool("read_note", {"name": note})
    assert text_of(saved) == f"saved {note}"
    assert text_of(stored) == "key=[REDACTED] end"  # what the upstream itself stored


async def test_denied_tool_is_blocked_with_the_interceptor_named_and_never_reaches_the_upstream(
    s: Session,
) -> None:
    note = unique("keep")
    with anyio.fail_after(30):
        await s.client.call_tool("save_note", {"name": note, "text": "still here"})
        with pytest.raises(MCPError) as blocked:
            await s.client.call_tool("delete_everything", {})
        survivor = await s.client.call_tool("read_note", {"name": note})
    assert blocked.value.code == -32602
    assert blocked.value.message == "Blocked by interceptor validation"
    assert blocked.value.data == {
        "interceptor": "deny-tools",
        "reason": "validation failed",
        "event": "tools/call",
        "phase": "request",
        "status": "validation_failed",
    }
    assert text_of(survivor) == "still here"


HIDDEN_REFUSAL = (
    -32602,
    "Unknown tool: hidden_tool",
    {"reason": "not advertised to this session", "name": "hidden_tool", "event": "tools/call"},
)


async def test_an_unknown_resource_is_refused_with_the_data_a_server_sends(s: Session) -> None:
    """`-32602` with `data: {uri}` alone, as an mcp server answers (2026-07-28 resource-not-found): the
    TypeScript SDK makes a `ResourceNotFoundError` of exactly that, and with the `reason` and `event` a
    refused tool carries it saw a generic error through the gateway where a direct server gave it one."""
    with anyio.fail_after(30), pytest.raises(MCPError) as refused:
        await s.client.read_resource("nowhere://x")
    assert (refused.value.code, refused.value.message) == (-32602, "Unknown resource: nowhere://x")
    assert refused.value.data == {"uri": "nowhere://x"}


async def test_tool_filtered_from_tools_list_is_refused_at_tools_call(s: Session) -> None:
    with anyio.fail_after(30):
        tools = await s.client.list_tools()
        with pytest.raises(MCPError) as refused:
            await s.client.call_tool("hidden_tool", {})
        echoed = await s.client.call_tool("echo", {"text": "visible"})
    names = [tool.name for tool in tools.tools]
    assert "hidden_tool" not in names
    assert {"echo", "save_note", "read_note", "delete_everything", "ask", "sleep"} <= set(names)
    assert (refused.value.code, refused.value.message, refused.value.data) == HIDDEN_REFUSAL
    assert text_of(echoed) == "visible"


@pytest.mark.parametrize("era", ERAS)
async def test_filtered_tool_is_refused_even_before_the_session_listed_tools(gateway: Target, era: str) -> None:
    """A fresh session that never listed: the gateway computes what it would have been shown."""
    with anyio.fail_after(30):
        async with gateway.client(era) as client:
            with pytest.raises(MCPError) as refused:
                await client.call_tool("hidden_tool", {})
    assert (refused.value.code, refused.value.message, refused.value.data) == HIDDEN_REFUSAL


@pytest.mark.parametrize("era", ERAS)
async def test_templated_resource_is_callable_after_listing_only_resources(gateway: Target, era: str) -> None:
    """A session that listed `resources/list` (not templates) may still read a URI its templates advertise."""
    with anyio.fail_after(30):
        async with gateway.client(era) as client:
            listed = await client.list_resources()
            read = await client.read_resource("e2e://welcome")
    assert [resource.uri for resource in listed.resources] == []
    assert [getattr(content, "text", None) for content in read.contents] == ["Hello from the e2e upstream."]


# --------------------------------------------------------------------------- client features, progress, cancel


async def test_sampling_request_and_answer_are_both_mutated_by_the_guard(s: Session) -> None:
    """Legacy: a server-to-client `sampling/createMessage`; 2026-07-28: an `input_required` round."""
    with anyio.fail_after(30):
        result = await s.client.call_tool("ask", {"question": "meaning of life?"})
    assert s.callbacks.sampler.questions == ["meaning of life? [seen by gateway]"]
    assert text_of(result) == "model says: 42 [checked by gateway]"


async def test_modern_sampling_travels_as_an_input_required_result_governed_both_ways(s: Session) -> None:
    """The raw 2026-07-28 exchange: the `inputRequests` the client gets and the retry's `inputResponses`."""
    if s.era == "legacy":
        pytest.skip("2026-07-28 only: handshake-era sampling is a server-to-client request")
    client = s.client
    with anyio.fail_after(30):
        first = await raw_request(client, "tools/call", {"name": "ask", "arguments": {"question": "why?"}})
        assert first["resultType"] == "input_required"
        [(key, request)] = first["inputRequests"].items()
        assert request["method"] == "sampling/createMessage"
        assert request["params"]["messages"] == [
            {"role": "user", "content": {"type": "text", "text": "why? [seen by gateway]"}}
        ]
        answer = {"role": "assistant", "content": {"type": "text", "text": "because"}, "model": "m"}
        retry = {
            "name": "ask",
            "arguments": {"question": "why?"},
            "inputResponses": {key: answer},
            "requestState": first["requestState"],
        }
        final = await raw_request(client, "tools/call", retry)
    assert final["resultType"] == "complete"
    assert final["content"] == [{"type": "text", "text": "model says: because [checked by gateway]"}]


async def test_progress_notifications_are_relayed(s: Session) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    with anyio.fail_after(30):
        result = await s.client.call_tool("countdown", {"steps": 3}, progress_callback=on_progress)
    assert text_of(result) == "done"
    assert seen == [(1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3")]


async def test_client_timeout_cancels_the_upstream_handler(s: Session) -> None:
    token = unique("sleep")
    with anyio.fail_after(30):
        await s.client.list_tools()  # warm: the timeout below must hit a call the upstream is running
        with pytest.raises(MCPError) as timed_out:
            await s.client.call_tool("sleep", {"seconds": 30, "token": token}, read_timeout_seconds=0.5)
        # the upstream's `sleep` handler sets an event when it is cancelled; this waits on it
        verdict = await s.client.call_tool("was_cancelled", {"token": token, "wait": 10})
    assert timed_out.value.code == -32001
    assert text_of(verdict) == "cancelled"


# --------------------------------------------------------------------------- the gateway as interceptor host


async def test_interceptors_list_through_the_gateway_names_what_it_enforces(s: Session) -> None:
    with anyio.fail_after(30):
        everything = await list_interceptors(s.client)
        for_calls = await list_interceptors(s.client, "tools/call")
    assert [d.name for d in everything] == STANDARD_GUARDS
    assert [d.name for d in for_calls] == ["redact-secrets", "deny-tools"]
    assert {d.name: d.type for d in everything} == {
        "redact-secrets": "mutation",
        "deny-tools": "validation",
        "hide-tools": "mutation",
        "tag-sampling": "mutation",
    }


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_extension_capability_is_advertised_in_the_handshake(gateway: Target, mode: str) -> None:
    """Legacy `initialize` carries it under `experimental`; `server/discover` under `extensions`."""
    with anyio.fail_after(30):
        async with gateway.client(mode) as client:
            capabilities = client.server_capabilities
            version = client.protocol_version
            info = client.server_info
    settings = {"supportedEvents": STANDARD_EVENTS}
    if mode == "legacy":
        assert version == "2025-11-25"
        assert (capabilities.experimental or {}).get(EXTENSION_ID) == settings
    else:
        assert version == "2026-07-28"
        assert (capabilities.extensions or {}).get(EXTENSION_ID) == settings
    assert capabilities.tools is not None  # the upstream's capabilities are merged in
    assert (info.name, info.version) == ("mcp-interceptors-gateway", "0.1.0")  # an empty version makes clients warn


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_single_upstreams_extensions_are_advertised_as_a_direct_server_advertises_them(
    gateway: Target, mode: str
) -> None:
    """Its extension methods pass through, so a client must be able to discover them: `server/discover`
    carries the upstream's `extensions` beside ours; a 2025-11-25 `initialize` has no such member."""
    with anyio.fail_after(30):
        async with gateway.client(mode) as client:
            capabilities = client.server_capabilities
    if mode == "legacy":
        assert set(capabilities.experimental or {}) == {EXTENSION_ID}
        assert capabilities.extensions is None
    else:
        assert set(capabilities.extensions or {}) == {EXTENSION_ID, "dev.e2e/vendor"}


async def test_execute_chain_runs_the_configured_chain_for_a_client_payload(s: Session) -> None:
    secret_call = {"method": "tools/call", "params": {"name": "echo", "arguments": {"text": "sk-live-ABCDEFGH1"}}}
    denied_call = {"method": "tools/call", "params": {"name": "delete_everything", "arguments": {}}}
    with anyio.fail_after(30):
        redacted = await raw_request(
            s.client, "interceptor/executeChain", {"event": "tools/call", "phase": "request", "payload": secret_call}
        )
        denied = await raw_request(
            s.client, "interceptor/executeChain", {"event": "tools/call", "phase": "request", "payload": denied_call}
        )
    assert redacted["status"] == "success"
    assert redacted["finalPayload"] == {
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "[REDACTED]"}},
    }
    assert denied["status"] == "validation_failed"
    assert denied["abortedAt"]["interceptor"] == "deny-tools"
    assert "finalPayload" not in denied


async def test_r21_execute_chain_naming_an_unknown_interceptor_or_a_pattern_event_is_invalid_params(
    s: Session,
) -> None:
    call = {"method": "tools/call", "params": {"name": "delete_everything", "arguments": {}}}
    typo = {"event": "tools/call", "phase": "request", "payload": call, "interceptors": ["deny_tools", "deny-tools"]}
    with anyio.fail_after(30):
        with pytest.raises(MCPError) as unknown:  # used to run a plan without the typo'd guard: success
            await raw_request(s.client, "interceptor/executeChain", typo)
        with pytest.raises(MCPError) as pattern:  # used to run only `*`-hooked guards: success
            await raw_request(s.client, "interceptor/executeChain", {"event": "*", "phase": "request", "payload": call})
    assert (unknown.value.code, unknown.value.data) == (-32602, {"field": "interceptors", "unknown": ["deny_tools"]})
    assert (pattern.value.code, pattern.value.data) == (-32602, {"field": "event", "event": "*"})


async def test_r23_execute_chain_config_for_an_unknown_interceptor_or_nested_too_deep_is_invalid_params(
    s: Session,
) -> None:
    """A `config` key naming no interceptor of the chain was dropped silently (the chain ran without the
    caller's config: `success`); a config nested past 200 levels reached the guards, which failed on it."""
    call = {"method": "tools/call", "params": {"name": "echo", "arguments": {"text": "hi"}}}
    typo = {"event": "tools/call", "phase": "request", "payload": call, "config": {"deny_tools": {}}}
    deep: Any = {}
    for _ in range(200):  # 201 levels from `config`
        deep = {"a": deep}
    too_deep = {**typo, "config": {"deny-tools": deep}}
    with anyio.fail_after(30):
        with pytest.raises(MCPError) as unknown:
            await raw_request(s.client, "interceptor/executeChain", typo)
        with pytest.raises(MCPError) as nested:
            await raw_request(s.client, "interceptor/executeChain", too_deep)
    assert (unknown.value.code, unknown.value.data) == (-32602, {"field": "config", "unknown": ["deny_tools"]})
    if (s.transport, s.era) == ("http", "legacy"):  # mcp's handshake-era HTTP parser stops at ~200 levels
        assert nested.value.code == -32700
        return
    reason = "config is nested more than 200 levels deep"
    assert (nested.value.code, nested.value.data) == (
        -32602,
        {"event": "tools/call", "phase": "request", "field": "config", "reason": reason},
    )


@pytest.mark.parametrize("era", ERAS)
async def test_execute_chain_is_method_not_found_unless_exposed(write_config: ConfigWriter, era: str) -> None:
    config = write_config(standard_config(expose_execute_chain=False))
    target = Target("stdio", config)
    with anyio.fail_after(30):
        async with target.client(era) as client:
            with pytest.raises(MCPError) as missing:
                await raw_request(
                    client, "interceptor/executeChain", {"event": "tools/call", "phase": "request", "payload": {}}
                )
            listed = await list_interceptors(client)
    assert missing.value.code == -32601
    assert [d.name for d in listed] == STANDARD_GUARDS


async def test_r10_list_with_a_non_string_event_filter_is_invalid_params_as_from_the_host(s: Session) -> None:
    with anyio.fail_after(30), pytest.raises(MCPError) as refused:
        await raw_request(s.client, "interceptors/list", {"event": 123})
    assert refused.value.code == -32602
    assert refused.value.data == {"field": "event"}


@pytest.mark.parametrize("era", ERAS)
async def test_s3_payload_nested_past_the_limit_is_invalid_params_naming_the_field(
    standard_file: Path, era: str
) -> None:
    """Not `code: 0` (handshake era) or a bare internal error (2026-07-28): the client's params are bad.

    Raw lines, since mcp's own client cannot serialise a payload this deep."""
    requests = {
        "within": ("interceptor/invoke", {"name": "redact-secrets", **_nested_call(150, "request")}),
        "invoke": ("interceptor/invoke", {"name": "redact-secrets", **_nested_call(300, "request")}),
        "chain": ("interceptor/executeChain", _nested_call(300, "request")),
    }
    replies = await _raw_stdio(standard_file, era, requests)
    reason = "payload is nested more than 200 levels deep"
    assert replies["within"]["result"]["modified"] is True
    assert replies["invoke"]["error"]["code"] == -32602
    assert replies["invoke"]["error"]["data"] == {"interceptor": "redact-secrets", "field": "payload", "reason": reason}
    assert replies["chain"]["error"]["code"] == -32602
    assert replies["chain"]["error"]["data"] == {
        "event": "tools/call",
        "phase": "request",
        "field": "payload",
        "reason": reason,
    }


@pytest.mark.parametrize("era", ERAS)
async def test_s7_invoke_and_execute_chain_apply_the_gateways_interceptor_config(
    write_config: ConfigWriter, era: str
) -> None:
    """Asked directly, the gateway's interceptors answer as they enforce: its `interceptors.config`
    wins over a client's `config` for the same interceptor."""
    interceptors = {"guards": [{"name": "tool-policy"}], "config": {"tool-policy": {"deny": ["delete_*"]}}}
    config = write_config(standard_config(interceptors=interceptors))
    payload = {"method": "tools/call", "params": {"name": "delete_everything"}}
    loosened = {"tool-policy": {"deny": []}}
    requests = {
        "invoke": (
            "interceptor/invoke",
            {"name": "tool-policy", "event": "tools/call", "phase": "request", "payload": payload, "config": {}},
        ),
        "chain": (
            "interceptor/executeChain",
            {"event": "tools/call", "phase": "request", "payload": payload, "config": loosened},
        ),
    }
    replies = await _raw_stdio(config, era, requests)
    assert replies["invoke"]["result"]["valid"] is False
    assert replies["chain"]["result"]["status"] == "validation_failed"


async def _raw_stdio(config: Path, era: str, requests: dict[str, tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Send `{id: (method, params)}` as raw lines to a stdio gateway in `era`; its replies by id."""
    lines = []
    if era == "legacy":
        initialize = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        }
        lines.append({"jsonrpc": "2.0", "id": "init", "method": "initialize", "params": initialize})
        lines.append({"jsonrpc": "2.0", "method": "notifications/initialized"})
    for request_id, (method, params) in requests.items():
        if era != "legacy":
            params = {**params, "_meta": MODERN_META}
        lines.append({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
    replies: dict[str, Any] = {}
    with anyio.fail_after(60):
        async with await anyio.open_process(cli_argv("gateway", "--config", str(config)), env=gateway_env()) as proc:
            assert proc.stdin is not None and proc.stdout is not None
            await proc.stdin.send(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
            reader = BufferedByteReceiveStream(proc.stdout)
            while not set(requests) <= set(replies):
                reply = json.loads(await reader.receive_until(b"\n", 1 << 22))
                replies[reply.get("id")] = reply
            await proc.stdin.aclose()
            await proc.wait()
    return replies


@pytest.mark.parametrize("era", ERAS)
async def test_r24_result_too_deep_to_send_is_an_internal_error_naming_the_interceptor(
    write_config: ConfigWriter, era: str
) -> None:
    config = write_config(standard_config(interceptors={"hosts": [{"module": "e2e_hosts:deep_host"}]}))
    with anyio.fail_after(30):
        async with Target("stdio", config).client(era) as client:
            with pytest.raises(MCPError) as invoke:
                await raw_request(client, "interceptor/invoke", {"name": "deepen", **_nested_call(1, "response")})
            with pytest.raises(MCPError) as chain:
                await raw_request(client, "interceptor/executeChain", _nested_call(1, "response"))
    expected = {"interceptor": "deepen", "reason": "result payload is nested more than 200 levels deep"}
    assert (invoke.value.code, invoke.value.data) == (-32603, expected)
    assert (chain.value.code, chain.value.data) == (-32603, expected)


def _nested_call(depth: int, phase: str) -> dict[str, Any]:
    """`tools/call` params (request) or result (response) holding a list nested `depth` deep."""
    nested: Any = "sk-live-ABCDEFGH1"
    for _ in range(depth):
        nested = [nested]
    if phase == "request":
        payload: Any = {"method": "tools/call", "params": {"name": "echo", "arguments": {"text": nested}}}
    else:
        payload = {"content": [{"type": "text", "text": "x"}], "structuredContent": {"nested": nested}}
    return {"event": "tools/call", "phase": phase, "payload": payload}


@pytest.mark.parametrize("era", ERAS)
async def test_s7_invoke_and_execute_chain_take_principal_and_session_from_the_gateway_not_the_client(
    write_config: ConfigWriter, era: str
) -> None:
    """An authenticated client cannot spend another principal's rate-limit budget (or reach its session)
    by naming it in `context`: the gateway sets what it knows, as on the client's own calls."""
    limit = {"limit": "3/minute", "per": ["principal"]}
    interceptors = {
        "hosts": [{"module": "e2e_hosts:context_host"}],
        "guards": [{"name": "rate-limit", "config": {"limits": [limit]}}],
    }
    config = write_config(standard_config(auth={"tokens": [VICTIM_TOKEN, ATTACKER_TOKEN]}, interceptors=interceptors))
    victim_session = "modern:static-token-1" if era == "2026-07-28" else "victim-session"
    spoofed = {
        "principal": {"type": "user", "id": "static-token-1"},
        "sessionId": victim_session,
        "session_id": victim_session,
        "server": "elsewhere",
        "traceId": "trace-7",
        "timestamp": "2026-09-01T10:00:00Z",
    }
    whoami = {"method": "tools/call", "params": {"name": "echo", "arguments": {"text": WHOAMI}}}
    port = free_tcp_port()
    url = f"http://127.0.0.1:{port}/mcp"
    argv = cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}")
    async with running(argv, port=port, env=gateway_env(), label="HTTP gateway with two tokens"):
        with anyio.fail_after(60):
            async with _client(url, ATTACKER_TOKEN, era) as attacker:
                own = json.loads(text_of(await attacker.call_tool("echo", {"text": WHOAMI})))  # budget: 1
                invoked = await raw_request(
                    attacker,
                    "interceptor/invoke",
                    {
                        "name": "stamp-context",
                        "event": "tools/call",
                        "phase": "request",
                        "payload": whoami,
                        "context": spoofed,
                    },
                )
                chained = await raw_request(  # rate-limit runs in the chain: budget 2
                    attacker,
                    "interceptor/executeChain",
                    {"event": "tools/call", "phase": "request", "payload": whoami, "context": spoofed},
                )
                verdicts = [  # budget 3, then over
                    await raw_request(
                        attacker,
                        "interceptor/invoke",
                        {
                            "name": "rate-limit",
                            "event": "tools/call",
                            "phase": "request",
                            "payload": whoami,
                            "context": spoofed,
                        },
                    )
                    for _ in range(2)
                ]
                with pytest.raises(MCPError) as limited:
                    await attacker.call_tool("echo", {"text": "attacker"})
            async with _client(url, VICTIM_TOKEN, era) as victim:
                answered = await victim.call_tool("echo", {"text": "victim"})
    contexts = [json.loads(invoked["payload"]["params"]["arguments"]["text"])]
    contexts.append(json.loads(chained["finalPayload"]["params"]["arguments"]["text"]))
    assert own["principal"] == {"type": "user", "id": "static-token-2"}
    assert own["server"] == "e2e"
    assert own["sessionId"] != victim_session
    for context in contexts:
        assert {key: context.get(key) for key in ("principal", "sessionId", "server")} == {
            key: own[key] for key in ("principal", "sessionId", "server")
        }
        assert (context["traceId"], context["timestamp"]) == ("trace-7", "2026-09-01T10:00:00Z")  # correlation only
        assert "session_id" not in context
    assert [verdict["valid"] for verdict in verdicts] == [True, False]
    assert "static-token-2" in verdicts[1]["messages"][0]["message"]
    assert (limited.value.code, limited.value.data["interceptor"]) == (-32602, "rate-limit")
    assert text_of(answered) == "victim"


def _client(url: str, token: str, era: str) -> Client:
    return Client(http_transport(url, headers={"Authorization": f"Bearer {token}"}), mode=era)


# --------------------------------------------------------------------------- transparency


async def test_unknown_method_and_unknown_result_fields_pass_through(s: Session) -> None:
    with anyio.fail_after(30):
        result = await raw_request(s.client, "x-e2e/echo", {"anything": [1, {"deep": True}], "futureParam": "x"})
    result.pop("_meta", None)  # 2026-07-28 results carry the upstream's serverInfo stamp
    result.pop("resultType", None)
    assert result == {
        "echoed": {"anything": [1, {"deep": True}], "futureParam": "x"},
        "futureField": {"nested": [1, 2, 3]},
        "server": "e2e-upstream",
    }


async def test_upstream_log_notification_reaches_a_legacy_client(s: Session) -> None:
    if s.era != "legacy":
        pytest.skip("see test_upstream_log_notification_reaches_a_modern_client")
    with anyio.fail_after(30):
        result = await s.client.call_tool("log", {"message": "hello from upstream"})
        await s.callbacks.logged.wait()
    assert text_of(result) == "logged"
    assert [(p.level, p.logger, p.data) for p in s.callbacks.logs] == [("info", "e2e", "hello from upstream")]


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_upstream_log_notification_reaches_a_modern_client(
    transport: str, standard_file: Path, standard_http: str
) -> None:
    callbacks = Callbacks()
    target = Target(transport, standard_file, standard_http)
    with anyio.fail_after(30):
        async with target.client("2026-07-28", logging_callback=callbacks.logging, log_level="debug") as client:
            result = await client.call_tool("log", {"message": "hello from upstream"})
            with anyio.move_on_after(3):  # a direct server delivers it before the result: 3 s is generous
                await callbacks.logged.wait()
    assert text_of(result) == "logged"
    assert [(p.level, p.logger, p.data) for p in callbacks.logs] == [("info", "e2e", "hello from upstream")]


async def test_each_legacy_http_session_gets_its_own_upstream_session_reused_across_calls(standard_http: str) -> None:
    target = Target("http", Path(), standard_http)
    with anyio.fail_after(60):
        async with target.client("legacy") as first, target.client("legacy") as second:
            first_pids = {text_of(await first.call_tool("pid", {})) for _ in range(3)}
            second_pids = {text_of(await second.call_tool("pid", {})) for _ in range(3)}
        async with target.client("2026-07-28") as modern_a, target.client("2026-07-28") as modern_b:
            modern_pids = {text_of(await c.call_tool("pid", {})) for c in (modern_a, modern_b)}
    assert len(first_pids) == 1  # opened once, reused
    assert len(second_pids) == 1
    assert first_pids != second_pids  # one upstream session per downstream legacy session
    assert len(modern_pids) == 1  # 2026-07-28 requests are self-contained: one shared connection
    assert modern_pids.isdisjoint(first_pids | second_pids)


@pytest.mark.parametrize("code", [-32000, -32099])
async def test_upstream_errors_pass_through_with_code_message_and_data(s: Session, code: int) -> None:
    """-32000 too: it is the dispatcher's connection-closed code, but upstreams use it for their own errors."""
    with anyio.fail_after(30):
        with pytest.raises(MCPError) as failed:
            await raw_request(s.client, "x-e2e/fail", {"code": code, "message": "custom failure", "data": {"k": 1}})
    assert (failed.value.code, failed.value.message, failed.value.data) == (code, "custom failure", {"k": 1})


async def test_logging_set_level_is_method_not_found_when_no_upstream_logs(s: Session) -> None:
    """The upstream has no logging capability, so it (and the gateway, which advertises none) answers -32601."""
    with anyio.fail_after(30), pytest.raises(MCPError) as refused:
        await raw_request(s.client, "logging/setLevel", {"level": "info"})
    assert (refused.value.code, refused.value.message) == (-32601, "Method not found")
