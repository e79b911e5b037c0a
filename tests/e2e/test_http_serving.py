"""The gateway's HTTP serving, through the real CLI: auth (static tokens, JWT), DNS-rebinding
protection, the body limit, the legacy SSE endpoint, bind rules, bad messages and clean shutdown.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx2
import jwt
import orjson
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from e2e_support import (
    ERAS,
    UPSTREAM,
    ConfigWriter,
    gateway_env,
    standard_config,
    text_of,
    upstream_entry,
    write_yaml,
)
from helpers import (
    cli_argv,
    free_tcp_port,
    http_transport,
    pid_alive,
    run_cli,
    running,
    spawn,
    stop,
    until,
    wait_http_ready,
)
from mcp import Client, MCPError
from mcp.client.sse import sse_client
from mcp_types import Implementation

from mcp_interceptors.audit import SqliteStore

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
TOKEN = "e2e-static-token-6f1c"
ISSUER = "https://issuer.e2e.example"
AUDIENCE = "mcp-gateway-e2e"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def serve(config: Path, *extra: str, env: dict[str, str] | None = None) -> AsyncIterator[str]:
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}", *extra)
    async with running(argv, port=port, env=gateway_env(env), label="HTTP gateway"):
        yield f"http://127.0.0.1:{port}"


# --------------------------------------------------------------------------- static tokens


@pytest.fixture(scope="module")
async def token_gateway(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    config = write_yaml(
        tmp_path_factory.mktemp("tokens") / "gateway.yaml",
        standard_config(auth={"tokens": ["${E2E_TOKEN}"]}),
    )
    async with serve(config, env={"E2E_TOKEN": TOKEN}) as base:
        yield base


@pytest.mark.parametrize("authorization", [None, "Bearer wrong-token", "Basic ZTJlOmUyZQ=="])
async def test_static_token_gateway_answers_401_with_www_authenticate(token_gateway: str, authorization: str) -> None:
    headers = {**ACCEPT, **({"authorization": authorization} if authorization else {})}
    with anyio.fail_after(30):
        async with httpx2.AsyncClient() as http:
            response = await http.post(f"{token_gateway}/mcp", json=INITIALIZE, headers=headers)
    assert response.status_code == 401
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert 'error="invalid_token"' in challenge
    assert f'resource_metadata="{token_gateway}/.well-known/oauth-protected-resource/mcp"' in challenge


@pytest.mark.parametrize("bearer", [[], ["--bearer", "wrong-token"]])
@pytest.mark.parametrize("command", [["pin", "-o", "-"], ["list"]])
async def test_cli_commands_against_a_token_gateway_say_401_and_how_to_fix_it(
    token_gateway: str, command: list[str], bearer: list[str]
) -> None:
    # The MCP client turns a 401 into an anonymous -32603 "Server returned an error response".
    done = await run_cli(command[0], f"{token_gateway}/mcp", *command[1:], *bearer, limit_s=30)
    assert done.returncode == 1
    assert done.stdout == b""
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(
        f"mcp-interceptors {command[0]}: error: {token_gateway}/mcp: HTTP 401: the host needs a valid token "
        "(--bearer TOKEN) (Bearer "
    )
    done = await run_cli(command[0], f"{token_gateway}/mcp", *command[1:], "--bearer", TOKEN, limit_s=30)
    assert "HTTP 401" not in done.stderr.decode()


@pytest.mark.parametrize("era", ERAS)
async def test_static_token_gateway_serves_a_client_with_the_token(token_gateway: str, era: str) -> None:
    transport = http_transport(f"{token_gateway}/mcp", headers={"Authorization": f"Bearer {TOKEN}"})
    with anyio.fail_after(30):
        async with Client(transport, mode=era) as client:
            result = await client.call_tool("echo", {"text": "sk-live-ABCDEFGH99 authorised"})
    assert text_of(result) == "[REDACTED] authorised"


@pytest.mark.parametrize("path", ["/sse", "/messages/?session_id=0123456789abcdef0123456789abcdef"])
async def test_static_token_gateway_guards_the_legacy_sse_endpoint_too(token_gateway: str, path: str) -> None:
    method = "GET" if path == "/sse" else "POST"
    with anyio.fail_after(30):
        async with httpx2.AsyncClient() as http:
            response = await http.request(method, f"{token_gateway}{path}", json=INITIALIZE, headers=ACCEPT)
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]


async def test_static_token_gateway_serves_sse_clients_with_the_token(token_gateway: str) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with anyio.fail_after(30):
        async with Client(sse_client(f"{token_gateway}/sse", headers=headers), mode="legacy") as client:
            result = await client.call_tool("echo", {"text": "over sse"})
    assert text_of(result) == "over sse"


async def test_an_sse_post_naming_another_principals_session_in_mcp_session_id_stays_in_its_own(
    write_config: ConfigWriter,
) -> None:
    """`/messages/` is bound to its SSE session by `?session_id=`; an `Mcp-Session-Id` header naming a
    Streamable HTTP session of another token once put the call there, run as that session's principal."""
    alice_token, bob_token = "e2e-alice-token-51ab", "e2e-bob-token-7c2d"
    config = write_config(standard_config(auth={"tokens": [alice_token, bob_token]}))
    initialize = {**INITIALIZE, "params": {**INITIALIZE["params"], "clientInfo": {"name": "alice", "version": "1"}}}
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}}
    alice_headers = {**ACCEPT, "authorization": f"Bearer {alice_token}"}
    with anyio.fail_after(60):
        async with serve(config) as base, httpx2.AsyncClient() as http:
            opened = await http.post(f"{base}/mcp", json=initialize, headers=alice_headers)
            session = opened.headers["mcp-session-id"]
            alice_headers |= {"mcp-session-id": session, "mcp-protocol-version": "2025-11-25"}
            notice = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            await http.post(f"{base}/mcp", json=notice, headers=alice_headers)
            await http.post(f"{base}/mcp", json=call, headers=alice_headers)  # alice's upstream session is open
            bob_headers = {"Authorization": f"Bearer {bob_token}", "Mcp-Session-Id": session}
            transport = sse_client(f"{base}/sse", headers=bob_headers)
            async with Client(transport, mode="legacy", client_info=Implementation(name="bob", version="1")) as bob:
                seen = json.loads(text_of(await bob.call_tool("whoami", {})))
    assert seen["client"] == "bob"


# --------------------------------------------------------------------------- JWT


def _pem(key: Any) -> bytes:
    pem: bytes = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return pem


def _token(key: Any, algorithm: str, **claims: Any) -> str:
    body = {"sub": "alice", "iss": ISSUER, "aud": AUDIENCE, "exp": int(time.time()) + 600, "scope": "mcp"}
    body.update(claims)
    return jwt.encode(body, key, algorithm=algorithm)


@pytest.fixture(scope="module")
def signing_key() -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.generate()


@pytest.fixture(scope="module")
async def jwt_gateway(
    tmp_path_factory: pytest.TempPathFactory, signing_key: ed25519.Ed25519PrivateKey
) -> AsyncIterator[str]:
    folder = tmp_path_factory.mktemp("jwt")
    (folder / "public.pem").write_bytes(_pem(signing_key))
    auth = {"jwt": {"public_key_file": str(folder / "public.pem"), "issuer": ISSUER, "audience": AUDIENCE}}
    config = write_yaml(folder / "gateway.yaml", standard_config(auth=auth))
    async with serve(config) as base:
        yield base


@pytest.mark.parametrize("era", ERAS)
async def test_jwt_gateway_serves_a_client_with_a_valid_token(
    jwt_gateway: str, signing_key: ed25519.Ed25519PrivateKey, era: str
) -> None:
    token = _token(signing_key, "EdDSA")
    transport = http_transport(f"{jwt_gateway}/mcp", headers={"Authorization": f"Bearer {token}"})
    with anyio.fail_after(30):
        async with Client(transport, mode=era) as client:
            result = await client.call_tool("echo", {"text": "hello"})
    assert text_of(result) == "hello"


@pytest.mark.parametrize("problem", ["expired", "wrong-audience", "wrong-issuer", "other-key", "no-exp"])
async def test_jwt_gateway_refuses_bad_tokens_with_401(
    jwt_gateway: str, signing_key: ed25519.Ed25519PrivateKey, problem: str
) -> None:
    match problem:
        case "expired":
            token = _token(signing_key, "EdDSA", exp=int(time.time()) - 60)
        case "wrong-audience":
            token = _token(signing_key, "EdDSA", aud="someone-else")
        case "wrong-issuer":
            token = _token(signing_key, "EdDSA", iss="https://evil.example")
        case "other-key":
            token = _token(rsa.generate_private_key(public_exponent=65537, key_size=2048), "RS256")
        case _:
            token = jwt.encode({"sub": "alice", "iss": ISSUER, "aud": AUDIENCE}, signing_key, algorithm="EdDSA")
    with anyio.fail_after(30):
        async with httpx2.AsyncClient() as http:
            response = await http.post(
                f"{jwt_gateway}/mcp", json=INITIALIZE, headers={**ACCEPT, "authorization": f"Bearer {token}"}
            )
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer ")


async def test_policy_sees_the_claims_of_each_requests_own_token(
    tmp_path: Path, signing_key: ed25519.Ed25519PrivateKey
) -> None:
    """2026-07-28 requests of one principal share a session: a token issued after a role was taken away
    must be judged by its own claims, not by those of the first token the gateway saw."""
    (tmp_path / "public.pem").write_bytes(_pem(signing_key))
    auth = {"jwt": {"public_key_file": str(tmp_path / "public.pem"), "issuer": ISSUER, "audience": AUDIENCE}}
    rule = {"tool": "echo", "cel": 'has(principal.claims.roles) && "editor" in principal.claims.roles'}
    guards = [{"name": "tool-policy", "config": {"arguments": [rule]}}]
    config = write_yaml(tmp_path / "gateway.yaml", standard_config(auth=auth, interceptors={"guards": guards}))
    answers: list[str] = []
    with anyio.fail_after(60):
        async with serve(config) as base:
            for roles in (["editor"], []):
                token = _token(signing_key, "EdDSA", roles=roles)
                transport = http_transport(f"{base}/mcp", headers={"Authorization": f"Bearer {token}"})
                async with Client(transport, mode="2026-07-28") as client:
                    try:
                        answers.append(text_of(await client.call_tool("echo", {"text": "edit"})))
                    except MCPError as exc:
                        answers.append(str((exc.data or {}).get("interceptor")))
    assert answers == ["edit", "tool-policy"]


# --------------------------------------------------------------------------- one unauthenticated loopback gateway


@pytest.fixture(scope="module")
async def plain_gateway(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    config = write_yaml(
        tmp_path_factory.mktemp("plain") / "gateway.yaml", standard_config(http={"max_body_bytes": 4096})
    )
    async with serve(config) as base:
        yield base


@pytest.mark.parametrize(
    ("header", "value", "status"),
    [("host", "evil.example", 421), ("host", "evil.example:80", 421), ("origin", "http://evil.example", 403)],
)
async def test_dns_rebinding_protection(plain_gateway: str, header: str, value: str, status: int) -> None:
    with anyio.fail_after(30):
        async with httpx2.AsyncClient() as http:
            response = await http.post(f"{plain_gateway}/mcp", json=INITIALIZE, headers={**ACCEPT, header: value})
            allowed = await http.post(
                f"{plain_gateway}/mcp", json=INITIALIZE, headers={**ACCEPT, "origin": "http://localhost:3000"}
            )
    assert response.status_code == status
    assert allowed.status_code == 200


@pytest.mark.parametrize(
    ("header", "value"),
    [("host", "localhost"), ("host", "127.0.0.1"), ("host", "[::1]"), ("origin", "http://localhost")],
)
async def test_a_local_host_or_origin_without_a_port_is_accepted(plain_gateway: str, header: str, value: str) -> None:
    """A client leaves the default port out of `Host` (and a page on port 80 out of `Origin`): a gateway bound to
    127.0.0.1:80 answered 421 to every client, even at the URL it printed."""
    with anyio.fail_after(30):
        async with httpx2.AsyncClient() as http:
            response = await http.post(f"{plain_gateway}/mcp", json=INITIALIZE, headers={**ACCEPT, header: value})
    assert response.status_code == 200


async def test_request_over_the_body_limit_gets_413(plain_gateway: str) -> None:
    big = {**INITIALIZE, "params": {**INITIALIZE["params"], "padding": "x" * 8192}}
    with anyio.fail_after(30):
        async with httpx2.AsyncClient() as http:
            response = await http.post(f"{plain_gateway}/mcp", json=big, headers=ACCEPT)
            fine = await http.post(f"{plain_gateway}/mcp", json=INITIALIZE, headers=ACCEPT)
    assert response.status_code == 413
    assert fine.status_code == 200


async def test_a_bad_message_fails_alone(plain_gateway: str) -> None:
    with anyio.fail_after(30):
        async with httpx2.AsyncClient() as http:
            garbage = await http.post(f"{plain_gateway}/mcp", content=b"{not json", headers=ACCEPT)
        async with Client(f"{plain_gateway}/mcp", mode="legacy") as client:
            result = await client.call_tool("echo", {"text": "still serving"})
    assert garbage.status_code == 400
    assert garbage.json()["error"]["code"] == -32700
    assert text_of(result) == "still serving"


async def test_legacy_sse_endpoint_serves_governed_calls(plain_gateway: str) -> None:
    with anyio.fail_after(30):
        async with Client(sse_client(f"{plain_gateway}/sse"), mode="legacy") as client:
            tools = await client.list_tools()
            result = await client.call_tool("echo", {"text": "over sse sk-live-ABCDEFGH12"})
    assert "hidden_tool" not in [tool.name for tool in tools.tools]
    assert text_of(result) == "over sse [REDACTED]"


async def test_each_legacy_sse_client_has_its_own_upstream_session(plain_gateway: str) -> None:
    """SSE requests carry no mcp-session-id: they must not all land in one shared session."""

    async def seen_by_upstream(name: str) -> tuple[str, str]:
        transport = sse_client(f"{plain_gateway}/sse")
        async with Client(transport, mode="legacy", client_info=Implementation(name=name, version="1")) as client:
            whoami = json.loads(text_of(await client.call_tool("whoami", {})))
            return whoami["client"], text_of(await client.call_tool("pid", {}))

    with anyio.fail_after(30):
        alice_sees, alice_pid = await seen_by_upstream("alice-sse")
        bob_sees, bob_pid = await seen_by_upstream("bob-sse")
    assert (alice_sees, bob_sees) == ("alice-sse", "bob-sse")
    assert alice_pid != bob_pid


async def test_http_answers_match_a_direct_server_for_era_foreign_and_unknown_requests(plain_gateway: str) -> None:
    """A 2026-07-28 `initialize` and an unknown method get what the upstream itself answers over HTTP."""
    envelope = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    }
    probes = [
        ({**INITIALIZE, "params": {**INITIALIZE["params"], "_meta": envelope}}, "initialize"),
        ({"jsonrpc": "2.0", "id": 3, "method": "x-nope", "params": {"_meta": envelope}}, "x-nope"),
    ]
    port = free_tcp_port()
    answers: dict[str, list[tuple[int, Any]]] = {"direct": [], "gateway": []}
    direct = [sys.executable, UPSTREAM, "--http", str(port)]
    with anyio.fail_after(60):
        async with running(direct, port=port, label="direct upstream"), httpx2.AsyncClient() as http:
            for name, base in (("direct", f"http://127.0.0.1:{port}"), ("gateway", plain_gateway)):
                for body, method in probes:
                    headers = {**ACCEPT, "mcp-protocol-version": "2026-07-28", "mcp-method": method}
                    response = await http.post(f"{base}/mcp", json=body, headers=headers)
                    answers[name].append((response.status_code, response.json()))
    assert answers["gateway"] == answers["direct"]
    assert [status for status, _ in answers["direct"]] == [404, 404]


async def test_modern_clients_log_lines_reach_them_while_another_call_is_in_flight(write_config: ConfigWriter) -> None:
    """2026-07-28 clients share the gateway's connection to a 2026-07-28 HTTP upstream, where one stream
    cannot say whose log line is whose: a call made while another waits gets an exchange of its own, so
    its log lines reach its client (they were dropped as unattributable)."""
    upstream_port = free_tcp_port()
    config = write_config({"upstreams": {"e2e": {"url": f"http://127.0.0.1:{upstream_port}/mcp"}}})
    logs: list[Any] = []
    logged = anyio.Event()

    async def on_log(params: Any) -> None:
        logs.append(params.data)
        logged.set()

    with anyio.fail_after(60):
        async with (
            running([sys.executable, UPSTREAM, "--http", str(upstream_port)], port=upstream_port, label="upstream"),
            serve(config) as base,
            Client(f"{base}/mcp", mode="2026-07-28") as sleeper,
            Client(f"{base}/mcp", mode="2026-07-28", logging_callback=on_log, log_level="debug") as logger,
        ):
            async with anyio.create_task_group() as tg:
                tg.start_soon(sleeper.call_tool, "sleep", {"seconds": 30, "token": "held"})
                assert text_of(await logger.call_tool("wait_started", {"token": "held"})) == "started"
                assert text_of(await logger.call_tool("log", {"message": "mine"})) == "logged"
                with anyio.move_on_after(3):  # a direct server delivers it before the result
                    await logged.wait()
                tg.cancel_scope.cancel()
            # the held call's exchange still works on its own, and cancelling it reaches the upstream
            assert text_of(await logger.call_tool("was_cancelled", {"token": "held"})) == "cancelled"
    assert logs == ["mine"]


MODERN_ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
}


@pytest.mark.parametrize("progress", [False, True], ids=["silent", "with-progress"])
async def test_modern_http_call_gets_a_json_body_unless_it_streams_progress(plain_gateway: str, progress: bool) -> None:
    """2026-07-28 over HTTP: a call that emits nothing is one `application/json` body; a call with a
    `progressToken` switches to `text/event-stream` so the relayed progress comes before the result.

    The gateway leaves mcp's `json_response` off: this per-request choice is what mcp's default already
    makes for this era, and `json_response=True` would drop the progress (and the disconnect watch that
    cancels a call the client gave up on).
    """
    tool, arguments = ("countdown", {"steps": 2}) if progress else ("echo", {"text": "plain"})
    meta: dict[str, Any] = {**MODERN_ENVELOPE, **({"progressToken": "p1"} if progress else {})}
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    body["params"]["_meta"] = meta
    headers = {**ACCEPT, "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": tool}
    with anyio.fail_after(30):
        async with httpx2.AsyncClient() as http:
            response = await http.post(f"{plain_gateway}/mcp", json=body, headers=headers)
    assert response.status_code == 200
    content_type = response.headers["content-type"].split(";")[0]
    if not progress:
        assert content_type == "application/json"
        assert response.json()["result"]["content"] == [{"type": "text", "text": "plain"}]
        return
    assert content_type == "text/event-stream"
    events = [json.loads(line[len("data:") :]) for line in response.text.splitlines() if line.startswith("data:")]
    assert [(e.get("method"), e.get("params", {}).get("progress")) for e in events] == [
        ("notifications/progress", 1),
        ("notifications/progress", 2),
        (None, None),
    ]
    assert events[-1]["result"]["content"] == [{"type": "text", "text": "done"}]


# --------------------------------------------------------------------------- bind rules, shutdown


@pytest.mark.parametrize(("host", "bind"), [("0.0.0.0", "0.0.0.0"), ("::", "[::]")])
async def test_non_loopback_bind_without_auth_is_refused(write_config: ConfigWriter, host: str, bind: str) -> None:
    """The refusal names the address as it was given (an IPv6 one in brackets, not `:::8080`)."""
    config = write_config(standard_config())
    port = free_tcp_port()
    done = await run_cli("gateway", "--config", str(config), "--http", f"{bind}:{port}", env=gateway_env())
    stderr = done.stderr.decode()
    assert done.returncode == 1
    assert stderr.strip().splitlines()[-1] == (
        f"mcp-interceptors gateway: error: refusing to serve {bind}:{port} without authentication; "
        "configure `auth` (tokens or jwt) or pass --insecure-no-auth"
    )


async def test_wildcard_bind_warns_that_only_allowed_hosts_get_through(write_config: ConfigWriter) -> None:
    config = write_config(standard_config(auth={"tokens": [TOKEN]}))
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(config), "--http", f"0.0.0.0:{port}")
    async with running(argv, port=port, env=gateway_env(), label="HTTP gateway") as child:
        with anyio.fail_after(30):
            async with httpx2.AsyncClient() as http:
                headers = {**ACCEPT, "authorization": f"Bearer {TOKEN}", "host": f"gateway.example.com:{port}"}
                refused = await http.post(f"http://127.0.0.1:{port}/mcp", json=INITIALIZE, headers=headers)
        log = child.stderr_tail()
    assert refused.status_code == 421
    assert "list the names clients use in http.allowed_hosts" in log


# Clients cut off by the shutdown leave sockets for the GC (mcp's clients, not the gateway).
@pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")
async def test_sigterm_drains_exits_0_and_stops_every_upstream(write_config: ConfigWriter, tmp_path: Path) -> None:
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    config = write_config(standard_config(upstreams={"e2e": upstream_entry(env={"E2E_PID_DIR": str(pid_dir)})}))
    port = free_tcp_port()
    child = spawn(cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}"), env=gateway_env())
    served: list[str] = []
    release = anyio.Event()

    async def hold(mode: str, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """A client that stays connected (a legacy one keeps its own upstream session) until shutdown."""
        try:
            async with Client(f"http://127.0.0.1:{port}/mcp", mode=mode) as client:
                served.append(text_of(await client.call_tool("pid", {})))
                task_status.started()
                await release.wait()
        except Exception:  # the gateway going away under a connected client is the point of the test
            return

    try:
        with anyio.fail_after(60):
            await wait_http_ready(child, port)
            async with anyio.create_task_group() as tg:
                for mode in ERAS:
                    await tg.start(hold, mode)
                upstream_pids = sorted(int(path.stem) for path in pid_dir.glob("*.pid"))
                child.popen.send_signal(signal.SIGTERM)
                code = await anyio.to_thread.run_sync(child.popen.wait, abandon_on_cancel=True)
                release.set()
    except BaseException as exc:
        exc.add_note(child.describe())
        raise
    finally:
        stop(child)
    assert code == 0
    assert sorted(int(pid) for pid in served) == upstream_pids  # the shared one and the legacy session's own
    assert len(upstream_pids) == 2
    assert [pid for pid in upstream_pids if pid_alive(pid)] == []


async def test_sigterm_ends_open_sse_streams_without_tracebacks(write_config: ConfigWriter) -> None:
    """A handshake-era session's GET stream and an `/sse` stream never end on their own. sse-starlette ends them
    when uvicorn's signal handler runs, which the gateway replaces: they were cancelled when the drain timed
    out, and the gateway logged "Exception in ASGI application" with a traceback for each on a clean exit."""
    config = write_config(standard_config())
    port = free_tcp_port()
    child = spawn(cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}"), env=gateway_env())
    base = f"http://127.0.0.1:{port}"
    ended: list[str] = []

    async def hold(http: httpx2.AsyncClient, name: str, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        headers = {"accept": "text/event-stream"}
        url = f"{base}/sse"
        if name == "get":
            opened = await http.post(f"{base}/mcp", json=INITIALIZE, headers=ACCEPT)
            headers |= {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
            url = f"{base}/mcp"
        try:
            async with http.stream("GET", url, headers=headers) as response:
                assert response.status_code == 200
                task_status.started()
                async for _ in response.aiter_lines():
                    pass
        except httpx2.HTTPError:  # the stream cut when the gateway exits
            pass
        ended.append(name)

    try:
        with anyio.fail_after(60):
            await wait_http_ready(child, port)
            async with httpx2.AsyncClient(timeout=30) as http, anyio.create_task_group() as tg:
                await tg.start(hold, http, "get")
                await tg.start(hold, http, "sse")
                child.popen.send_signal(signal.SIGTERM)
                code = await anyio.to_thread.run_sync(child.popen.wait, abandon_on_cancel=True)
    except BaseException as exc:
        exc.add_note(child.describe())
        raise
    finally:
        stop(child)
    assert code == 0
    assert sorted(ended) == ["get", "sse"]
    stderr = child.stderr_path.read_text(encoding="utf-8", errors="replace")
    assert "Traceback" not in stderr and "Exception in ASGI application" not in stderr, stderr


BLOCKING_UPSTREAM = """
import os, pathlib, anyio
from mcp.server.mcpserver import MCPServer
server = MCPServer("blocking")

@server.tool(description="Mark the call as started, then never answer.")
async def block() -> str:
    pathlib.Path(os.environ["STARTED_FILE"]).touch()
    await anyio.sleep(3600)
    return "never"

server.run("stdio")
"""


async def _post_call(http: httpx2.AsyncClient, url: str, era: str, name: str) -> Any:
    """One tools/call over raw HTTP in `era` (a handshake-era one opens its session first): its JSON-RPC answer."""
    headers = await _open_session(http, url, era)
    return await _post_tool_call(http, url, era, headers, 2, name, {})


@pytest.mark.parametrize("era", ERAS)
async def test_sigterm_answers_a_call_still_in_flight_with_an_error(
    write_config: ConfigWriter, tmp_path: Path, era: str
) -> None:
    """The drain is bounded: a call still waiting on its upstream when it ends gets a JSON-RPC error."""
    started = tmp_path / "started"
    upstream = {"command": sys.executable, "args": ["-c", BLOCKING_UPSTREAM], "env": {"STARTED_FILE": str(started)}}
    config = write_config({"upstreams": {"slow": upstream}})
    port = free_tcp_port()
    child = spawn(cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}"), env=gateway_env())
    answers: list[Any] = []

    async def call(http: httpx2.AsyncClient) -> None:
        answers.append(await _post_call(http, f"http://127.0.0.1:{port}/mcp", era, "block"))

    try:
        with anyio.fail_after(60):
            await wait_http_ready(child, port)
            async with httpx2.AsyncClient(timeout=30) as http, anyio.create_task_group() as tg:
                tg.start_soon(call, http)
                while True:
                    if started.exists():
                        break
                    await anyio.sleep(0.05)  # nothing to wait on but the upstream's marker file
                child.popen.send_signal(signal.SIGTERM)
            code = await anyio.to_thread.run_sync(child.popen.wait, abandon_on_cancel=True)
    except BaseException as exc:
        exc.add_note(child.describe())
        raise
    finally:
        stop(child)
    assert code == 0
    assert answers[0]["error"] == {
        "code": -32000,
        "message": "the gateway closed its connection to upstream 'slow' (shutting down)",
        "data": {"upstream": "slow"},
    }


SLOW_SESSION_UPSTREAM = """
import os, pathlib, runpy, sys, time
opening = pathlib.Path(os.environ["OPENING_DIR"])
if (opening / "shared").exists():  # a session's own: it never finishes starting, and ignores end of input
    (opening / str(os.getpid())).touch()
    time.sleep(3600)
(opening / "shared").touch()
sys.argv = [os.environ["UPSTREAM"]]
runpy.run_path(os.environ["UPSTREAM"], run_name="__main__")
"""


async def _sse_call(http: httpx2.AsyncClient, base: str, name: str) -> Any:
    """One handshake-era tools/call over `/sse` + `/messages/`: its JSON-RPC answer (None if the stream ended)."""
    async with http.stream("GET", f"{base}/sse", headers={"accept": "text/event-stream"}) as stream:
        events = (line[5:].strip() async for line in stream.aiter_lines() if line.startswith("data:"))
        post = base + await anext(events)
        await http.post(post, json=INITIALIZE)
        await anext(events)  # its answer
        await http.post(post, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": name, "arguments": {}}}
        await http.post(post, json=call)
        async for event in events:
            if (answer := json.loads(event)).get("id") == 2:
                return answer
    return None


@pytest.mark.parametrize("front", ["streamable-http", "sse"])
async def test_sigterm_answers_a_call_whose_session_upstream_is_still_starting(
    write_config: ConfigWriter, tmp_path: Path, front: str
) -> None:
    """SIGTERM while a handshake-era session's first call waits for its upstream session to start: that one
    was not the session's yet, so the shutdown did not close it. The call's stream was cut with no JSON-RPC
    error when the drain ended, and the gateway exited seconds late, after stopping the server it kept opening."""
    opening = tmp_path / "opening"
    opening.mkdir()
    env = {"OPENING_DIR": str(opening), "UPSTREAM": UPSTREAM}
    upstream = {"command": sys.executable, "args": ["-c", SLOW_SESSION_UPSTREAM], "env": env}
    config = write_config({"upstreams": {"slow": upstream}, "http": {"sse": True}})
    port = free_tcp_port()
    base = f"http://127.0.0.1:{port}"
    child = spawn(cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}"), env=gateway_env())
    answers: list[Any] = []

    async def call(http: httpx2.AsyncClient) -> None:
        try:
            if front == "sse":
                answers.append(await _sse_call(http, base, "echo"))
            else:
                answers.append(await _post_call(http, f"{base}/mcp", "legacy", "echo"))
        except httpx2.HTTPError as exc:
            answers.append(f"torn stream: {exc!r}")

    try:
        with anyio.fail_after(60):
            await wait_http_ready(child, port)
            async with httpx2.AsyncClient(timeout=30) as http, anyio.create_task_group() as tg:
                tg.start_soon(call, http)
                while True:
                    if starting := [int(path.name) for path in opening.iterdir() if path.name != "shared"]:
                        break
                    await anyio.sleep(0.05)  # nothing to wait on but the upstream's marker file
                signalled = time.monotonic()
                child.popen.send_signal(signal.SIGTERM)
            code = await anyio.to_thread.run_sync(child.popen.wait, abandon_on_cancel=True)
            took = time.monotonic() - signalled
    except BaseException as exc:
        exc.add_note(child.describe())
        raise
    finally:
        stop(child)
    assert answers == [
        {
            "jsonrpc": "2.0",
            "id": 2,
            "error": {
                "code": -32000,
                "message": "the gateway closed its connection to upstream 'slow' (shutting down)",
                "data": {"upstream": "slow"},
            },
        }
    ]
    assert code == 0
    assert took < 8, f"exited {took:.1f} s after SIGTERM"  # about 6 s (README), plus slack for a loaded machine
    assert [pid for pid in starting if pid_alive(pid)] == []


HANGING_START_UPSTREAM = """
import os, pathlib, time
pathlib.Path(os.environ["STARTED_FILE"]).write_text(str(os.getpid()))
time.sleep(3600)  # never answers its handshake, and ignores end of input
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_while_the_gateway_starts_stops_its_upstreams_and_exits_0(
    write_config: ConfigWriter, tmp_path: Path, signum: signal.Signals
) -> None:
    """Before the front served, nothing handled SIGTERM: the gateway died of it (-15) while connecting its
    upstreams, and left the server it was starting running (SIGINT: exit 130 with a KeyboardInterrupt)."""
    started = tmp_path / "started"
    env = {"STARTED_FILE": str(started)}
    upstream = {"command": sys.executable, "args": ["-c", HANGING_START_UPSTREAM], "env": env}
    config = write_config({"upstreams": {"slow": upstream}})
    port = free_tcp_port()
    child = spawn(cli_argv("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}"), env=gateway_env())
    try:
        with anyio.fail_after(60):
            while True:
                if started.exists() and started.read_text():
                    break
                await anyio.sleep(0.05)  # nothing to wait on but the upstream's marker file
            child.popen.send_signal(signum)
            code = await anyio.to_thread.run_sync(child.popen.wait, abandon_on_cancel=True)
    except BaseException as exc:
        exc.add_note(child.describe())
        raise
    finally:
        stop(child)
    upstream_pid = int(started.read_text())
    if pid_alive(upstream_pid):
        os.kill(upstream_pid, signal.SIGKILL)
        pytest.fail(f"the upstream being started (pid {upstream_pid}) outlived the gateway")
    assert code == 0, child.stderr_tail()


EVERYTHING = str(Path(__file__).resolve().parent.parent / "interop" / "everything_server.py")


async def test_mcp_param_header_mismatch_is_refused_like_a_direct_server(write_config: ConfigWriter) -> None:
    envelope = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "test_custom_headers", "arguments": {"region": "eu"}, "_meta": envelope},
    }
    headers = {
        **ACCEPT,
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": "test_custom_headers",
        "mcp-param-region": "us",  # the body says "eu"
    }
    config = write_config({"upstreams": {"everything": {"command": sys.executable, "args": [EVERYTHING]}}})
    direct_port = free_tcp_port()
    answers = []
    with anyio.fail_after(60):
        async with (
            running([sys.executable, EVERYTHING, "--http", str(direct_port)], port=direct_port, label="direct"),
            serve(config) as gateway,
            httpx2.AsyncClient() as http,
        ):
            for base in (f"http://127.0.0.1:{direct_port}", gateway):
                response = await http.post(f"{base}/mcp", json=body, headers=headers)
                answers.append((response.status_code, response.json().get("error", {}).get("code")))
    assert answers[0] == (400, -32020)  # the direct server
    assert answers[1] == answers[0]


HOLDING_UPSTREAM = """
import os, pathlib, anyio
from mcp.server.mcpserver import MCPServer
server = MCPServer("holding")
folder = pathlib.Path(os.environ["HOLD_DIR"])

@server.tool(description="Mark call `n` as started, then answer once the `release` file exists.")
async def hold(n: int) -> str:
    (folder / f"started-{n}").touch()
    while not (folder / "release").exists():
        await anyio.sleep(0.02)
    return f"held {n}"

server.run("stdio")
"""


@pytest.mark.parametrize("era", ERAS)
async def test_requests_of_one_session_past_http_max_requests_in_flight_are_refused_until_one_ends(
    write_config: ConfigWriter, tmp_path: Path, era: str
) -> None:
    """One client could hold any number of POSTs in flight in one session (each a task, its body and an
    upstream call): past `http.max_requests_in_flight` one more is refused, as on stdio, while the first
    ones complete; once they end, the session is served again."""
    upstream = {"command": sys.executable, "args": ["-c", HOLDING_UPSTREAM], "env": {"HOLD_DIR": str(tmp_path)}}
    config = write_config({"upstreams": {"slow": upstream}, "http": {"max_requests_in_flight": 2}})
    answers: dict[int, Any] = {}
    async with serve(config) as base, httpx2.AsyncClient(timeout=60) as http:
        url = f"{base}/mcp"
        headers = await _open_session(http, url, era)

        async def call(n: int) -> None:
            answers[n] = await _post_tool_call(http, url, era, headers, n, "hold", {"n": n})

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, 1)
                tg.start_soon(call, 2)
                while True:
                    if all((tmp_path / f"started-{n}").exists() for n in (1, 2)):
                        break
                    await anyio.sleep(0.05)  # nothing to wait on but the upstream's marker files
                await call(3)
                (tmp_path / "release").touch()
            await call(4)
    message = "too many requests in flight (the limit is 2); retry when one has ended"
    if era != "legacy":  # no token: the limit is this client address's
        message += "; requests without a token count per client address: for a limit of its own, give each client a "
        message += "token (`auth.tokens`)"
    assert answers[3]["error"] == {
        "code": -32603,
        "message": message,
        "data": {"reason": "too_many_requests_in_flight", "limit": 2, "setting": "http.max_requests_in_flight"},
    }
    assert [text_of_raw(answers[n]) for n in (1, 2, 4)] == ["held 1", "held 2", "held 4"]


async def _open_session(
    http: httpx2.AsyncClient, url: str, era: str, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """The headers of the session's requests, with `extra` (a handshake-era one opens its session first)."""
    if era != "legacy":
        return {**ACCEPT, **(extra or {}), "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call"}
    opened = await http.post(url, json=INITIALIZE, headers={**ACCEPT, **(extra or {})})
    headers = {
        **ACCEPT,
        **(extra or {}),
        "mcp-session-id": opened.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-11-25",
    }
    await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
    return headers


async def _post_tool_call(
    http: httpx2.AsyncClient,
    url: str,
    era: str,
    headers: dict[str, str],
    request_id: int | str,
    name: str,
    arguments: Any,
) -> Any:
    """One tools/call over raw HTTP in `era`: its JSON-RPC answer."""
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if era != "legacy":
        headers = {**headers, "mcp-name": name}
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    call = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    response = await http.post(url, json=call, headers=headers)
    lines = [line[5:] for line in response.text.splitlines() if line.startswith("data:")] or [response.text]
    return json.loads(lines[-1])


def text_of_raw(answer: Any) -> str:
    """The text of a raw tools/call answer (the whole answer when it is not a result)."""
    if "result" not in answer:
        return json.dumps(answer)
    return "".join(part.get("text", "") for part in answer["result"]["content"])


async def test_an_idle_connection_outlives_a_clients_own_idle_expiry(write_config: ConfigWriter) -> None:
    """uvicorn closed an idle connection after 5 s, as httpx gives up on one (its pool's keep-alive expiry):
    a client sending its next request at that moment had it cut (`httpx2.ReadError`, seen in the gateway
    benchmark). The gateway keeps idle connections for `http.keep_alive_s` (75 s)."""
    config = write_config(standard_config())
    request = b"GET /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\naccept: application/json\r\n\r\n"
    async with serve(config) as base:
        port = int(base.rsplit(":", 1)[1])
        with anyio.fail_after(30):
            async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                await stream.send(request)
                first = await _read_response(stream)
                await anyio.sleep(6)  # the idle time under test: past httpx's and uvicorn's 5 s
                await stream.send(request)
                try:
                    second = await _read_response(stream)
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    second = b"(closed by the gateway)"
    assert first.startswith(b"HTTP/1.1 406 ")
    assert second == first


async def _read_response(stream: anyio.abc.ByteStream) -> bytes:
    """One HTTP/1.1 response with a `content-length`: its status line and body."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive()
    head, body = data.split(b"\r\n\r\n", 1)
    length = next(
        int(line.split(b":", 1)[1]) for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")
    )
    while len(body) < length:
        body += await stream.receive()
    return head.split(b"\r\n", 1)[0] + b"\n" + body


async def test_a_handshake_era_request_reusing_an_id_in_flight_is_refused_and_the_first_still_answered(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    """mcp keys a session's answer streams by id: a second POST with the id of one in flight took over its
    stream, and the first POST never got its answer (it waited forever). As on stdio, the second is refused."""
    upstream = {"command": sys.executable, "args": ["-c", HOLDING_UPSTREAM], "env": {"HOLD_DIR": str(tmp_path)}}
    config = write_config({"upstreams": {"slow": upstream}})
    answers: dict[str, Any] = {}
    async with serve(config) as base, httpx2.AsyncClient(timeout=60) as http:
        url = f"{base}/mcp"
        headers = await _open_session(http, url, "legacy")

        async def call(label: str, request_id: int | str, n: int) -> None:
            answers[label] = await _post_tool_call(http, url, "legacy", headers, request_id, "hold", {"n": n})

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "first", 7, 1)
                while True:
                    if (tmp_path / "started-1").exists():
                        break
                    await anyio.sleep(0.05)  # nothing to wait on but the upstream's marker file
                await call("same id", 7, 2)
                (tmp_path / "release").touch()
            await call("id free again", 7, 3)
    assert answers["same id"] == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {
            "code": -32600,
            "message": "Invalid Request: id already in use by a request in flight",
            "data": {"field": "id"},
        },
    }
    assert text_of_raw(answers["first"]) == "held 1"
    assert text_of_raw(answers["id free again"]) == "held 3"
    assert not (tmp_path / "started-2").exists()


async def test_a_legacy_sse_request_reusing_an_id_in_flight_is_refused_and_the_first_still_answered(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    """On `/sse` the second request with the id of one in flight ran too, and both answers went out on the
    stream with the same id: the client could not tell them apart. As on stdio and Streamable HTTP, it is
    refused (ids 7 and "7" count as one), and the id is free again once the first is answered."""
    upstream = {"command": sys.executable, "args": ["-c", HOLDING_UPSTREAM], "env": {"HOLD_DIR": str(tmp_path)}}
    config = write_config({"upstreams": {"slow": upstream}, "http": {"sse": True}})
    refused = {
        "code": -32600,
        "message": "Invalid Request: id already in use by a request in flight",
        "data": {"field": "id"},
    }

    def call(request_id: int | str, n: int) -> dict[str, Any]:
        params = {"name": "hold", "arguments": {"n": n}}
        return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}

    async with serve(config) as base, httpx2.AsyncClient(timeout=60) as http:
        with anyio.fail_after(60):
            async with http.stream("GET", f"{base}/sse", headers={"accept": "text/event-stream"}) as stream:
                lines = (line[5:].strip() async for line in stream.aiter_lines() if line.startswith("data:"))
                post = base + await anext(lines)
                events = (json.loads(line) async for line in lines)
                await http.post(post, json=INITIALIZE)
                assert "result" in await anext(events)
                await http.post(post, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
                await http.post(post, json=call(7, 1))
                while True:
                    if (tmp_path / "started-1").exists():
                        break
                    await anyio.sleep(0.05)  # nothing to wait on but the upstream's marker file
                await http.post(post, json=call(7, 2))
                assert await anext(events) == {"jsonrpc": "2.0", "id": 7, "error": refused}
                await http.post(post, json=call("7", 2))
                assert await anext(events) == {"jsonrpc": "2.0", "id": "7", "error": refused}
                (tmp_path / "release").touch()
                assert text_of_raw(await anext(events)) == "held 1"
                await http.post(post, json=call(7, 3))
                assert text_of_raw(await anext(events)) == "held 3"
    assert not (tmp_path / "started-2").exists()


ONCE_UPSTREAM = """
import os, pathlib, runpy, sys
started = pathlib.Path(os.environ["STARTED"])
if started.exists():  # a session's own: it fails to start
    sys.exit(3)
started.touch()
sys.argv = [os.environ["UPSTREAM"]]
runpy.run_path(os.environ["UPSTREAM"], run_name="__main__")
"""


async def test_a_session_whose_upstream_sessions_all_fail_to_open_names_every_upstream(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    """Every upstream refused a handshake-era session its own: each call got -32000 naming the first configured
    upstream (and no `data`), even a call to another one's tool. The error now names them all."""

    def upstream(name: str) -> dict[str, Any]:
        env = {"STARTED": str(tmp_path / name), "UPSTREAM": UPSTREAM, "E2E_SCHEME": name}
        return {"command": sys.executable, "args": ["-c", ONCE_UPSTREAM], "env": env, "era": "legacy"}

    config = write_config({"upstreams": {"a": upstream("a"), "b": upstream("b")}})
    async with serve(config) as base, httpx2.AsyncClient(timeout=60) as http:
        url = f"{base}/mcp"
        headers = await _open_session(http, url, "legacy")
        with anyio.fail_after(60):
            answers = [await _post_tool_call(http, url, "legacy", headers, n, "b__echo", {"text": "x"}) for n in (1, 2)]
    for answer in answers:
        error = answer["error"]
        assert (error["code"], error["data"]) == (-32000, {"upstreams": ["a", "b"]})
        assert error["message"].startswith("no upstream session could be opened: upstream 'a' failed to start: ")
        assert "; upstream 'b' failed to start: " in error["message"]


async def test_an_unauthenticated_post_naming_a_session_gets_its_401_before_sending_its_body(
    token_gateway: str,
) -> None:
    """The request-id check of handshake-era sessions ran before mcp's auth: a POST naming a session got no 401
    until its whole body was in (and parsed). Now nothing of an unauthenticated request's body is read."""
    port = int(token_gateway.rsplit(":", 1)[1])
    head = (
        f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
        "accept: application/json, text/event-stream\r\nmcp-session-id: 0123abcd\r\ncontent-length: 100000\r\n\r\n"
    )
    with anyio.fail_after(10):
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(head.encode() + b'{"jsonrpc": "2.0", "id": 1, ')  # the rest never comes
            answer = b""
            while b"\r\n\r\n" not in answer:
                answer += await stream.receive()
    status, *headers = answer.split(b"\r\n\r\n")[0].split(b"\r\n")
    assert status == b"HTTP/1.1 401 Unauthorized"
    assert any(header.lower().startswith(b"www-authenticate: bearer ") for header in headers)


#: `HOLDING_UPSTREAM`, writing every line it reads to the file `$WIRE_LOG` (what the gateway sent it).
WIRE_LOGGING_UPSTREAM = """
import os, sys, threading
original = os.fdopen(os.dup(0), "rb", buffering=0)
read_end, write_end = os.pipe()

def copy():
    with open(os.environ["WIRE_LOG"], "ab", buffering=0) as log, os.fdopen(write_end, "wb", buffering=0) as out:
        for line in original:
            log.write(line)
            out.write(line)

os.dup2(read_end, 0)
threading.Thread(target=copy, daemon=True).start()
exec(os.environ["HOLDING_UPSTREAM"])
"""


def wire_logging_upstream(tmp_path: Path) -> dict[str, Any]:
    env = {"HOLD_DIR": str(tmp_path), "WIRE_LOG": str(tmp_path / "wire.log"), "HOLDING_UPSTREAM": HOLDING_UPSTREAM}
    return {"command": sys.executable, "args": ["-c", WIRE_LOGGING_UPSTREAM], "env": env}


def sent_upstream(tmp_path: Path) -> list[Any]:
    """The messages the upstream read, in order."""
    wire = tmp_path / "wire.log"
    return [json.loads(line) for line in wire.read_bytes().splitlines()] if wire.exists() else []


async def test_deleting_a_session_answers_its_call_in_flight_with_an_error_and_cancels_it_upstream(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    """mcp's `DELETE` closed the streams of the session's calls in flight: their clients got HTTP 200 with no
    JSON-RPC answer at all. The calls now end first: -32000 naming the ended session on their own streams,
    `notifications/cancelled` upstream, and a `cancelled` record with that error in the audit trail. Another
    principal's `DELETE` ends nothing (mcp answers it 404)."""
    audit = {"enabled": True, "store": str(tmp_path / "audit.db"), "key_file": str(tmp_path / "audit-key")}
    upstreams = {"slow": wire_logging_upstream(tmp_path)}
    config = write_config({"upstreams": upstreams, "audit": audit, "auth": {"tokens": ["token-a", "token-b"]}})
    answers: dict[str, Any] = {}
    async with serve(config) as base, httpx2.AsyncClient(timeout=60) as http:
        url = f"{base}/mcp"
        headers = await _open_session(http, url, "legacy", {"authorization": "Bearer token-a"})

        async def call() -> None:
            answers["call"] = await _post_tool_call(http, url, "legacy", headers, 7, "hold", {"n": 1})

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await until(lambda: (tmp_path / "started-1").exists())
                refused = await http.delete(url, headers={**headers, "authorization": "Bearer token-b"})
                listed = await http.post(url, json={"jsonrpc": "2.0", "id": 8, "method": "tools/list"}, headers=headers)
                deleted = await http.delete(url, headers=headers)
            await until(lambda: any(m.get("method") == "notifications/cancelled" for m in sent_upstream(tmp_path)))
    assert (refused.status_code, deleted.status_code) == (404, 200)
    assert '"result":{"tools":[' in listed.text  # the session went on after the refused DELETE
    message = "the client ended its session (HTTP DELETE): this request was cancelled"
    error = {"code": -32000, "message": message, "data": {"reason": "session_ended"}}
    assert answers["call"] == {"jsonrpc": "2.0", "id": 7, "error": error}
    (forwarded,) = [m for m in sent_upstream(tmp_path) if m.get("method") == "tools/call"]
    cancelled = [m["params"] for m in sent_upstream(tmp_path) if m.get("method") == "notifications/cancelled"]
    assert {"requestId": forwarded["id"], "reason": "caller cancelled"} in cancelled
    store = SqliteStore(tmp_path / "audit.db", create=False)
    try:
        bodies = [orjson.loads(raw)["body"] for _, raw in store.iter_records()]
    finally:
        store.close()
    legs = [(b["phase"], b["decision"], b["status"], b["error"]) for b in bodies if b.get("event") == "tools/call"]
    assert legs == [
        ("request", "allow", "success", None),
        ("response", "error", "cancelled", {"code": -32000, "message": message, "reason": "session_ended"}),
    ]


async def test_anonymous_2026_clients_at_other_addresses_have_in_flight_budgets_of_their_own(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    """Every 2026-07-28 request without a token counted against one budget: one client holding
    `http.max_requests_in_flight` slow calls starved every other client. Each client address now has its own;
    `X-Forwarded-For` (which uvicorn believed from any loopback client) does not make a new one."""
    upstream = {"command": sys.executable, "args": ["-c", HOLDING_UPSTREAM], "env": {"HOLD_DIR": str(tmp_path)}}
    config = write_config({"upstreams": {"slow": upstream}, "http": {"max_requests_in_flight": 2}})
    answers: dict[str, Any] = {}

    def client(address: str) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(timeout=60, transport=httpx2.AsyncHTTPTransport(local_address=address))

    async with serve(config) as base, client("127.0.0.1") as first, client("127.0.0.2") as other:
        url = f"{base}/mcp"
        headers = await _open_session(first, url, "2026-07-28")

        async def call(label: str, http: httpx2.AsyncClient, n: int, extra: dict[str, str] | None = None) -> None:
            answers[label] = await _post_tool_call(
                http, url, "2026-07-28", {**headers, **(extra or {})}, n, "hold", {"n": n}
            )

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "first 1", first, 1)
                tg.start_soon(call, "first 2", first, 2)
                await until(lambda: all((tmp_path / f"started-{n}").exists() for n in (1, 2)))
                await call("spoofed", first, 3, {"x-forwarded-for": "10.9.8.7"})
                tg.start_soon(call, "other", other, 4)
                await until(lambda: (tmp_path / "started-4").exists())
                (tmp_path / "release").touch()
    assert [text_of_raw(answers[label]) for label in ("first 1", "first 2", "other")] == ["held 1", "held 2", "held 4"]
    error = answers["spoofed"]["error"]
    assert (error["code"], error["data"]["setting"]) == (-32603, "http.max_requests_in_flight")
    assert error["message"].endswith(
        "requests without a token count per client address: for a limit of its own, give each client a token "
        "(`auth.tokens`)"
    )


@pytest.mark.parametrize("request_id", [None, 1.5, {"n": 1}, True])
async def test_a_handshake_era_request_without_a_usable_id_is_not_relayed_past_the_chain(
    write_config: ConfigWriter, tmp_path: Path, request_id: Any
) -> None:
    """mcp reads a request whose id is not a string or an integer as a notification, and the gateway relayed
    every client notification to the upstreams: such a `tools/call` reached the upstream ungoverned. The
    HTTP front's shape check now refuses it (400, -32600 naming `id`) before mcp reads it, and nothing runs."""
    config = write_config({"upstreams": {"slow": wire_logging_upstream(tmp_path)}})
    async with serve(config) as base, httpx2.AsyncClient(timeout=60) as http:
        url = f"{base}/mcp"
        headers = await _open_session(http, url, "legacy")
        call = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": "hold", "arguments": {}}}
        with anyio.fail_after(60):
            sent = await http.post(url, json=call, headers=headers)
            await http.post(url, json={"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}, headers=headers)
            await until(
                lambda: any(m.get("method") == "notifications/roots/list_changed" for m in sent_upstream(tmp_path))
            )
    assert sent.status_code == 400
    assert sent.json()["error"]["data"] == {"field": "id"}
    assert [m for m in sent_upstream(tmp_path) if m.get("method") == "tools/call"] == []


async def test_a_get_resuming_with_last_event_id_opens_the_sessions_stream(write_config: ConfigWriter) -> None:
    """mcp without an event store (the gateway keeps none, and sends no event ids) answered a GET carrying
    `Last-Event-ID` with nothing: uvicorn sent 500 and logged an error. The header is ignored now, as the
    TypeScript SDK ignores it without an event store, and the GET opens the session's stream."""
    config = write_config(standard_config())
    async with serve(config) as base, httpx2.AsyncClient(timeout=30) as http:
        url = f"{base}/mcp"
        headers = await _open_session(http, url, "legacy")
        stream = {**headers, "accept": "text/event-stream", "last-event-id": "0123"}
        with anyio.fail_after(30):
            async with http.stream("GET", url, headers=stream) as response:
                status, kind = response.status_code, response.headers.get("content-type", "")
    assert (status, kind.split(";")[0]) == (200, "text/event-stream")
