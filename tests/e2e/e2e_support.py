"""Shared pieces of the end-to-end tests: config builders, the gateway child's environment, and
small client helpers (raw requests, a recording sampler, a text extractor).

The gateway runs as `python -m mcp_interceptors gateway` with this folder on PYTHONPATH, so
configs written to a temp folder can load `e2e_hosts:...` and start `e2e_upstream.py`.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mcp_types as types
import yaml
from helpers import child_env, cli_argv, free_tcp_port, running, stderr_log, stdio_transport
from mcp import Client
from mcp.client import ClientRequestContext
from pydantic import TypeAdapter

from mcp_interceptors.protocol.invoke import RawParams

E2E_DIR = Path(__file__).resolve().parent
EXAMPLES_DIR = E2E_DIR.parent.parent / "examples"
UPSTREAM = str(E2E_DIR / "e2e_upstream.py")
INTERCEPTOR_SERVER = str(E2E_DIR / "e2e_interceptor_server.py")
ERAS = ["legacy", "2026-07-28"]
#: The `write_config` fixture: a config dict (or YAML text) in, the written file's path out.
ConfigWriter = Callable[..., Path]
_RAW: Any = TypeAdapter(dict[str, Any])


def upstream_entry(**extra: Any) -> dict[str, Any]:
    """A stdio upstream entry running the e2e upstream server."""
    return {"command": sys.executable, "args": [UPSTREAM], **extra}


def standard_config(**overrides: Any) -> dict[str, Any]:
    """One e2e upstream behind the standard e2e guards; `overrides` replace top-level keys."""
    config: dict[str, Any] = {
        "upstreams": {"e2e": upstream_entry()},
        "interceptors": {"hosts": [{"module": "e2e_hosts:host"}]},
        "expose_execute_chain": True,
        # The test host's interceptors are invoked by clients (conformance-style): trusted, as `shared` says.
        "client_interceptor_methods": "shared",
    }
    config.update(overrides)
    return config


def write_yaml(path: Path, config: dict[str, Any] | str) -> Path:
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config, sort_keys=False))
    return path


def gateway_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return child_env(extra, pythonpath=[E2E_DIR])


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class RawRequest(types.Request[RawParams, str]):
    method: str
    params: RawParams


async def raw_request(client: Client, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """Any request, answered as a plain dict (unknown fields kept)."""
    result: dict[str, Any] = await client.session.send_request(
        RawRequest(method=method, params=RawParams.model_validate(params)), _RAW
    )
    return result


def text_of(result: types.CallToolResult) -> str:
    assert len(result.content) == 1, result
    content = result.content[0]
    assert isinstance(content, types.TextContent), result
    return content.text


@dataclass
class Sampler:
    """A sampling callback that answers "42" and records what it was asked."""

    questions: list[str] = field(default_factory=list)

    async def __call__(self, ctx: ClientRequestContext, params: types.CreateMessageRequestParams) -> Any:
        content = params.messages[0].content
        assert isinstance(content, types.TextContent)
        self.questions.append(content.text)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="42"), model="e2e-model"
        )


@dataclass
class Target:
    """One way to reach a gateway: over stdio (each client spawns one) or at a running HTTP URL."""

    transport: str
    config: Path
    url: str | None = None

    @asynccontextmanager
    async def client(self, mode: str, env: dict[str, str] | None = None, **kwargs: Any) -> AsyncIterator[Client]:
        if self.transport == "stdio":
            argv = cli_argv("gateway", "--config", str(self.config))
            with stderr_log("stdio gateway") as log:
                async with Client(stdio_transport(argv, log, env=env or gateway_env()), mode=mode, **kwargs) as client:
                    yield client
        else:
            assert self.url is not None
            async with Client(self.url, mode=mode, **kwargs) as client:
                yield client


@asynccontextmanager
async def fresh_gateway(
    transport: str, config: Path, mode: str, env: dict[str, str] | None = None, **kwargs: Any
) -> AsyncIterator[Client]:
    """A client of a gateway of its own (stdio: spawned by the client; http: a process for this block), the
    gateway run with `env` (default `gateway_env()`)."""
    if transport == "stdio":
        async with Target("stdio", config).client(mode, env, **kwargs) as client:
            yield client
        return
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}")
    async with (
        running(argv, port=port, env=env or gateway_env(), label="HTTP gateway"),
        Client(f"http://127.0.0.1:{port}/mcp", mode=mode, **kwargs) as client,
    ):
        yield client
