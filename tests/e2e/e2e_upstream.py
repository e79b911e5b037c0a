"""The upstream MCP server the end-to-end tests put behind the gateway (stdio, `--http PORT`, or legacy
SSE with `--sse PORT PATH`).

Besides ordinary tools (echo, notes, progress, sampling) it has the ones faults and transparency
tests need: `sleep` records its own cancellation so `was_cancelled` can prove it, `crash` kills the
process mid-call, `log` sends `notifications/message`, and the extension method `x-e2e/echo`
answers with fields no spec model knows. With `E2E_PID_DIR` set it writes `<pid>.pid` there.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import anyio
from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import Context, MCPServer, Resolve, Sample
from mcp_types import CreateMessageResult, InputRequiredResult, RequestParams, SamplingMessage, TextContent
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict

NAME = os.environ.get("E2E_NAME", "e2e-upstream")
SCHEME = os.environ.get("E2E_SCHEME", "e2e")  # two of these behind one gateway need distinct ones
NOTES: dict[str, str] = {"welcome": "Hello from the e2e upstream."}
#: token -> set when that `sleep` call's handler was cancelled
CANCELLED: dict[str, anyio.Event] = {}
#: tokens of the `sleep` calls whose handler started
STARTED: set[str] = set()
#: token -> set once a `sleep` (or, as `asking:<token>`, an `ask_after`) handler with that token started
STARTED_EVENTS: dict[str, anyio.Event] = {}


def started(token: str) -> anyio.Event:
    return STARTED_EVENTS.setdefault(token, anyio.Event())


class AnyParams(RequestParams):
    model_config = ConfigDict(extra="allow")


class VendorMethods(Extension):
    """An extension method the gateway has never heard of, answering with unknown fields."""

    identifier = "dev.e2e/vendor"

    def methods(self) -> Sequence[MethodBinding]:
        return [MethodBinding("x-e2e/echo", AnyParams, self._echo), MethodBinding("x-e2e/fail", AnyParams, self._fail)]

    async def _echo(self, ctx: ServerRequestContext[Any, Any], params: AnyParams) -> dict[str, Any]:
        sent = {k: v for k, v in (ctx.params or {}).items() if k != "_meta"}
        return {"echoed": sent, "futureField": {"nested": [1, 2, 3]}, "server": NAME}

    async def _fail(self, ctx: ServerRequestContext[Any, Any], params: AnyParams) -> dict[str, Any]:
        """Answer with exactly the JSON-RPC error the caller describes (`code`, `message`, `data`)."""
        raw = ctx.params or {}
        raise MCPError(int(raw["code"]), str(raw["message"]), raw.get("data"))


server = MCPServer(NAME, version="1.0.0", instructions="The e2e upstream.", extensions=[VendorMethods()])


@server.tool(description="Echo text back.")
async def echo(text: str) -> str:
    return text


@server.tool(description="Save a note.")
async def save_note(name: str, text: str) -> str:
    NOTES[name] = text
    return f"saved {name}"


@server.tool(description="Read a note back exactly as the server stored it.")
async def read_note(name: str) -> str:
    return NOTES.get(name, "<missing>")


@server.tool(description="Delete every note. Dangerous.")
async def delete_everything() -> str:
    NOTES.clear()
    return "deleted"


@server.tool(description="A tool the gateway's response-phase mutator hides from tools/list.")
async def hidden_tool() -> str:
    return "you should not be able to call me"


@server.tool(description="Count down with progress notifications.")
async def countdown(steps: int, ctx: Context) -> str:
    for step in range(steps):
        await ctx.report_progress(step + 1, steps, f"step {step + 1}")
    return "done"


@server.tool(description="Count up with a progress notification every `delay` seconds, then answer `done`.")
async def slow_countdown(steps: int, delay: float, ctx: Context) -> str:
    for step in range(steps):
        await ctx.report_progress(step + 1, steps, f"step {step + 1}")
        await anyio.sleep(delay)  # the call's own pace: a long call whose stream a client may lose
    return "done"


@server.tool(description="Sleep; records whether the handler was cancelled under `token`.")
async def sleep(seconds: float, token: str = "") -> str:
    event = CANCELLED.setdefault(token, anyio.Event())
    STARTED.add(token)
    started(token).set()
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        event.set()
        raise
    return "awake"


@server.tool(description="Whether the `sleep` call with `token` was cancelled (waits up to `wait` seconds).")
async def was_cancelled(token: str, wait: float = 10.0) -> str:
    event = CANCELLED.setdefault(token, anyio.Event())
    with anyio.move_on_after(wait):
        await event.wait()
    if event.is_set():
        return "cancelled"
    return "not cancelled" if token in STARTED else "never started"


@server.tool(description="Exit the process in the middle of the call.")
async def crash() -> str:
    os._exit(3)


@server.tool(description="Send a log message (notifications/message) to the client, then answer.")
async def log(message: str, ctx: Context) -> str:
    await ctx.info(message, logger_name="e2e")
    return "logged"


@server.tool(description="The client this server sees: its name, capabilities and protocol version.")
async def whoami(ctx: Context) -> str:
    params = ctx.session.client_params
    capabilities = ctx.client_capabilities
    seen = {
        "client": params.client_info.name if params is not None else None,
        "capabilities": sorted(capabilities.model_dump(exclude_none=True)) if capabilities is not None else [],
        "protocol": ctx.protocol_version,
    }
    return json.dumps(seen)


@server.tool(description="This process's id (tells upstream sessions apart).")
async def pid() -> str:
    return str(os.getpid())


def ask_model(question: str) -> Sample:
    message = SamplingMessage(role="user", content=TextContent(type="text", text=question))
    return Sample([message], max_tokens=50)


@server.tool(description="Ask the client's model a question (sampling).")
async def ask(question: str, answer: Annotated[CreateMessageResult, Resolve(ask_model)]) -> str:
    content = answer.content
    return f"model says: {content.text if isinstance(content, TextContent) else content}"


def ask_first(first: str) -> Sample:
    return ask_model(first)


def ask_second(second: str) -> Sample:
    return ask_model(second)


@server.tool(description="Ask the client's model two questions at once (one `input_required` round).")
async def ask_two(
    first: str,
    second: str,
    one: Annotated[CreateMessageResult, Resolve(ask_first)],
    two: Annotated[CreateMessageResult, Resolve(ask_second)],
) -> str:
    return "answered both"


@server.tool(description="Once the `sleep` call with `token` runs, ask the client's model (sampling).")
async def ask_after(question: str, token: str, ctx: Context) -> str:
    started(f"asking:{token}").set()
    with anyio.fail_after(20):
        await started(token).wait()
    message = SamplingMessage(role="user", content=TextContent(type="text", text=question))
    answer = await ctx.session.create_message([message], max_tokens=50)
    content = answer.content
    return f"model says: {content.text if isinstance(content, TextContent) else content}"


@server.tool(description="Ask the client's model; note under `name` what came back (`wait_started` on `noted:<name>`).")
async def ask_and_note(question: str, name: str, ctx: Context) -> str:
    message = SamplingMessage(role="user", content=TextContent(type="text", text=question))
    try:
        await ctx.session.create_message([message], max_tokens=50)
        NOTES[name] = json.dumps({"answered": True})
    except MCPError as exc:
        NOTES[name] = json.dumps({"code": exc.error.code, "data": exc.error.data})
    started(f"noted:{name}").set()
    return NOTES[name]


@server.tool(description="Send the client to `url` (URL-mode elicitation) and answer the action it took.")
async def visit(url: str, ctx: Context) -> str | InputRequiredResult:
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:  # 2026-07-28 URL elicitation has no elicitationId
        answers = ctx.input_responses
        if not answers or "visit" not in answers:
            request = {"method": "elicitation/create", "params": {"mode": "url", "message": "Sign in", "url": url}}
            return InputRequiredResult(input_requests={"visit": request}, request_state="visit")
        answer = answers["visit"]
        return str(answer["action"] if isinstance(answer, dict) else getattr(answer, "action", answer))
    result = await ctx.elicit_url("Sign in", url, "visit-1")
    return result.action


@server.tool(description="Wait up to `wait` seconds for a `sleep` (or `asking:` ask_after) with `token` to start.")
async def wait_started(token: str, wait: float = 10.0) -> str:
    with anyio.move_on_after(wait):
        await started(token).wait()
    return "started" if started(token).is_set() else "never started"


@server.resource(SCHEME + "://{name}", description="A note by name.")
async def note(name: str) -> str:
    return NOTES.get(name, "")


@server.prompt(description="Summarise a note.")
async def summarise(name: str) -> str:
    return f"Summarise this note: {NOTES.get(name, '')}"


def serve_one_era(refused: str) -> None:
    """Serve on stdio as a server of one era only: `refused` (the other era's handshake) is unknown to it."""

    async def refuse(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == refused:
            raise MCPError(-32601, "Method not found", ctx.method)
        return await call_next(ctx)

    server.middleware.insert(0, refuse)
    server.run("stdio")


def meet(rendezvous: str) -> None:
    """`DIR:ME:OTHER`: announce ME in DIR, then wait for OTHER before serving, exiting after 20 s without
    it. Two upstreams meeting this way can start only if their client starts both at once."""
    folder, me, other = rendezvous.split(":")
    Path(folder, me).touch()
    deadline = time.monotonic() + 20
    while not Path(folder, other).exists():
        if time.monotonic() > deadline:
            sys.exit(f"{other} never started")
        time.sleep(0.01)


if __name__ == "__main__":
    pid_dir = os.environ.get("E2E_PID_DIR")
    if pid_dir:
        Path(pid_dir, f"{os.getpid()}.pid").write_text(str(os.getpid()))
    if rendezvous := os.environ.get("E2E_RENDEZVOUS"):
        meet(rendezvous)
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", port=int(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "--sse":  # legacy SSE, its event stream at the path given
        server.run("sse", port=int(sys.argv[2]), sse_path=sys.argv[3])
    else:
        server.run("stdio")
