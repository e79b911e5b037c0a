"""`InterceptingClient` around a real `MCPServer` (tools, prompts, resources, sampling, roots, elicitation).

Client features (sampling, elicitation, roots) are server-initiated: in the legacy era they are
requests mid-call, in the 2026-07-28 era `InputRequiredResult` rounds. The client's chain governs
them with swapped roles (spec §5.1) in both.
"""

from __future__ import annotations

from typing import Annotated, Any

import anyio
import pytest
from fakes import ERAS
from mcp import MCPDeprecationWarning, MCPError
from mcp.client._memory import InMemoryTransport
from mcp.server import MCPServer
from mcp.server.mcpserver import Elicit, ListRoots, Resolve, Sample
from mcp_types import (
    CreateMessageResult,
    ElicitResult,
    ListRootsResult,
    Root,
    SamplingMessage,
    TextContent,
)
from pydantic import BaseModel

from mcp_interceptors import Chain, InterceptingClient, InterceptorHost, Invocation, MutationResult, guards

pytestmark = pytest.mark.anyio


class Answer(BaseModel):
    ok: bool


def ask_llm(prompt: str) -> Sample:
    return Sample([SamplingMessage(role="user", content=TextContent(type="text", text=prompt))], max_tokens=20)


def want_roots() -> ListRoots:
    return ListRoots()


def confirm(question: str) -> Elicit[Answer]:
    return Elicit(question, Answer)


class App:
    """The governed MCP server, recording what its tools actually received."""

    def __init__(self) -> None:
        self.tool_calls: list[tuple[str, Any]] = []
        server = MCPServer("app")

        @server.tool(description="Echo text")
        async def echo(text: str) -> str:
            self.tool_calls.append(("echo", text))
            return f"echo: {text}"

        @server.tool(description="Internal maintenance")
        async def internal() -> str:
            return "internal"

        @server.tool(description="Ask the client's LLM")
        async def ask(prompt: str, answer: Annotated[CreateMessageResult, Resolve(ask_llm)]) -> str:
            self.tool_calls.append(("ask", prompt))
            assert isinstance(answer.content, TextContent)
            return f"LLM answered: {answer.content.text}"

        @server.tool(description="Report the client's roots")
        async def where(roots: Annotated[ListRootsResult, Resolve(want_roots)]) -> str:
            return ",".join(str(root.uri) for root in roots.roots)

        @server.tool(description="Ask the user to confirm")
        async def sure(question: str, answer: Annotated[Answer, Resolve(confirm)]) -> str:
            return f"confirmed={answer.ok}"

        @server.prompt()
        def greet(name: str) -> str:
            return f"Hello {name}"

        @server.resource("res://doc", name="doc")
        def doc() -> str:
            return "top secret document"

        @server.resource("res://readme", name="readme")
        def readme() -> str:
            return "public readme"

        @server.resource("res://user/{user}", name="user")
        def user(user: str) -> str:
            return f"user {user}"

        self.server = server


class Guards:
    """The client's interceptors, recording `(event, phase, interceptor)` in invocation order."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []
        self.payloads: dict[tuple[str, str, str], Any] = {}
        host = InterceptorHost("client-guards")
        self.host = host

        def note(inv: Invocation) -> None:
            self.seen.append((inv.event, inv.phase, inv.name))
            self.payloads[(inv.event, inv.phase, inv.name)] = inv.payload

        @host.mutator("redact", events=["tools/call"], phase="request")
        async def redact(inv: Invocation) -> Any:
            note(inv)
            args = inv.payload["params"].get("arguments") or {}
            if "text" in args:
                args["text"] = args["text"].replace("password", "[REDACTED]")
            return inv.payload

        @host.validator("no-rm", events=["tools/call"], phase="request")
        async def no_rm(inv: Invocation) -> bool:
            note(inv)
            return "rm -rf" not in str(inv.payload)

        @host.validator("no-secrets-in", events=["tools/call", "resources/read"], phase="response")
        async def no_secrets_in(inv: Invocation) -> bool:
            note(inv)
            return "secret" not in str(inv.payload)

        @host.mutator("stamp", events=["tools/call"], phase="response")
        async def stamp(inv: Invocation) -> Any:
            note(inv)
            for item in inv.payload.get("content", []):
                if item.get("type") == "text":
                    item["text"] += " [checked]"
            return inv.payload

        @host.mutator("hide-internal", events=["tools/list"], phase="response")
        async def hide_internal(inv: Invocation) -> Any:
            note(inv)
            inv.payload["tools"] = [t for t in inv.payload["tools"] if t["name"] != "internal"]
            return inv.payload

        @host.mutator("formal", events=["prompts/get"], phase="request")
        async def formal(inv: Invocation) -> Any:
            note(inv)
            inv.payload["params"]["arguments"]["name"] = "Dr. " + inv.payload["params"]["arguments"]["name"]
            return inv.payload

        @host.validator("no-forbidden-prompt", events=["sampling/createMessage"], phase="request")
        async def no_forbidden_prompt(inv: Invocation) -> bool:
            note(inv)
            return "forbidden" not in str(inv.payload)

        @host.mutator("polite", events=["sampling/createMessage"], phase="request")
        async def polite(inv: Invocation) -> Any:
            note(inv)
            inv.payload["params"]["messages"][0]["content"]["text"] += ", please"
            return inv.payload

        @host.mutator("sign-answer", events=["sampling/createMessage"], phase="response")
        async def sign_answer(inv: Invocation) -> Any:
            note(inv)
            inv.payload["content"]["text"] += " -- signed"
            return inv.payload

        @host.validator("answer-check", events=["sampling/createMessage"], phase="response")
        async def answer_check(inv: Invocation) -> bool:
            note(inv)
            return True

        @host.mutator("hide-roots", events=["roots/list"], phase="response")
        async def hide_roots(inv: Invocation) -> Any:
            note(inv)
            inv.payload["roots"] = [r for r in inv.payload["roots"] if "private" not in r["uri"]]
            return inv.payload

        @host.validator("elicit-log", events=["elicitation/create"], phase="both", mode="audit")
        async def elicit_log(inv: Invocation) -> bool:
            note(inv)
            return False

        @host.validator("lists", events=["prompts/list", "resources/list", "resources/templates/list"], phase="both")
        async def lists(inv: Invocation) -> bool:
            note(inv)
            return True


async def llm(context: Any, params: Any) -> CreateMessageResult:
    prompt = params.messages[0].content.text
    return CreateMessageResult(role="assistant", content=TextContent(type="text", text=f"'{prompt}'"), model="fake")


async def roots(context: Any) -> ListRootsResult:
    return ListRootsResult(roots=[Root(uri="file:///work"), Root(uri="file:///private")])


async def elicit(context: Any, params: Any) -> ElicitResult:
    return ElicitResult(action="accept", content={"ok": True})


@pytest.fixture(params=ERAS)
def era(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def client_for(app: App, guards: Guards, era: str, **kwargs: Any) -> InterceptingClient:
    chain = Chain(role="client")
    chain.add_local(guards.host)
    callbacks: dict[str, Any] = {"sampling_callback": llm, "list_roots_callback": roots, "elicitation_callback": elicit}
    if era == "2026-07-28-jsonrpc":
        return InterceptingClient(InMemoryTransport(app.server), chain, **callbacks, **kwargs)
    return InterceptingClient(app.server, chain, mode=era, **callbacks, **kwargs)


def client_in(app: App, chain: Chain, era: str, **kwargs: Any) -> InterceptingClient:
    if era == "2026-07-28-jsonrpc":
        return InterceptingClient(InMemoryTransport(app.server), chain, **kwargs)
    return InterceptingClient(app.server, chain, mode=era, **kwargs)


def text_of(result: Any) -> str:
    content = result.content[0]
    assert isinstance(content, TextContent)
    return content.text


# --------------------------------------------------------------------------- server features


async def test_call_tool_request_is_sending_and_response_is_receiving(era: str) -> None:
    app, guards = App(), Guards()
    with anyio.fail_after(10):
        async with client_for(app, guards, era) as client:
            result = await client.call_tool("echo", {"text": "my password"})
    assert app.tool_calls == [("echo", "my [REDACTED]")]  # the request mutation reached the server
    assert text_of(result) == "echo: my [REDACTED] [checked]"
    # R38: sending = mutate, then validate (the validator sees the mutated request)
    # R39: receiving = validate, then mutate
    assert guards.seen == [
        ("tools/call", "request", "redact"),
        ("tools/call", "request", "no-rm"),
        ("tools/call", "response", "no-secrets-in"),
        ("tools/call", "response", "stamp"),
    ]
    validated = guards.payloads[("tools/call", "request", "no-rm")]
    assert validated["params"]["arguments"]["text"] == "my [REDACTED]"


async def test_blocked_call_tool_raises_the_chain_error_and_never_reaches_the_server(era: str) -> None:
    app, guards = App(), Guards()
    with anyio.fail_after(10):
        async with client_for(app, guards, era) as client:
            with pytest.raises(MCPError) as caught:
                await client.call_tool("echo", {"text": "rm -rf /"})
    assert app.tool_calls == []
    assert caught.value.code == -32602
    assert caught.value.data == {
        "interceptor": "no-rm",
        "reason": "validation failed",
        "event": "tools/call",
        "phase": "request",
        "status": "validation_failed",
    }


async def test_response_validator_blocks_a_resource_read(era: str) -> None:
    app, guards = App(), Guards()
    with anyio.fail_after(10):
        async with client_for(app, guards, era) as client:
            readme = await client.read_resource("res://readme")
            with pytest.raises(MCPError) as caught:
                await client.read_resource("res://doc")
    assert readme.contents[0].text == "public readme"  # type: ignore[union-attr]
    assert caught.value.code == -32602
    assert caught.value.data["interceptor"] == "no-secrets-in"
    assert caught.value.data["phase"] == "response"


async def test_get_prompt_and_list_tools_are_governed(era: str) -> None:
    app, guards = App(), Guards()
    with anyio.fail_after(10):
        async with client_for(app, guards, era) as client:
            prompt = await client.get_prompt("greet", {"name": "Ana"})
            tools = await client.list_tools()
            await client.list_prompts()
            await client.list_resources()
            await client.list_resource_templates()
    assert prompt.messages[0].content.text == "Hello Dr. Ana"  # type: ignore[union-attr]
    assert sorted(t.name for t in tools.tools) == ["ask", "echo", "sure", "where"]
    assert [s for s in guards.seen if s[2] == "lists"] == [
        (event, phase, "lists")
        for event in ("prompts/list", "resources/list", "resources/templates/list")
        for phase in ("request", "response")
    ]


async def test_cursor_and_meta_are_part_of_the_governed_request(era: str) -> None:
    """`list_tools(cursor=...)` and `call_tool(..., meta=...)` send them as params: validators used to see a
    payload without them, and a mutator's change to them was dropped."""
    app = App()
    seen: list[Any] = []
    received: list[Any] = []
    host = InterceptorHost("params")

    @host.validator("no-evil-cursor", events=["tools/list"], phase="request")
    async def no_evil_cursor(inv: Invocation) -> bool:
        seen.append(inv.payload)
        return bool(inv.payload["params"].get("cursor") != "evil")

    @host.mutator("trace", events=["tools/call"], phase="request")
    async def trace(inv: Invocation) -> Any:
        seen.append(inv.payload)
        return {**inv.payload, "params": {**inv.payload["params"], "_meta": {"trace": "t-1"}}}

    async def record(ctx: Any, call_next: Any) -> Any:
        if ctx.method == "tools/call":
            received.append((ctx.params or {}).get("_meta", {}).get("trace"))
        return await call_next(ctx)

    app.server.middleware.append(record)
    chain = Chain(role="client")
    chain.add_local(host)
    client = client_in(app, chain, era)
    with anyio.fail_after(10):
        async with client:
            with pytest.raises(MCPError) as caught:
                await client.list_tools(cursor="evil")
            await client.call_tool("echo", {"text": "hi"}, meta={"trace": "mine"})
    assert caught.value.data["interceptor"] == "no-evil-cursor"
    assert seen[0] == {"method": "tools/list", "params": {"cursor": "evil"}}
    assert seen[1]["params"]["_meta"] == {"trace": "mine"}
    assert received == ["t-1"]


async def test_empty_arguments_are_part_of_the_governed_request(era: str) -> None:
    """`call_tool(name, {})` sends `arguments: {}`: validators see them as sent, not a payload without them."""
    seen: list[Any] = []
    host = InterceptorHost("params")

    @host.validator("look", events=["tools/call", "prompts/get"], phase="request")
    async def look(inv: Invocation) -> bool:
        seen.append(inv.payload)
        return False  # nothing needs to reach the server

    chain = Chain(role="client")
    chain.add_local(host)
    app = App()
    client = client_in(app, chain, era)
    with anyio.fail_after(10):
        async with client:
            with pytest.raises(MCPError):
                await client.call_tool("echo", {})
            with pytest.raises(MCPError):
                await client.get_prompt("greet", {})
    assert seen == [
        {"method": "tools/call", "params": {"name": "echo", "arguments": {}}},
        {"method": "prompts/get", "params": {"name": "greet", "arguments": {}}},
    ]


# --------------------------------------------------------------------------- client features (roles swap)


async def test_sampling_request_is_receiving_and_response_is_sending(era: str) -> None:
    app, guards = App(), Guards()
    with anyio.fail_after(10):
        async with client_for(app, guards, era) as client:
            result = await client.call_tool("ask", {"prompt": "hello"})
    assert text_of(result) == "LLM answered: 'hello, please' -- signed [checked]"
    sampling = [s for s in guards.seen if s[0] == "sampling/createMessage"]
    assert sampling == [
        ("sampling/createMessage", "request", "no-forbidden-prompt"),  # receiving: validate first
        ("sampling/createMessage", "request", "polite"),
        ("sampling/createMessage", "response", "sign-answer"),  # sending: mutate first
        ("sampling/createMessage", "response", "answer-check"),
    ]
    checked = guards.payloads[("sampling/createMessage", "response", "answer-check")]
    assert checked["content"]["text"].endswith("-- signed")


async def test_blocked_sampling_request_fails_the_tool_call(era: str) -> None:
    app, guards = App(), Guards()
    with anyio.fail_after(10):
        async with client_for(app, guards, era) as client:
            with pytest.raises(MCPError) as caught:
                await client.call_tool("ask", {"prompt": "something forbidden"})
    assert caught.value.code == -32602
    assert caught.value.data["interceptor"] == "no-forbidden-prompt"
    assert caught.value.data["event"] == "sampling/createMessage"
    assert ("sampling/createMessage", "request", "polite") not in guards.seen  # R57: gated


async def test_roots_and_elicitation_are_governed(era: str) -> None:
    app, guards = App(), Guards()
    with anyio.fail_after(10):
        async with client_for(app, guards, era) as client:
            where = await client.call_tool("where", {})
            sure = await client.call_tool("sure", {"question": "really?"})
    assert text_of(where) == "file:///work [checked]"
    assert text_of(sure) == "confirmed=True [checked]"
    assert [s for s in guards.seen if s[0] == "elicitation/create"] == [
        ("elicitation/create", "request", "elicit-log"),
        ("elicitation/create", "response", "elicit-log"),
    ]


async def test_client_context_carries_a_session_id() -> None:
    app, guards = App(), Guards()
    client = client_for(app, guards, "legacy", context={"traceId": "t-1"})
    assert client.context.trace_id == "t-1" and client.context.session_id
    fixed = client_for(app, guards, "legacy", context={"sessionId": "s-1"})
    assert fixed.context.session_id == "s-1"


# --------------------------------------------------------------------------- a mutation that leaves no payload


def chain_of(host: InterceptorHost) -> Chain:
    chain = Chain(role="client")
    chain.add_local(host)
    return chain


def invalid_payload(interceptor: str, event: str, phase: str, detail: str) -> dict[str, Any]:
    return {
        "interceptor": interceptor,
        "reason": "invalid payload",
        "event": event,
        "phase": phase,
        "status": "mutation_failed",
        "detail": detail,
    }


@pytest.mark.parametrize(
    ("replacement", "detail"),
    [
        (None, "the payload is null, not an object"),
        (
            {"method": "tools/list", "params": {"name": "echo", "arguments": {"text": "hi"}}},
            "the payload's method is 'tools/list', not 'tools/call'",
        ),
        (
            {"method": "tools/call", "params": {"name": "echo", "arguments": ["hi"]}},
            "not a valid tools/call request: arguments: Input should be a valid dictionary",
        ),
    ],
)
async def test_mutated_request_that_is_no_tools_call_blocks_and_is_never_sent(
    era: str, replacement: Any, detail: str
) -> None:
    """A null replacement used to send the call without its arguments, a changed `method` was ignored, and bad
    `arguments` raised pydantic's `ValidationError`: each now fails closed naming the mutator (spec §1.2)."""
    app, host = App(), InterceptorHost("bad")

    @host.mutator("rewrite", events=["tools/call"], phase="request")
    async def rewrite(inv: Invocation) -> Any:
        if inv.payload["params"]["arguments"]["text"] == "fine":
            return inv.payload
        return MutationResult(modified=True, payload=replacement)

    client = client_in(app, chain_of(host), era)
    with anyio.fail_after(10):
        async with client:
            with pytest.raises(MCPError) as caught:
                await client.call_tool("echo", {"text": "hi"})
            after = await client.call_tool("echo", {"text": "fine"})  # the client still works
    assert app.tool_calls == [("echo", "fine")]
    assert caught.value.code == -32603
    assert caught.value.data == invalid_payload("rewrite", "tools/call", "request", detail)
    assert text_of(after) == "echo: fine"


async def test_mutated_result_that_is_no_tools_call_result_raises_the_chain_error(era: str) -> None:
    """It used to raise pydantic's `ValidationError`, naming neither the mutator nor the event."""
    app, host = App(), InterceptorHost("bad")

    @host.mutator("mangle", events=["tools/call"], phase="response")
    async def mangle(inv: Invocation) -> Any:
        return {**inv.payload, "content": "not a list"}

    client = client_in(app, chain_of(host), era)
    with anyio.fail_after(10):
        async with client:
            with pytest.raises(MCPError) as caught:
                await client.call_tool("echo", {"text": "hi"})
    assert caught.value.code == -32603
    detail = "not a valid tools/call response: content: Input should be a valid list"
    assert caught.value.data == invalid_payload("mangle", "tools/call", "response", detail)


@pytest.mark.parametrize(
    ("phase", "replacement", "detail"),
    [
        (
            "request",
            {"method": "roots/list", "params": {}},
            "the payload's method is 'roots/list', not 'sampling/createMessage'",
        ),
        (
            "request",
            {"method": "sampling/createMessage", "params": {"messages": "nope", "maxTokens": 5}},
            "not a valid sampling/createMessage request: messages: Input should be a valid list",
        ),
        ("response", {"role": "assistant"}, "not a valid sampling/createMessage response: content: Field required"),
    ],
)
async def test_mutated_sampling_request_or_answer_that_is_no_payload_fails_the_call_naming_the_mutator(
    era: str, phase: str, replacement: Any, detail: str
) -> None:
    """A changed `method` was ignored; a bad question or answer answered the server with a bare `-32602` in the
    handshake era, and crashed the client's call with an `ExceptionGroup` in the 2026-07-28 era."""
    app, host = App(), InterceptorHost("bad")
    asked: list[Any] = []

    @host.mutator("rewrite", events=["sampling/createMessage"], phase=phase)
    async def rewrite(inv: Invocation) -> Any:
        return MutationResult(modified=True, payload=replacement)

    async def model(context: Any, params: Any) -> CreateMessageResult:
        asked.append(params)
        return await llm(context, params)

    client = client_in(app, chain_of(host), era, sampling_callback=model)
    with anyio.fail_after(10):
        async with client:
            with pytest.raises(MCPError) as caught:
                await client.call_tool("ask", {"prompt": "hello"})
    assert len(asked) == (0 if phase == "request" else 1)  # a bad question never reaches the model
    assert caught.value.code == -32603
    assert caught.value.data == invalid_payload("rewrite", "sampling/createMessage", phase, detail)


async def test_sampling_guard_clamps_max_tokens_of_a_request_the_client_receives(era: str) -> None:
    """docs/guards.md: over the cap, `maxTokens` is clamped by `sampling-guard-clamp`. On a client the request
    is received (validate, then mutate), and the validator used to block the call instead."""
    app, asked = App(), []

    async def model(context: Any, params: Any) -> CreateMessageResult:
        asked.append(params.max_tokens)
        return await llm(context, params)

    chain = Chain(role="client")
    chain.add_local(guards.load("sampling-guard", {"max_tokens": 10}))
    with anyio.fail_after(10):
        async with client_in(app, chain, era, sampling_callback=model) as client:
            result = await client.call_tool("ask", {"prompt": "hello"})
    assert asked == [10]  # ask_llm asks for 20
    assert text_of(result) == "LLM answered: 'hello'"


# --------------------------------------------------------------------------- resources/subscribe


def no_secret_subscriptions() -> tuple[InterceptorHost, list[tuple[str, Any]]]:
    host, seen = InterceptorHost("subs"), []

    @host.mutator("lower", events=["resources/subscribe"], phase="request")
    async def lower(inv: Invocation) -> Any:
        return {**inv.payload, "params": {**inv.payload["params"], "uri": inv.payload["params"]["uri"].lower()}}

    @host.validator("no-secret-subscriptions", events=["resources/subscribe"], phase="request")
    async def no_secret(inv: Invocation) -> bool:
        seen.append((inv.phase, inv.payload))
        return "secret" not in inv.payload["params"]["uri"]

    return host, seen


def recording(app: App) -> list[tuple[str, Any]]:
    received: list[tuple[str, Any]] = []

    async def record(ctx: Any, call_next: Any) -> Any:
        if "subscri" in ctx.method:
            received.append((ctx.method, dict(ctx.params or {})))
        return await call_next(ctx)

    app.server.middleware.append(record)
    return received


BLOCKED_SUBSCRIPTION = {
    "interceptor": "no-secret-subscriptions",
    "reason": "validation failed",
    "event": "resources/subscribe",
    "phase": "request",
    "status": "validation_failed",
}


async def test_subscribe_resource_is_governed_and_a_blocked_one_is_never_sent() -> None:
    """`resources/subscribe` is a governed event, but `InterceptingClient` had no `subscribe_resource`:
    the only way was `client.client.subscribe_resource`, around every interceptor."""
    app, (host, seen) = App(), no_secret_subscriptions()
    received = recording(app)
    with anyio.fail_after(10):
        async with client_in(app, chain_of(host), "legacy") as client:
            with pytest.raises(MCPError) as blocked:
                await client.subscribe_resource("res://Secret")
            with pytest.warns(MCPDeprecationWarning), pytest.raises(MCPError) as refused:
                await client.subscribe_resource("res://README")  # sent, as governed: this server refuses it
    assert blocked.value.code == -32602 and blocked.value.data == BLOCKED_SUBSCRIPTION
    assert refused.value.code == -32601  # the server's own answer: the request went out
    assert received == [("resources/subscribe", {"uri": "res://readme"})]
    assert [payload["params"]["uri"] for _, payload in seen] == ["res://secret", "res://readme"]


@pytest.mark.parametrize("era", ["2026-07-28", "2026-07-28-jsonrpc"])
async def test_listen_governs_its_resource_subscriptions_and_a_blocked_one_refuses_the_listen(era: str) -> None:
    """In the 2026-07-28 era a listen stream's `resourceSubscriptions` are its `resources/subscribe`."""
    app, (host, _) = App(), no_secret_subscriptions()
    received = recording(app)
    with anyio.fail_after(10):
        async with client_in(app, chain_of(host), era) as client:
            with pytest.raises(MCPError) as blocked:
                async with client.listen(resource_subscriptions=["res://readme", "res://Secret"]):
                    pass
            async with client.listen(resource_subscriptions=["res://README"], resources_list_changed=True) as sub:
                honored = sub.honored
    assert blocked.value.code == -32602 and blocked.value.data == BLOCKED_SUBSCRIPTION
    assert [method for method, _ in received] == ["subscriptions/listen"]
    assert received[0][1]["notifications"]["resourceSubscriptions"] == ["res://readme"]
    assert honored.resources_list_changed is True


async def test_the_response_chain_sees_the_result_as_the_server_sent_it_without_model_defaults(era: str) -> None:
    app, guards = App(), Guards()
    with anyio.fail_after(10):
        async with client_for(app, guards, era) as client:
            await client.call_tool("echo", {"text": "hello"})
    seen = guards.payloads[("tools/call", "response", "no-secrets-in")]
    # A handshake-era server sends no `resultType`; mcp's model fills one in, which the chain must not see.
    assert ("resultType" in seen) == era.startswith("2026")
    assert seen["content"] == [{"type": "text", "text": "echo: hello"}]
