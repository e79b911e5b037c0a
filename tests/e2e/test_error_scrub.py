"""[OURS] The gateway scrubs what no interceptor sees (docs/guards.md, "What no guard sees"): an upstream's
JSON-RPC error, its notifications (log lines, progress messages, resource updates, `list_changed`, its own),
its completion values and `instructions`, and a client's error answer to an upstream's request are redacted
with the chain's `secrets` and `pii` scanners, in both eras, over stdio and HTTP upstreams, whether the guards
redact or deny (an error cannot be blocked). Codes, identifiers and the shape of `data` are kept.
"""

from __future__ import annotations

import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import orjson
import pytest
from e2e_support import E2E_DIR, ERAS, ConfigWriter, fresh_gateway
from helpers import free_tcp_port, running
from mcp import MCPError
from test_tasks import raw_gateway

from mcp_interceptors.audit import SqliteStore

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

LEAKY = str(E2E_DIR / "leaky_upstream.py")
#: `leaky_upstream.UPDATED_URI`: an email in it, kept verbatim (the client reads the resource by it).
UPDATED_URI = "file:///reports/bob@" + "example.com.txt"
#: What `leaky_upstream.LEAK` becomes through the scrub.
SCRUBBED = "[REDACTED:aws_access_key] at postgres://app:[REDACTED:generic_secret]@db.internal, ask [REDACTED:email]"
#: `leaky_upstream.LEAK`, assembled so that this file holds no credential-looking literal.
LEAK_SENT = "AKIA" + "IOSFODNN7EXAMPLQ at postgres://app:hunter2pw@db.internal, ask bob@" + "example.com"
PARTS = ("AKIAIOSFODNN7EXAMPLQ", "hunter2pw", "bob@example.com")


def guards(action: str) -> list[dict[str, Any]]:
    return [{"name": "secrets", "config": {"action": action}}, {"name": "pii", "config": {"action": action}}]


@pytest.mark.parametrize("action", ["redact", "deny"])
@pytest.mark.parametrize("upstream_transport", ["stdio", "http"])
@pytest.mark.parametrize("era", ERAS)
async def test_upstream_error_log_and_progress_are_scrubbed(
    write_config: ConfigWriter, tmp_path: Path, era: str, upstream_transport: str, action: str
) -> None:
    store = tmp_path / "audit.db"
    port = free_tcp_port()
    upstream: dict[str, Any] = {"command": sys.executable, "args": [LEAKY]}
    if upstream_transport == "http":
        upstream = {"url": f"http://127.0.0.1:{port}/mcp"}
    config = write_config(
        {
            "upstreams": {"leaky": upstream},
            "interceptors": {"guards": guards(action)},
            "audit": {"enabled": True, "store": str(store), "key_file": str(tmp_path / "audit-key")},
        }
    )
    logs: list[types.LoggingMessageNotificationParams] = []
    progress: list[str | None] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    with anyio.fail_after(60):
        async with AsyncExitStack() as stack:
            if upstream_transport == "http":
                await stack.enter_async_context(running([sys.executable, LEAKY, "--http", str(port)], port=port))
            client = await stack.enter_async_context(
                fresh_gateway("stdio", config, era, logging_callback=on_log, log_level="debug")
            )
            with pytest.raises(MCPError) as failed:
                await client.call_tool("fail", {}, progress_callback=on_progress)
    error = failed.value.error
    assert (error.code, error.message) == (-32050, "boom: " + SCRUBBED)
    assert error.data == {"detail": SCRUBBED, "count": 3, "nested": [SCRUBBED, 4111111111111111]}
    assert progress == ["progress: " + SCRUBBED]
    assert [log.data for log in logs] == ["log: " + SCRUBBED]
    bodies = [orjson.loads(raw)["body"] for _, raw in SqliteStore(store, create=False).iter_records()]
    text = orjson.dumps(bodies).decode()
    assert "boom: " + SCRUBBED in text
    assert not any(part in text for part in PARTS)


async def test_a_clients_error_answer_reaches_the_upstream_scrubbed(write_config: ConfigWriter) -> None:
    config = write_config(
        {
            "upstreams": {"leaky": {"command": sys.executable, "args": [LEAKY]}},
            "interceptors": {"guards": guards("deny")},
        }
    )

    async def refuse(ctx: Any, params: types.CreateMessageRequestParams) -> types.ErrorData:
        return types.ErrorData(code=-1, message="no model: " + LEAK_SENT)

    with anyio.fail_after(60):
        async with fresh_gateway("http", config, "legacy", sampling_callback=refuse) as client:
            result = await client.call_tool("ask", {})
    content = result.content[0]
    assert isinstance(content, types.TextContent)
    code, _, reversed_message = content.text.partition(":")
    assert (code, reversed_message[::-1]) == ("-1", "no model: " + SCRUBBED)


async def test_scrub_can_be_turned_off(write_config: ConfigWriter) -> None:
    config = write_config(
        {
            "upstreams": {"leaky": {"command": sys.executable, "args": [LEAKY]}},
            "interceptors": {"guards": guards("redact")},
            "scrub": {"errors": False, "notifications": False},
        }
    )
    progress: list[str | None] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    with anyio.fail_after(60):
        async with fresh_gateway("stdio", config, "legacy") as client:
            with pytest.raises(MCPError) as failed:
                await client.call_tool("fail", {}, progress_callback=on_progress)
    assert failed.value.error.message == "boom: " + LEAK_SENT
    assert progress == ["progress: " + LEAK_SENT]


@pytest.mark.parametrize("era", ERAS)
async def test_completion_values_instructions_and_notifications_are_scrubbed(
    write_config: ConfigWriter, era: str
) -> None:
    """None of these is an event: `completion/complete` is not one (§1.2), nor the handshake, nor any
    notification; the scrub redacts their strings but the identifiers a client matches or uses as sent."""
    config = write_config(
        {
            "upstreams": {"leaky": {"command": sys.executable, "args": [LEAKY]}},
            "interceptors": {"guards": guards("deny")},
        }
    )
    completion = {"ref": {"type": "ref/prompt", "name": "greet"}, "argument": {"name": "name", "value": "b"}}
    with anyio.fail_after(60):
        async with raw_gateway("stdio", config, era) as client:
            assert await client.call_text("notify") == "notified"
            completed = await client.request("completion/complete", completion)
    assert client.opened["instructions"] == "Instructions: " + SCRUBBED
    assert completed["completion"] == {"values": ["plain", "path/" + SCRUBBED], "total": 2, "hasMore": False}
    relayed = dict(client.notified)
    assert relayed["notifications/leaky/status"] == {"status": SCRUBBED, "count": 3}
    if era == "legacy":  # a 2026-07-28 client hears of resources and listings on its subscriptions/listen stream
        assert relayed["notifications/resources/updated"] == {"uri": UPDATED_URI, "title": "Updated: " + SCRUBBED}
        assert relayed["notifications/tools/list_changed"] == {"_meta": {"why": SCRUBBED}}
