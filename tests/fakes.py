"""Test doubles shared by the core SDK's tests.

`FakeSource` is the executor's `Source` built from plain async functions (no mcp at all);
`RawHost` is a remote interceptor host that answers with whatever raw JSON a test gives it
(malformed descriptors, malformed results); `MethodRecorder` is a server middleware that
records every method a host receives; `connect` opens an in-memory `mcp.Client` in one era.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn
from mcp import Client
from mcp.client._memory import InMemoryTransport
from mcp.server import MCPServer, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.server.extension import Extension, MethodBinding
from mcp_types import Request
from pydantic import TypeAdapter

from mcp_interceptors.executor import Call
from mcp_interceptors.planning import Entry, Overrides
from mcp_interceptors.protocol.descriptors import InterceptorDescriptor
from mcp_interceptors.protocol.events import EXTENSION_ID
from mcp_interceptors.protocol.invoke import RawParams
from mcp_interceptors.protocol.results import InterceptorResult, MutationResult, ValidationMessage, ValidationResult

#: The three in-memory ways to reach a server: legacy JSON-RPC, modern direct dispatcher, modern JSON-RPC.
ERAS = ("legacy", "2026-07-28", "2026-07-28-jsonrpc")

Handler = Callable[[Call], Awaitable[Any]]


def connect(server: Any, era: str, **kwargs: Any) -> Client:
    """An in-memory client for `server` in one protocol era (see `ERAS`)."""
    if era == "2026-07-28-jsonrpc":
        return Client(InMemoryTransport(server), **kwargs)
    return Client(server, mode=era, **kwargs)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- descriptors and entries


def descriptor(
    name: str,
    type: str = "validation",
    events: Sequence[str] = ("tools/call",),
    phase: str = "both",
    **fields: Any,
) -> InterceptorDescriptor:
    """A descriptor from wire-style fields; `phase="both"` expands to two hook entries."""
    body: dict[str, Any] = {"name": name, "type": type, "hooks": [{"events": list(events), "phase": phase}]}
    body.update(fields)
    return InterceptorDescriptor.model_validate(body)


def entry(
    d: InterceptorDescriptor, source: str = "fake", host_order: int = 1, overrides: Overrides | None = None
) -> Entry:
    return Entry(descriptor=d, source=source, host_order=host_order, overrides=overrides)


# --------------------------------------------------------------------------- FakeSource


@dataclass
class FakeSource:
    """A `Source` from plain async functions `name -> async (Call) -> result`; records every call."""

    handlers: Mapping[str, Handler]
    calls: list[Call] = field(default_factory=list)

    async def invoke(self, call: Call) -> InterceptorResult:
        self.calls.append(call)
        result: InterceptorResult = await self.handlers[call.name](call)
        return result

    @property
    def names(self) -> list[str]:
        return [call.name for call in self.calls]


def verdict(valid: bool, severity: str | None = None, *messages: tuple[str, str]) -> Handler:
    """A validator handler returning a fixed verdict; `messages` are `(severity, text)` pairs."""

    async def handler(call: Call) -> ValidationResult:
        items = tuple(ValidationMessage(message=text, severity=sev) for sev, text in messages) or None
        return ValidationResult(interceptor=call.name, phase=call.phase, valid=valid, severity=severity, messages=items)

    return handler


def set_key(key: str, value: Any) -> Handler:
    """A mutator handler returning a copy of the payload with `key` set."""

    async def handler(call: Call) -> MutationResult:
        return MutationResult(
            interceptor=call.name, phase=call.phase, modified=True, payload={**call.payload, key: value}
        )

    return handler


def unchanged() -> Handler:
    async def handler(call: Call) -> MutationResult:
        return MutationResult(interceptor=call.name, phase=call.phase, modified=False, payload=call.payload)

    return handler


def crash(exc: Exception | None = None) -> Handler:
    async def handler(call: Call) -> InterceptorResult:
        raise exc if exc is not None else RuntimeError(f"{call.name} crashed")

    return handler


# --------------------------------------------------------------------------- raw remote host


class RawHost(Extension):
    """A remote host that answers `interceptors/list` and `interceptor/invoke` with raw JSON.

    `listing` is returned verbatim as `interceptors`; `results[name]` is either a dict returned
    verbatim or a function of the invoke params. Every invoke's params are recorded.
    """

    identifier = EXTENSION_ID

    def __init__(self, listing: Any, results: Mapping[str, Any] | None = None) -> None:
        self.listing = listing
        self.results = dict(results or {})
        self.invocations: list[dict[str, Any]] = []

    def settings(self) -> dict[str, Any]:
        return {}

    def methods(self) -> Sequence[MethodBinding]:
        return [
            MethodBinding(method="interceptors/list", params_type=RawParams, handler=self._list),
            MethodBinding(method="interceptor/invoke", params_type=RawParams, handler=self._invoke),
        ]

    async def _list(self, ctx: ServerRequestContext[Any, Any], params: RawParams) -> dict[str, Any]:
        return {"interceptors": self.listing}

    async def _invoke(self, ctx: ServerRequestContext[Any, Any], params: RawParams) -> dict[str, Any]:
        raw = {k: v for k, v in (ctx.params or {}).items() if k != "_meta"}
        self.invocations.append(raw)
        answer = self.results[raw["name"]]
        result: dict[str, Any] = answer(raw) if callable(answer) else answer
        return result

    def server(self) -> MCPServer[Any]:
        return MCPServer("raw-host", extensions=[self])


# --------------------------------------------------------------------------- method recorder


@dataclass
class MethodRecorder:
    """A server middleware recording `(method, params)` of every request and notification a host receives."""

    received: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        self.received.append((ctx.method, dict(ctx.params or {})))
        return await call_next(ctx)

    @property
    def methods(self) -> list[str]:
        return [method for method, _ in self.received]

    def params_of(self, method: str) -> list[dict[str, Any]]:
        return [params for m, params in self.received if m == method]


# --------------------------------------------------------------------------- raw JSON-RPC calls


class RawRequest(Request[dict[str, Any] | None, str]):
    """Any method with any params: lets a test send what a typed client never would."""

    method: str
    params: dict[str, Any] | None = None


_RAW_RESULT: Any = TypeAdapter(dict[str, Any])


async def raw_call(client: Client, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Send `method` with raw `params`; JSON-RPC errors raise `MCPError`."""
    result: dict[str, Any] = await client.session.send_request(RawRequest(method=method, params=params), _RAW_RESULT)
    return result


# --------------------------------------------------------------------------- Streamable HTTP in a task


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@asynccontextmanager
async def serve_http(app: Any) -> AsyncIterator[str]:
    """Serve an ASGI app with uvicorn on a free loopback port inside this task group; yields the MCP URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical", lifespan="on"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        with anyio.fail_after(10):
            while not server.started:  # noqa: ASYNC110 - uvicorn exposes only a flag; polled under fail_after
                await anyio.sleep(0.01)
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            server.should_exit = True
