"""Guard test helpers: guards in an in-process chain; the real CLI gateway fronting `guards_upstream.py`,
and guards served standalone.

The last two run as subprocesses (`python -m mcp_interceptors gateway --config ...` / `serve --guard ...`) that an
`mcp.Client` spawns over stdio; their stderr is captured and shown when a test fails.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import yaml
from helpers import child_env, cli_argv, stderr_log, stdio_transport
from mcp import Client

from mcp_interceptors import Chain, ChainResult, InterceptorHost, ValidationResult
from mcp_interceptors.host import Invocation
from mcp_interceptors.protocol.invoke import InvocationContext

GUARDS_DIR = Path(__file__).resolve().parent
UPSTREAM = str(GUARDS_DIR / "guards_upstream.py")
ERAS = ["legacy", "2026-07-28"]
#: Generous: the gateway imports, starts its upstreams and discovers on a noisy 2-core machine.
E2E_TIMEOUT_S = 60


def upstream(name: str = "guards-upstream") -> dict[str, Any]:
    return {"command": sys.executable, "args": [UPSTREAM], "env": {"GUARDS_NAME": name}}


def gateway_config(
    guards: Sequence[Mapping[str, Any]], *, upstreams: Mapping[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    """A gateway config fronting one upstream (or `upstreams`) with these built-in guards."""
    config: dict[str, Any] = {
        "upstreams": dict(upstreams or {"notes": upstream()}),
        "interceptors": {"guards": [dict(g) for g in guards]},
    }
    config.update(extra)
    return config


@asynccontextmanager
async def gateway_client(
    tmp_path: Path, config: Mapping[str, Any], *, mode: str, **kwargs: Any
) -> AsyncIterator[Client]:
    """An mcp client talking to the real CLI gateway over stdio."""
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
    with stderr_log("gateway") as log:
        transport = stdio_transport(cli_argv("gateway", "--config", str(path)), log, env=child_env())
        async with Client(transport, mode=mode, **kwargs) as client:
            yield client


@asynccontextmanager
async def served_client(
    guards: Mapping[str, Mapping[str, Any] | None], *, mode: str = "legacy"
) -> AsyncIterator[Client]:
    """An mcp client talking to `mcp-interceptors serve --guard NAME ...` over stdio."""
    argv = ["serve"]
    for name, config in guards.items():
        argv += ["--guard", name]
        if config is not None:
            argv += ["--config-json", f"{name}={json.dumps(config)}"]
    with stderr_log("serve") as log:
        async with Client(stdio_transport(cli_argv(*argv), log, env=child_env()), mode=mode) as client:
            yield client


def invocation(
    payload: Any,
    *,
    event: str = "tools/call",
    phase: str = "request",
    config: Mapping[str, Any] | None = None,
    **context: Any,
) -> Invocation:
    """An `Invocation` as a host hands it to a handler (for calling guard internals directly)."""
    ctx = InvocationContext.model_validate(context) if context else None
    return Invocation("guard", event, phase, payload, dict(config or {}), ctx)  # type: ignore[arg-type]


def tool_call(tool: str, /, **arguments: Any) -> dict[str, Any]:
    return {"method": "tools/call", "params": {"name": tool, "arguments": arguments}}


async def run_chain(
    host: InterceptorHost,
    event: str,
    phase: str,
    payload: Any,
    *,
    sinks: bool = False,
    config: Mapping[str, Mapping[str, Any]] | None = None,
    **context: Any,
) -> ChainResult:
    """Run one guard host in a server-role chain (the gateway's directions), as `Chain.add_local` does."""
    chain = Chain(role="server", sinks=sinks)
    chain.add_local(host)
    return await chain.execute(event, phase, payload, context=context or None, config=config)  # type: ignore[arg-type]


def messages(result: ChainResult) -> list[tuple[str | None, str]]:
    """`(path, message)` of every validation message in the chain's results."""
    return [(m.path, m.message) for r in result.results if isinstance(r, ValidationResult) for m in (r.messages or ())]
