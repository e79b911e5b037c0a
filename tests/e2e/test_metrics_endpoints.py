"""Prometheus metrics of the real CLI gateway: `GET /metrics` on the HTTP front, and the `metrics.listen`
listener of a stdio gateway, scraped after real calls (one blocked by a guard)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from e2e_support import gateway_env, standard_config, stdio_transport, text_of, unique, write_yaml
from helpers import cli_argv, free_tcp_port, running, stderr_log
from mcp import Client, MCPError
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.anyio


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def sample(scraped: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float | None:
    return scraped.get((name, frozenset(labels.items())))


async def two_calls_and_a_block(client: Client) -> None:
    assert text_of(await client.call_tool("echo", {"text": "one"})) == "one"
    assert text_of(await client.call_tool("echo", {"text": "two"})) == "two"
    with pytest.raises(MCPError) as blocked:
        await client.call_tool("delete_everything", {})
    assert (blocked.value.error.data or {})["interceptor"] == "deny-tools"


async def test_http_front_serves_metrics_counting_calls_blocks_and_audit(tmp_path: Path) -> None:
    audit = {"enabled": True, "store": str(tmp_path / "audit.db"), "key_file": str(tmp_path / "audit.key")}
    config = write_yaml(tmp_path / "gateway.yaml", standard_config(http={"metrics": True}, audit=audit))
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}")
    with anyio.fail_after(60):
        async with running(argv, port=port, env=gateway_env(), label="HTTP gateway"):
            async with Client(f"http://127.0.0.1:{port}/mcp", mode="2026-07-28") as client:
                await two_calls_and_a_block(client)
            async with httpx2.AsyncClient() as http:
                response = await http.get(f"http://127.0.0.1:{port}/metrics")
                refused = await http.get(f"http://127.0.0.1:{port}/metrics", headers={"Host": "evil.example"})
    assert response.status_code == 200, response.text
    assert refused.status_code == 421  # the front's DNS-rebinding check covers /metrics too
    scraped = samples(response.text)
    requests = "mcp_gateway_requests_total"
    assert sample(scraped, requests, upstream="e2e", method="tools/call", outcome="ok") == 2
    assert sample(scraped, requests, upstream="e2e", method="tools/call", outcome="blocked") == 1
    assert sample(scraped, requests, upstream="e2e", method="tools/call", outcome="error") is None
    decisions = "mcp_gateway_chain_decisions_total"
    assert sample(scraped, decisions, event="tools/call", phase="request", status="success") == 2
    assert sample(scraped, decisions, event="tools/call", phase="request", status="validation_failed") == 1
    assert sample(scraped, "mcp_gateway_chain_duration_seconds_count", event="tools/call", phase="request") == 3
    upstream_calls = sample(scraped, "mcp_gateway_upstream_request_duration_seconds_count", upstream="e2e")
    assert upstream_calls is not None and upstream_calls >= 2  # the two calls, plus the gateway's own listings
    assert sample(scraped, "mcp_gateway_upstream_up", upstream="e2e") == 1
    assert sample(scraped, "mcp_gateway_sessions_open") == 1  # the 2026-07-28 client's (by principal)
    records = sample(scraped, "mcp_gateway_audit_records_total")
    assert records is not None and records >= 3  # each call's legs and the block's denial
    assert sample(scraped, "mcp_gateway_audit_write_failures_total") == 0


async def test_http_front_has_no_metrics_unless_asked(tmp_path: Path) -> None:
    config = write_yaml(tmp_path / "gateway.yaml", standard_config())
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}")
    with anyio.fail_after(60):
        async with running(argv, port=port, env=gateway_env(), label="HTTP gateway"), httpx2.AsyncClient() as http:
            assert (await http.get(f"http://127.0.0.1:{port}/metrics")).status_code == 404


async def test_stdio_gateway_serves_metrics_on_its_listener(tmp_path: Path) -> None:
    port = free_tcp_port()
    config = write_yaml(tmp_path / "gateway.yaml", standard_config(metrics={"listen": f"127.0.0.1:{port}"}))
    argv = cli_argv("gateway", "--config", str(config))
    scraped: dict[Any, float] = {}
    with anyio.fail_after(60), stderr_log("stdio gateway") as log:
        async with Client(stdio_transport(argv, log, env=gateway_env()), mode="legacy") as client:
            await two_calls_and_a_block(client)
            async with httpx2.AsyncClient() as http:
                response = await http.get(f"http://127.0.0.1:{port}/metrics")
            assert response.status_code == 200, response.text
            scraped = samples(response.text)
    requests = "mcp_gateway_requests_total"
    assert sample(scraped, requests, upstream="e2e", method="tools/call", outcome="ok") == 2
    assert sample(scraped, requests, upstream="e2e", method="tools/call", outcome="blocked") == 1
    assert sample(scraped, "mcp_gateway_upstream_up", upstream="e2e") == 1
    assert sample(scraped, "mcp_gateway_sessions_open") == 1  # the stdio client's one session
    assert sample(scraped, "mcp_gateway_audit_records_total") is None  # auditing is off


async def test_http_metrics_need_the_fronts_bearer_token(tmp_path: Path) -> None:
    config = write_yaml(
        tmp_path / "gateway.yaml", standard_config(auth={"tokens": ["${E2E_TOKEN}"]}, http={"metrics": True})
    )
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}")
    url = f"http://127.0.0.1:{port}/metrics"
    with anyio.fail_after(60):
        env = gateway_env({"E2E_TOKEN": "scrape-secret"})
        async with running(argv, port=port, env=env, label="HTTP gateway"), httpx2.AsyncClient() as http:
            anonymous = await http.get(url)
            wrong = await http.get(url, headers={"Authorization": "Bearer nope"})
            allowed = await http.get(url, headers={"Authorization": "Bearer scrape-secret"})
    assert (anonymous.status_code, wrong.status_code, allowed.status_code) == (401, 401, 200)
    assert "mcp_gateway_upstream_up" in allowed.text


@pytest.mark.parametrize("era", ["legacy", "2026-07-28"])
async def test_a_cancelled_call_is_counted_as_cancelled_and_a_listing_names_its_only_upstream(
    tmp_path: Path, era: str
) -> None:
    """A call the client cancels was answered with no error, so it is no `error`; a listing of the one
    upstream there is names it (only a merged listing has no single upstream)."""
    config = write_yaml(tmp_path / "gateway.yaml", standard_config(http={"metrics": True}))
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}")
    token = unique("sleep")
    with anyio.fail_after(60):
        async with running(argv, port=port, env=gateway_env(), label="HTTP gateway"):
            async with Client(f"http://127.0.0.1:{port}/mcp", mode=era) as client:
                await client.list_tools()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(partial(client.call_tool, "sleep", {"seconds": 30, "token": token}))
                    await client.call_tool("wait_started", {"token": token, "wait": 10})
                    tg.cancel_scope.cancel()  # mcp's client sends notifications/cancelled
                assert text_of(await client.call_tool("was_cancelled", {"token": token, "wait": 10})) == "cancelled"
            async with httpx2.AsyncClient() as http:
                scraped = samples((await http.get(f"http://127.0.0.1:{port}/metrics")).text)
    requests = "mcp_gateway_requests_total"
    assert sample(scraped, requests, upstream="e2e", method="tools/call", outcome="cancelled") == 1
    assert sample(scraped, requests, upstream="e2e", method="tools/call", outcome="error") is None
    assert (
        sample(scraped, requests, upstream="e2e", method="tools/call", outcome="ok") == 2
    )  # wait_started, was_cancelled
    listed = sample(scraped, requests, upstream="e2e", method="tools/list", outcome="ok")
    assert listed is not None and listed >= 1
    assert sample(scraped, requests, upstream="", method="tools/list", outcome="ok") is None


async def test_a_handshake_era_sessions_own_upstream_restart_is_counted(tmp_path: Path) -> None:
    """A handshake-era HTTP session has its own upstream process: its crash and restart showed nowhere
    (`upstream_up` read the shared connection only, and restarts were not counted)."""
    config = write_yaml(tmp_path / "gateway.yaml", standard_config(http={"metrics": True}))
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}")
    with anyio.fail_after(60):
        async with running(argv, port=port, env=gateway_env(), label="HTTP gateway"), httpx2.AsyncClient() as http:
            before = samples((await http.get(f"http://127.0.0.1:{port}/metrics")).text)
            async with Client(f"http://127.0.0.1:{port}/mcp", mode="legacy") as client:
                first = text_of(await client.call_tool("pid", {}))
                with pytest.raises(MCPError):
                    await client.call_tool("crash", {})
                second = text_of(await client.call_tool("pid", {}))  # waits for the restart
                during = samples((await http.get(f"http://127.0.0.1:{port}/metrics")).text)
            after = samples((await http.get(f"http://127.0.0.1:{port}/metrics")).text)
    assert first != second
    restarts = "mcp_gateway_upstream_restarts_total"
    assert (sample(before, restarts, upstream="e2e"), sample(during, restarts, upstream="e2e")) == (0, 1)
    connections = "mcp_gateway_upstream_connections"
    assert sample(before, connections, upstream="e2e", state="up") == 1  # the shared one
    assert sample(during, connections, upstream="e2e", state="up") == 2  # and the session's own
    assert sample(after, connections, upstream="e2e", state="up") == 1  # closed with its session
    assert sample(during, "mcp_gateway_upstream_up", upstream="e2e") == 1
