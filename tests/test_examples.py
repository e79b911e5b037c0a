"""The README demo and the examples run as users run them."""

from __future__ import annotations

import base64
import contextlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jwt
import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric import ec
from helpers import child_env, cli_argv, free_tcp_port, http_transport, running, stderr_log, stdio_transport
from mcp import Client, MCPError

ROOT = Path(__file__).resolve().parent.parent


def test_demo_shows_the_sdk_the_gateway_and_a_verified_audit_trail() -> None:
    done = subprocess.run(
        [sys.executable, "examples/demo.py"], cwd=ROOT, capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert '"to": "[EMAIL]"' in out
    assert "blocked: validation_failed by deny-dangerous-tools" in out
    assert "delete_everything is hidden" in out and "delete_everything," not in out.split("tools the agent")[1][:80]
    assert "what the upstream stored: deploy with key [REDACTED:aws_access_key], ping [REDACTED:email]" in out
    assert '"interceptor": "tool-policy"' in out
    assert '"interceptor": "prompt-injection"' in out and '"phase": "response"' in out
    assert "sampling through the gateway: model says: 42" in out
    assert "audit verify: OK:" in out


def test_gateway_example_config_checks(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mcp_interceptors", "gateway", "--check", "examples/gateway.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "examples/gateway.yaml: configuration is valid" in done.stdout
    assert "deny-dangerous-tools [validation] from validators" in done.stdout


def invoke_example(tmp_path: Path, server: str, interceptor: str, arguments: dict[str, object]) -> Any:
    """`mcp-interceptors invoke` of one interceptor of an example server on a `tools/call` request."""
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps({"method": "tools/call", "params": {"name": "t", "arguments": arguments}}))
    invoke = ["invoke", interceptor, "--event", "tools/call", "--phase", "request", "--payload", f"@{payload}"]
    done = subprocess.run(
        [sys.executable, "-m", "mcp_interceptors", *invoke, "--", sys.executable, f"examples/{server}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_validator_example_max_size_warns_as_it_says(tmp_path: Path) -> None:
    """Its description says it warns (severity warn); it used to send `info` messages."""
    result = invoke_example(tmp_path, "validator_server.py", "max-size", {"x": "a" * 70000})
    assert result["valid"] is True
    assert [m["severity"] for m in result["messages"]] == ["warn"]


def test_mutator_example_redacts_a_long_string_in_linear_time(tmp_path: Path) -> None:
    """Its e-mail pattern was tried from every character of a run with no `@`: a 200 KB argument kept the
    in-process host (and so the whole gateway of examples/gateway.yaml) busy for minutes."""
    text = "x" * 200_000 + " mail a.b+c@example.co.uk"
    result = invoke_example(tmp_path, "mutator_server.py", "redact-emails", {"text": text})
    assert result["payload"]["params"]["arguments"]["text"] == "x" * 200_000 + " mail [EMAIL]"


# ---------------------------------------------------------------- the ready-made gateway configs

EXAMPLE_CONFIGS = sorted(path.name for path in (ROOT / "examples").glob("*.yaml"))


def example_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a user of the examples: this Python first on PATH (the configs run `python`)."""
    env = child_env(extra)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def examples_copy(tmp_path: Path) -> Path:
    """A copy of examples/, so what a run writes (audit stores, keys) stays out of the checkout."""
    target = tmp_path / "examples"
    shutil.copytree(ROOT / "examples", target, ignore=shutil.ignore_patterns("__pycache__", ".audit"))
    return target


@pytest.mark.parametrize("config", EXAMPLE_CONFIGS)
def test_every_example_config_checks(config: str, tmp_path: Path) -> None:
    examples = examples_copy(tmp_path)
    done = subprocess.run(
        cli_argv("gateway", "--check", str(examples / config)),
        env=example_env({"HOME": str(tmp_path)}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "configuration is valid" in done.stdout


def refusal(error: MCPError) -> tuple[int, str | None]:
    data = error.data if isinstance(error.data, dict) else {}
    return error.code, data.get("interceptor")


@pytest.mark.e2e
@pytest.mark.anyio
async def test_the_custom_interceptor_example_requires_tickets_and_hides_internal_hosts(tmp_path: Path) -> None:
    examples = examples_copy(tmp_path)
    argv = cli_argv("gateway", "--config", str(examples / "custom-interceptor.yaml"))
    with stderr_log("gateway") as log, anyio.fail_after(120):
        async with Client(stdio_transport(argv, log, env=example_env())) as client:
            with pytest.raises(MCPError) as refused:
                await client.call_tool("save_note", {"name": "ops", "text": "deploy"})
            assert refusal(refused.value) == (-32602, "require-ticket")
            saved = await client.call_tool("save_note", {"name": "ops", "text": "deploy", "ticket": "OPS-1234"})
            assert not saved.is_error, saved
            echoed = await client.call_tool("echo", {"text": "ask db1.corp.example.com, key AKIAZ7QH4XK2M9PL3TWB"})
            assert echoed.content[0].text == "ask [internal-host], key [REDACTED:aws_access_key]"  # type: ignore[union-attr]
    argv = cli_argv("audit", "verify", "--config", str(examples / "custom-interceptor.yaml"))
    verify = await anyio.run_process(argv, check=False)
    assert verify.returncode == 0 and verify.stdout.startswith(b"OK: "), verify.stdout + verify.stderr


def jwks_and_signer(folder: Path) -> tuple[Path, Any]:
    """A JWKS file with one EC P-256 public key, and its private key (the identity provider's)."""
    key = ec.generate_private_key(ec.SECP256R1())
    numbers = key.public_key().public_numbers()

    def b64(n: int) -> str:
        return base64.urlsafe_b64encode(n.to_bytes(32, "big")).rstrip(b"=").decode()

    jwk = {"kty": "EC", "crv": "P-256", "x": b64(numbers.x), "y": b64(numbers.y), "kid": "k1", "alg": "ES256"}
    path = folder / "jwks.json"
    path.write_text(json.dumps({"keys": [jwk]}))
    return path, key


def token(key: Any, scope: str = "mcp:tools") -> str:
    claims = {"sub": "alice", "iss": "https://idp.test/", "aud": "mcp-gateway", "scope": scope}
    return jwt.encode({**claims, "exp": int(time.time()) + 300}, key, algorithm="ES256", headers={"kid": "k1"})


@pytest.mark.e2e
@pytest.mark.anyio
async def test_the_team_example_serves_jwt_callers_over_http(tmp_path: Path) -> None:
    examples = examples_copy(tmp_path)
    jwks, key = jwks_and_signer(tmp_path)
    wiki_port, port = free_tcp_port(), free_tcp_port()
    env = example_env(
        {
            "JWKS_FILE": str(jwks),
            "JWT_ISSUER": "https://idp.test/",
            "WIKI_MCP_URL": f"http://127.0.0.1:{wiki_port}/mcp",
            "AUDIT_STORE": str(tmp_path / "audit.db"),
            "AUDIT_KEY_FILE": str(tmp_path / "audit-key"),
        }
    )
    wiki = [sys.executable, str(examples / "upstream_server.py"), "--http", str(wiki_port)]
    gateway = cli_argv("gateway", "--config", str(examples / "team-http.yaml"), "--http", f"127.0.0.1:{port}")
    url = f"http://127.0.0.1:{port}/mcp"
    with anyio.fail_after(180):
        async with (
            running(wiki, port=wiki_port, env={**env, "NOTES_SCHEME": "wiki"}),
            running(gateway, port=port, env=env),
        ):
            bearer = {"Authorization": f"Bearer {token(key)}"}
            async with Client(http_transport(url, headers=bearer)) as client:
                tools = {tool.name for tool in (await client.list_tools()).tools}
                assert {"wiki__echo", "notes__echo"} <= tools and "notes__delete_everything" not in tools
                echoed = await client.call_tool("wiki__echo", {"text": "mail ana@example.com"})
                assert echoed.content[0].text == "mail [REDACTED:email]"  # type: ignore[union-attr]
                assert "io.github.mcp-interceptors/receipt" in (echoed.meta or {})
            async with httpx2.AsyncClient() as http:
                anonymous = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
                assert anonymous.status_code == 401
                narrow = {"Authorization": f"Bearer {token(key, scope='other')}"}
                assert (
                    await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=narrow)
                ).status_code == 403
                metrics = await http.get(f"http://127.0.0.1:{port}/metrics", headers=bearer)
                assert metrics.status_code == 200 and "mcp_gateway_requests_total" in metrics.text


def require(variable: str, reason: str) -> None:
    """Skip, unless CI set `variable` (then a missing prerequisite fails the test)."""
    if os.environ.get(variable):
        pytest.fail(f"{variable} is set but {reason}")
    pytest.skip(f"{reason} (set {variable} to fail instead)")


@contextlib.contextmanager
def web_page(text: str) -> Iterator[str]:
    """A page served on loopback (what the fetch server fetches); its URL."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/page.html"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.e2e
@pytest.mark.anyio
async def test_the_desktop_example_guards_the_real_filesystem_git_and_fetch_servers(tmp_path: Path) -> None:
    """examples/desktop.yaml as a desktop client runs it: the filesystem server from npm, mcp-server-git and
    mcp-server-fetch from PyPI (in CI, installed by .ci/run and installed or run offline)."""
    servers = os.environ.get("MCPI_PY_SERVERS", "")
    path = os.pathsep.join(filter(None, [servers, os.environ.get("PATH", "")]))
    if shutil.which("npm", path=path) is None:
        require("MCPI_REQUIRE_NPM", "npm is not installed (apt-get install npm)")
    if shutil.which("mcp-server-git", path=path) is None or shutil.which("mcp-server-fetch", path=path) is None:
        require("MCPI_REQUIRE_PY_SERVERS", "mcp-server-git or mcp-server-fetch is not on PATH or in MCPI_PY_SERVERS")
    examples = examples_copy(tmp_path)
    config = yaml.safe_load((examples / "desktop.yaml").read_text())
    # Loopback pages for the test: the shipped config keeps mcp-server-fetch's refusal of private addresses.
    config["upstreams"]["fetch"]["args"] = ["--allow-private-ips", "--ignore-robots-txt"]
    projects, repo = tmp_path / "projects", tmp_path / "repo"
    projects.mkdir()
    (projects / ".env").write_text("AWS_ACCESS_KEY_ID=AKIAZ7QH4XK2M9PL3TWB\n")
    repo.mkdir()
    for command in (["init", "-q"], ["add", "."], ["commit", "-qm", "first commit, by ana@example.com"]):
        (repo / "README").write_text("hello\n")
        await anyio.run_process(["git", *command], cwd=repo, env=git_env(tmp_path))
    env = example_env({"HOME": str(tmp_path), "MCP_PROJECTS_DIR": str(projects), "MCP_GIT_REPO": str(repo)})
    env["PATH"] = os.pathsep.join(filter(None, [str(Path(sys.executable).parent), servers, os.environ["PATH"]]))
    env.update(npm_config_update_notifier="false", npm_config_cache=os.environ.get("MCPI_NPM_CACHE", npm_cache()))
    if os.environ.get("MCPI_NPM_CACHE"):
        env["npm_config_offline"] = "true"  # CI: npm installs the server .ci/run cached
    # The package npx would run, installed first: npx's own start (seconds on a loaded machine) would make
    # the server miss the gateway's 10 s window after the first upstream connected.
    package = config["upstreams"]["files"]["args"][1]
    npm = ["npm", "install", "--prefix", str(tmp_path / "npm"), "--no-audit", "--no-fund", package]
    with anyio.fail_after(300):
        await anyio.run_process(npm, env=env)
    files = config["upstreams"]["files"]
    files["command"], files["args"] = str(tmp_path / "npm/node_modules/.bin/mcp-server-filesystem"), files["args"][2:]
    (examples / "desktop-test.yaml").write_text(yaml.safe_dump(config))
    argv = cli_argv("gateway", "--config", str(examples / "desktop-test.yaml"))
    page = "<html><body><p>Contact ana@example.com, key AKIAZ7QH4XK2M9PL3TWB.</p></body></html>"
    with web_page(page) as url, stderr_log("gateway") as log, anyio.fail_after(240):
        async with Client(stdio_transport(argv, log, env=env)) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            assert {"files__read_text_file", "git__git_log", "fetch__fetch"} <= tools
            assert not {"files__write_file", "git__git_commit"} & tools
            read = await client.call_tool("files__read_text_file", {"path": str(projects / ".env")})
            assert read.content[0].text == "AWS_ACCESS_KEY_ID=[REDACTED:aws_access_key]\n"  # type: ignore[union-attr]
            log_text = (await client.call_tool("git__git_log", {"repo_path": str(repo)})).content[0].text  # type: ignore[union-attr]
            assert "first commit, by [REDACTED:email]" in log_text
            with pytest.raises(MCPError) as refused:
                await client.call_tool("git__git_commit", {"repo_path": str(repo), "message": "x"})
            assert refusal(refused.value) == (-32602, "tool-policy")
            fetched = (await client.call_tool("fetch__fetch", {"url": url})).content[0].text  # type: ignore[union-attr]
            assert "Contact [REDACTED:email], key [REDACTED:aws_access_key]" in fetched
    verify = await anyio.run_process(
        cli_argv("audit", "verify", "--config", str(examples / "desktop-test.yaml")), env=env, check=False
    )
    assert verify.returncode == 0 and verify.stdout.startswith(b"OK: "), verify.stdout + verify.stderr


def git_env(home: Path) -> dict[str, str]:
    return {
        **os.environ,
        "HOME": str(home),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }


def npm_cache() -> str:
    """The user's own npm cache (the test gives the gateway another HOME)."""
    return str(Path.home() / ".npm")
