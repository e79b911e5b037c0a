"""The gateway's command line as a user meets it: `--check` (text and JSON), `config-schema`, config
errors that name the file, the field path and the fix, and the no-config `--guard ... -- cmd` shortcut.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from e2e_support import UPSTREAM, ConfigWriter, gateway_env, standard_config, text_of, upstream_entry
from helpers import cli_argv, pid_alive, run_cli, stderr_log, stdio_transport
from mcp import Client

from mcp_interceptors.guards.pinning import pin_document

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

EVENTS = [
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "sampling/createMessage",
    "elicitation/create",
    "roots/list",
]


def _direction(event: str, phase: str) -> str:
    """By default the gateway governs every message at its sending point: what it forwards."""
    return "sending"


async def test_check_prints_the_resolved_plan_for_every_event_and_phase(write_config: ConfigWriter) -> None:
    config = write_config(standard_config(chain={"deadline_ms": 2500}))
    done = await run_cli("gateway", "--check", str(config), env=gateway_env())
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    assert lines[0] == f"{config}: configuration is valid"
    assert f"  e2e: stdio {sys.executable} {UPSTREAM}  (tools/prompts as <name>)" in lines
    assert "chain deadline: 2500.0 ms" in lines
    rows = [line.strip() for line in lines if line.startswith("  ") and not line.startswith("    ")]
    assert [row.split(" (")[0] for row in rows[1:]] == [f"{e} {p}" for e in EVENTS for p in ("request", "response")]
    assert "interception point: send (sending: mutate, then validate; receiving: validate, then mutate)" in lines
    start = lines.index("  tools/call request (sending):")
    assert lines[start : start + 4] == [
        "  tools/call request (sending):",
        "    1. redact-secrets [mutation] from e2e-guards: mode=active failOpen=false priority=0",
        "    2. deny-tools [validation] from e2e-guards: mode=active failOpen=false",
        "  tools/call response (sending): no interceptors",
    ]
    assert "  sampling/createMessage request (sending):" in lines
    assert "  roots/list response (sending): no interceptors" in lines


async def test_check_warns_about_stdio_commands_this_machine_cannot_find(write_config: ConfigWriter) -> None:
    upstreams = {"found": upstream_entry(), "missing": {"command": "no-such-server-xyz"}, "gone": {"command": "./x.sh"}}
    config = write_config({"upstreams": upstreams})
    done = await run_cli("gateway", "--check", str(config), env=gateway_env())
    assert done.returncode == 0  # a config may be checked on another machine than the one that runs it
    assert done.stderr.decode().splitlines() == [
        "warning: upstream 'missing': command 'no-such-server-xyz' not found on PATH (upstreams.missing.command)",
        "warning: upstream 'gone': command './x.sh' not found (upstreams.gone.command)",
    ]


async def test_check_shows_both_points_in_order_when_configured(write_config: ConfigWriter) -> None:
    config = write_config(standard_config(chain={"points": ["send", "receive"]}))
    done = await run_cli("gateway", "--check", str(config), env=gateway_env())
    assert done.returncode == 0, done.stderr.decode()
    lines = done.stdout.decode().splitlines()
    receive = lines.index("  tools/call request (receiving):")
    send = lines.index("  tools/call request (sending):")
    assert receive < send  # the receiving point gates raw input before the sending point
    assert lines[receive + 1].strip().startswith("1. deny-tools [validation]")


async def test_check_json_is_the_same_plan_as_data(write_config: ConfigWriter) -> None:
    config = write_config(
        standard_config(
            interceptors={
                "hosts": [{"module": "e2e_hosts:host"}],
                "overrides": {"deny-tools": {"mode": "audit", "timeout_ms": 750}},
            }
        )
    )
    done = await run_cli("gateway", "--check", str(config), "--json", env=gateway_env())
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    assert report["file"] == str(config)
    # What the text form says besides the plan: each upstream, the chain deadline, the interception points.
    assert set(report["upstreams"]) == set(standard_config()["upstreams"])
    assert all(set(upstream) == {"kind", "target", "prefix"} for upstream in report["upstreams"].values())
    assert "deadlineMs" in report and report["points"]
    assert [(row["event"], row["phase"], row["direction"]) for row in report["plan"]] == [
        (e, p, _direction(e, p)) for e in EVENTS for p in ("request", "response")
    ]
    by_key = {(row["event"], row["phase"]): row for row in report["plan"]}
    assert by_key[("tools/call", "request")]["steps"] == [
        {
            "interceptor": "redact-secrets",
            "source": "e2e-guards",
            "type": "mutation",
            "mode": "active",
            "failOpen": False,
            "priority": 0,
            "timeoutMs": None,
        },
        {
            "interceptor": "deny-tools",
            "source": "e2e-guards",
            "type": "validation",
            "mode": "audit",
            "failOpen": False,
            "priority": None,
            "timeoutMs": 750.0,
        },
    ]
    assert by_key[("prompts/get", "request")]["steps"] == []


async def test_config_schema_prints_a_json_schema_of_the_config() -> None:
    done = await run_cli("config-schema")
    assert done.returncode == 0
    schema = json.loads(done.stdout)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == "mcp-interceptors gateway configuration"
    assert schema["additionalProperties"] is False
    assert {"upstreams", "interceptors", "chain", "auth", "http", "expose_execute_chain"} <= set(schema["properties"])
    assert schema["required"] == ["upstreams"] and schema["properties"]["upstreams"]["minProperties"] == 1


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        (
            "upstreams:\n  e2e:\n    comand: python\n",
            "upstreams.e2e.comand: Extra inputs are not permitted "
            "(fix: remove the key or check its spelling against `mcp-interceptors config-schema`)",
        ),
        (
            "upstreams:\n  e2e:\n    url: http://127.0.0.1:9/mcp\n    bearer_token: ${E2E_UNSET_TOKEN}\n",
            "upstreams.e2e.bearer_token: environment variable E2E_UNSET_TOKEN is not set "
            "(fix: export E2E_UNSET_TOKEN=... or write ${E2E_UNSET_TOKEN:-default})",
        ),
        (
            "upstreams:\n  e2e:\n    url: ftp://example.com/mcp\n",
            "upstreams.e2e.url: `url` must be an http(s) URL, got 'ftp://example.com/mcp' "
            "(fix: give the server's http(s) URL, e.g. http://127.0.0.1:8003/mcp)",
        ),
        (
            "upstreams:\n  e2e:\n    url: 'http://'\n",
            "upstreams.e2e.url: `url` 'http://' names no host",
        ),
        (
            "upstreams:\n  e2e:\n    url: http://127.0.0.1:99999/mcp\n",
            "upstreams.e2e.url: `url` 'http://127.0.0.1:99999/mcp' is not a valid URL",
        ),
        (
            "upstreams:\n  e2e:\n    command: python\ninterceptors:\n  guards:\n    - name: secretz\n",
            "interceptors.guards[0].name: unknown guard 'secretz' (fix: use one of: ",
        ),
        (
            "upstreams:\n  e2e:\n    command: python\ninterceptors:\n  config:\n    secretz: {placeholder: x}\n",
            "interceptors.config.secretz: no configured source advertises an interceptor named 'secretz' "
            "(fix: use one of: (none configured))",
        ),
        (
            "upstreams:\n  e2e:\n    command: python\ninterceptors:\n  guards: [{name: secrets}]\n"
            "  config:\n    secrets: {placeholder: 5}\n",
            "interceptors.config.secrets.placeholder: 5 is not of type 'string' "
            "(fix: give a value the configSchema of 'secrets' allows (the guards' are in docs/guards.md))",
        ),
        (
            "upstreams:\n  e2e:\n    command: python\ninterceptors:\n  guards: [{name: secrets}]\n"
            "  config:\n    secrets: {action: deny}\n",
            "interceptors.config.secrets: Additional properties are not allowed ('action' was unexpected) "
            "(fix: remove the key; keys an interceptor does not advertise (a guard's build-only keys) go in "
            "interceptors.guards[i].config)",
        ),
        (
            # R23: the configSchema allows any string; the guard refuses it when it compiles the override
            "upstreams:\n  e2e:\n    command: python\ninterceptors:\n  guards: [{name: rate-limit}]\n"
            "  config:\n    rate-limit: {limits: [{limit: lots}]}\n",
            "interceptors.config.rate-limit: guard 'rate-limit': config.limits[0].limit 'lots' is not a rate limit"
            " of at least 1 call; write e.g. '10/minute' (to refuse a tool outright, use tool-policy) "
            "(fix: give a value guard 'rate-limit' accepts (see docs/guards.md))",
        ),
        (
            "upstreams:\n  e2e:\n    command: python\ninterceptors:\n  guards: [{name: prompt-injection}]\n"
            "  config:\n    prompt-injection: {extra_phrases: ['(']}\n",
            "interceptors.config.prompt-injection: guard 'prompt-injection': config.extra_phrases[0] does not compile",
        ),
        (  # the store's folder would be the config file itself: found by --check, named at start
            "upstreams:\n  e2e:\n    command: python\naudit: {enabled: true, store: gateway.yaml/audit.db}\n",
            "audit.store: cannot create the folder of ",
        ),
        (
            "upstreams: {}\n",
            "upstreams: at least one upstream server is needed (fix: see `mcp-interceptors config-schema`)",
        ),
        (
            "upstreams:\n  a: {command: python, prefix: gh}\n  b: {command: python, prefix: gh}\n",
            "upstreams.b.prefix: 'gh' is also the prefix of upstream 'a', so calls could not be routed "
            "(fix: give upstream 'a' or 'b' another `prefix`",
        ),
        (
            "upstreams:\n  e2e:\n    command: python\ninterceptors:\n  overrides:\n"
            "    x: {priority: {request: high}}\n",
            "interceptors.overrides.x.priority: {'request': 'high'} is no priority: give an integer from ",
        ),
        (
            "upstreams:\n  e2e:\n    command: python\ninterceptors:\n  overrides:\n    x: {priority: 3000000000}\n",
            "interceptors.overrides.x.priority: 3000000000 is no priority: give an integer from ",
        ),
        (
            "name: no-upstreams-key\n",
            "upstreams: at least one upstream server is needed (fix: see `mcp-interceptors config-schema`)",
        ),
    ],
    ids=[
        "unknown-key",
        "missing-env",
        "bad-url",
        "url-without-host",
        "url-port-out-of-range",
        "unknown-guard",
        "config-unknown-interceptor",
        "config-wrong-type",
        "config-build-only-key",
        "config-value-the-guard-refuses",
        "config-regex-that-does-not-compile",
        "audit-store-folder-not-creatable",
        "no-upstream",
        "same-prefix",
        "priority-of-the-wrong-type",
        "priority-outside-int32",
        "no-upstreams-key",
    ],
)
@pytest.mark.parametrize("flag", ["--config", "--check"])
async def test_config_errors_name_the_file_the_field_and_the_fix(
    write_config: ConfigWriter, yaml_text: str, message: str, flag: str
) -> None:
    config: Path = write_config(yaml_text)
    done = await run_cli("gateway", flag, str(config))
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 1
    assert len(lines) == 1
    assert lines[0].startswith(f"mcp-interceptors gateway: error: {config}: {message}")
    assert done.stdout == b""


async def test_guard_files_and_detector_modules_are_relative_to_the_config_file(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    # Like an upstream's command, a host module or a key file: wherever the gateway is started.
    (tmp_path / "pins.json").write_text(json.dumps(pin_document([{"name": "echo"}])))
    (tmp_path / "relative_detector.py").write_text("class Model:\n    def detect(self, text):\n        return []\n")
    config = write_config(
        "upstreams:\n  e2e:\n    command: python\ninterceptors:\n  guards:\n"
        "    - {name: tool-pinning, config: {pin_file: pins.json}}\n"
        "    - {name: prompt-injection, config: {detectors: ['relative_detector:Model']}}\n"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = await run_cli("gateway", "--check", str(config), cwd=elsewhere)
    assert done.returncode == 0, done.stderr.decode()


@pytest.mark.parametrize("era", ["legacy", "2026-07-28"])
async def test_guard_shortcut_fronts_one_stdio_server_without_a_config(era: str) -> None:
    argv = cli_argv("gateway", "--guard", "secrets", "--", sys.executable, UPSTREAM)
    with anyio.fail_after(30), stderr_log("shortcut gateway") as log:
        async with Client(stdio_transport(argv, log), mode=era) as client:
            result = await client.call_tool("echo", {"text": "key AKIAZ7QH4XK2M9PL3TWB"})
    assert text_of(result) == "key [REDACTED:aws_access_key]"


@pytest.mark.parametrize(("choice", "expected"), [("auto", "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")])
async def test_gateway_runs_on_the_event_loop_loop_names(choice: str, expected: str) -> None:
    """uvloop by default where it is installed (it is a dependency here); `--loop asyncio` opts out."""
    argv = cli_argv(
        "gateway", "--loop", choice, "--log-level", "INFO", "--guard", "secrets", "--", sys.executable, UPSTREAM
    )
    with anyio.fail_after(30), stderr_log("gateway") as log:
        async with Client(stdio_transport(argv, log)) as client:
            result = await client.call_tool("echo", {"text": "key AKIAZ7QH4XK2M9PL3TWB"})
        started = log.tail(200)
    assert text_of(result) == "key [REDACTED:aws_access_key]"
    assert f"gateway starting on the {expected} event loop" in started
    assert "start-up heap frozen:" in started  # before serving: no full collection walks it again


async def test_stdio_gateway_exits_0_on_end_of_input_and_stops_its_upstreams(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    """A desktop client closing the gateway's stdin is the stdio shutdown: exit 0, no upstream left."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    config = write_config(standard_config(upstreams={"e2e": upstream_entry(env={"E2E_PID_DIR": str(pid_dir)})}))
    done = await run_cli("gateway", "--config", str(config), env=gateway_env())  # stdin is /dev/null
    upstream_pids = [int(path.stem) for path in pid_dir.glob("*.pid")]
    assert done.returncode == 0, done.stderr.decode()
    assert len(upstream_pids) == 1  # started before serving, so the catalog could be checked
    assert [pid for pid in upstream_pids if pid_alive(pid)] == []


def _lines(*messages: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(message).encode() + b"\n" for message in messages)


def _answers(stdout: bytes) -> dict[Any, dict[str, Any]]:
    return {answer["id"]: answer for answer in map(json.loads, stdout.splitlines()) if "id" in answer}


_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
_MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


def _call(request_id: int, name: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


@pytest.mark.parametrize("era", ["legacy", "2026-07-28"])
async def test_stdio_gateway_answers_the_requests_read_before_end_of_input(era: str) -> None:
    """`printf requests | gateway`: every request written before stdin closed gets its real answer,
    even one still running upstream at end of input (before: the gateway exited and answered none)."""
    if era == "legacy":
        batch = [_INITIALIZE, {"jsonrpc": "2.0", "method": "notifications/initialized"}]
        meta = None
    else:
        batch, meta = [], _MODERN_META
    batch += [
        _call(2, "sleep", {"seconds": 1.0}, meta),
        _call(3, "echo", {"text": "key AKIAZ7QH4XK2M9PL3TWB"}, meta),
    ]
    argv = cli_argv("gateway", "--guard", "secrets", "--", sys.executable, UPSTREAM)
    with anyio.fail_after(60):
        done = await anyio.run_process(argv, input=_lines(*batch), env=gateway_env(), check=False)
    answers = _answers(done.stdout)
    assert done.returncode == 0, done.stderr.decode()
    assert sorted(answers) == ([1, 2, 3] if era == "legacy" else [2, 3])
    assert answers[2]["result"]["content"][0]["text"] == "awake"
    assert answers[3]["result"]["content"][0]["text"] == "key [REDACTED:aws_access_key]"


async def test_stdio_gateway_reads_requests_from_a_regular_file(tmp_path: Path) -> None:
    """`gateway < requests.jsonl`: stdin may be a file, which the loop cannot watch as it does a pipe
    (uvloop aborts the process if asked to): the gateway reads it the plain way and answers everything."""
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(_lines(_call(2, "echo", {"text": "from a file"}, _MODERN_META)))
    argv = cli_argv("gateway", "--", sys.executable, UPSTREAM)
    with requests.open("rb") as stdin, anyio.fail_after(60):
        done = await anyio.run_process(argv, stdin=stdin, env=gateway_env(), check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert _answers(done.stdout)[2]["result"]["content"][0]["text"] == "from a file"


async def test_stdio_gateway_answers_32000_when_a_request_outlasts_the_drain_timeout(
    write_config: ConfigWriter, tmp_path: Path
) -> None:
    """`stdio.drain_timeout_ms` bounds the wait: a request still running then is answered with -32000
    naming the timeout, the gateway exits 0 and stops its upstream."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    config = write_config(
        {
            "upstreams": {"e2e": upstream_entry(env={"E2E_PID_DIR": str(pid_dir)})},
            "stdio": {"drain_timeout_ms": 500},
        }
    )
    batch = [_call(7, "sleep", {"seconds": 30}, _MODERN_META), _call(8, "echo", {"text": "quick"}, _MODERN_META)]
    with anyio.fail_after(20):
        done = await anyio.run_process(
            cli_argv("gateway", "--config", str(config)), input=_lines(*batch), env=gateway_env(), check=False
        )
    answers = _answers(done.stdout)
    assert done.returncode == 0, done.stderr.decode()
    assert answers[8]["result"]["content"][0]["text"] == "quick"
    assert answers[7]["error"]["code"] == -32000
    assert "did not finish within 0.5 s" in answers[7]["error"]["message"]
    assert [pid for pid in (int(path.stem) for path in pid_dir.glob("*.pid")) if pid_alive(pid)] == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_stdio_gateway_exits_0_on_sigterm_or_sigint_and_stops_its_upstreams(
    write_config: ConfigWriter, tmp_path: Path, signum: signal.Signals
) -> None:
    """A client that signals the gateway (as desktop clients do after closing stdin) leaves no upstream behind."""
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    config = write_config(standard_config(upstreams={"e2e": upstream_entry(env={"E2E_PID_DIR": str(pid_dir)})}))
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    argv = cli_argv("gateway", "--config", str(config))
    with anyio.fail_after(30):
        async with await anyio.open_process(argv, env=gateway_env(), stderr=subprocess.DEVNULL) as gateway:
            assert gateway.stdin is not None and gateway.stdout is not None
            # stdin stays open: the client is still there when it signals
            await gateway.stdin.send(json.dumps(initialize).encode() + b"\n")
            answer = b""
            while not answer.endswith(b"\n"):
                answer += await gateway.stdout.receive()
            upstream_pids = [int(path.stem) for path in pid_dir.glob("*.pid")]  # connected before answering
            gateway.send_signal(signum)
            code = await gateway.wait()
    assert json.loads(answer)["id"] == 1
    assert len(upstream_pids) == 1
    assert code == 0
    assert [pid for pid in upstream_pids if pid_alive(pid)] == []


async def test_guard_shortcut_passes_the_command_on_as_given() -> None:
    # The shell has expanded what it meant to: a `${...}` left in an argument belongs to the upstream
    # (an `sh -c` script's own variable), and `$${` is not ours to rewrite either.
    script = (
        "import runpy, sys\n"
        "if sys.argv[1:] != ['${UNSET_IN_GATEWAY}', '$${x}']: sys.exit(f'upstream got {sys.argv[1:]}')\n"
        f"sys.argv = [{UPSTREAM!r}]\n"
        f"runpy.run_path({UPSTREAM!r}, run_name='__main__')\n"
    )
    command = [sys.executable, "-c", script, "${UNSET_IN_GATEWAY}", "$${x}"]
    argv = cli_argv("gateway", "--guard", "secrets", "--", *command)
    with anyio.fail_after(30), stderr_log("shortcut gateway") as log:
        async with Client(stdio_transport(argv, log, env=gateway_env()), mode="legacy") as client:
            result = await client.call_tool("echo", {"text": "as given"})
    assert text_of(result) == "as given"


SECRET = "s3cr3t-token-0042"


@pytest.mark.parametrize("output", ["text", "json"])
async def test_check_shows_a_token_from_the_environment_as_the_variable_written(
    write_config: ConfigWriter, output: str
) -> None:
    # A token in an argument or a URL's query is as secret as one in `headers`: `--check` must not print it.
    config = write_config(
        "upstreams:\n"
        "  a: {command: python, args: [server.py, --token, '${E2E_TOKEN}'], env: {TOKEN: '${E2E_TOKEN}'}}\n"
        "  b: {url: 'https://example.invalid/mcp?key=${E2E_TOKEN}', headers: {X-Key: '${E2E_TOKEN}'}}\n"
    )
    json_flag = ["--json"] if output == "json" else []
    done = await run_cli("gateway", "--check", str(config), *json_flag, env=gateway_env({"E2E_TOKEN": SECRET}))
    assert done.returncode == 0, done.stderr.decode()
    assert SECRET not in (done.stdout + done.stderr).decode()
    assert "--token ${E2E_TOKEN}" in done.stdout.decode() and "?key=${E2E_TOKEN}" in done.stdout.decode()


async def test_a_config_error_shows_a_token_from_the_environment_as_the_variable_written(
    write_config: ConfigWriter,
) -> None:
    config = write_config("upstreams:\n  b: {url: 'ftp://user:${E2E_TOKEN}@example.invalid/mcp'}\n")
    done = await run_cli("gateway", "--check", str(config), env=gateway_env({"E2E_TOKEN": SECRET}))
    assert done.returncode == 1
    assert SECRET not in done.stderr.decode()
    assert "ftp://user:${E2E_TOKEN}@example.invalid/mcp" in done.stderr.decode()
