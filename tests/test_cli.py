"""The real `mcp-interceptors` CLI as a subprocess: `list` and `invoke` over stdio and Streamable HTTP."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from fakes import free_port

import mcp_interceptors
from mcp_interceptors import guards
from mcp_interceptors.audit import SqliteStore

ROOT = Path(__file__).resolve().parent.parent
VALIDATORS = [sys.executable, str(ROOT / "examples" / "validator_server.py")]

pytestmark = pytest.mark.e2e


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcp_interceptors", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def ok_json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def one_line_error(done: subprocess.CompletedProcess[str], code: int) -> str:
    assert done.returncode == code, (done.returncode, done.stderr[-2000:])
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-2000:]
    return lines[0]


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    """The example validator server over Streamable HTTP on a free loopback port (its own process group)."""
    port = free_port()
    proc = subprocess.Popen(
        [*VALIDATORS, "--http", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:  # readiness poll under a deadline
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    pytest.fail(f"HTTP server did not start: {proc.communicate()[1][-2000:]}")
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()


# --------------------------------------------------------------------------- stdio


def test_version_prints_ours_and_mcps_on_one_line() -> None:
    done = cli("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"mcp-interceptors {mcp_interceptors.__version__} (mcp {version('mcp')}, extension " + (
        f"{mcp_interceptors.EXTENSION_ID}, Python {sys.version.split()[0]})\n"
    )


def test_list_over_stdio_prints_descriptors_as_json() -> None:
    out = ok_json(cli("list", "--", *VALIDATORS))
    assert [d["name"] for d in out["interceptors"]] == ["deny-dangerous-tools", "max-size"]
    assert out["interceptors"][0]["hooks"] == [{"events": ["tools/call"], "phase": "request"}]
    assert out["skipped"] == []


def test_r8_list_event_filter_over_stdio() -> None:
    out = ok_json(cli("list", "--event", "prompts/get", "--mode", "legacy", "--", *VALIDATORS))
    assert [d["name"] for d in out["interceptors"]] == ["max-size"]


def test_invoke_over_stdio_prints_the_flat_result(tmp_path: Path) -> None:
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps({"method": "tools/call", "params": {"name": "shell"}}))
    out = ok_json(
        cli("invoke", "deny-dangerous-tools", "--event", "tools/call", "--phase", "request", "--payload",
            f"@{payload}", "--", *VALIDATORS)
    )  # fmt: skip
    assert out.pop("durationMs") >= 0
    assert out == {
        "interceptor": "deny-dangerous-tools",
        "type": "validation",
        "phase": "request",
        "valid": False,
        "severity": "error",
        "messages": [{"message": "tool 'shell' is not allowed", "severity": "error", "path": "$.params.name"}],
    }
    allowed = ok_json(
        cli("invoke", "deny-dangerous-tools", "--event", "tools/call", "--phase", "request", "--payload",
            '{"params": {"name": "shell"}}', "--config", '{"deny": ["rm"]}', "--", *VALIDATORS)
    )  # fmt: skip
    assert allowed["valid"] is True


# --------------------------------------------------------------------------- Streamable HTTP


@pytest.mark.parametrize("mode", ["legacy", "auto", "2026-07-28"])
def test_list_and_invoke_over_streamable_http(http_url: str, mode: str) -> None:
    out = ok_json(cli("list", http_url, "--mode", mode))
    assert [d["name"] for d in out["interceptors"]] == ["deny-dangerous-tools", "max-size"]
    result = ok_json(
        cli("invoke", http_url, "max-size", "--mode", mode, "--event", "tools/call", "--phase", "response",
            "--payload", '{"content": []}', "--timeout-ms", "5000")
    )  # fmt: skip
    assert (result["interceptor"], result["phase"], result["valid"]) == ("max-size", "response", True)


# --------------------------------------------------------------------------- failures: non-zero exit, one line


def test_unreachable_url_fails_with_one_line() -> None:
    line = one_line_error(cli("list", f"http://127.0.0.1:{free_port()}/mcp"), 1)
    assert line.startswith("mcp-interceptors list: error: ")
    assert "ConnectError" in line or "cannot reach" in line


def test_bad_json_payload_fails_with_one_line() -> None:
    done = cli("invoke", "max-size", "--event", "tools/call", "--phase", "request", "--payload", "{bad", "--",
               *VALIDATORS)  # fmt: skip
    assert one_line_error(done, 2) == (
        "mcp-interceptors invoke: error: --payload: invalid JSON "
        "(Expecting property name enclosed in double quotes at line 1 column 2)"
    )


def test_missing_payload_file_fails_with_one_line() -> None:
    done = cli("invoke", "max-size", "--event", "tools/call", "--phase", "request", "--payload", "@/nonexistent.json",
               "--", *VALIDATORS)  # fmt: skip
    assert one_line_error(done, 2) == (
        "mcp-interceptors invoke: error: --payload: cannot read /nonexistent.json: No such file or directory"
    )


def test_unknown_interceptor_fails_with_one_line() -> None:
    done = cli("invoke", "nope", "--event", "tools/call", "--phase", "request", "--payload", "{}", "--", *VALIDATORS)
    assert one_line_error(done, 1) == (
        "mcp-interceptors invoke: error: Unknown interceptor: 'nope' (code -32602) "
        "data={'name': 'nope', 'interceptor': 'nope'}"
    )


def test_config_rejected_by_schema_fails_with_one_line() -> None:
    done = cli("invoke", "deny-dangerous-tools", "--event", "tools/call", "--phase", "request", "--payload", "{}",
               "--config", '{"deny": "shell"}', "--", *VALIDATORS)  # fmt: skip
    line = one_line_error(done, 1)
    assert "(code -32602)" in line and "'field': 'config.deny'" in line


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("list", "not-a-url"), "TARGET 'not-a-url' is not an http(s) URL; to run a stdio server use: -- not-a-url"),
        (("list",), "missing TARGET: an http(s):// URL, or a stdio server command after --"),
        (("list", "http://127.0.0.1:9/mcp", "--", "x"), "give either a URL target or a command after --, not both"),
        (
            ("invoke", "max-size", "http://127.0.0.1:9/mcp", "--event", "e", "--phase", "request", "--payload", "{}"),
            "the URL comes before the interceptor name: invoke http://127.0.0.1:9/mcp max-size ...",
        ),
        (
            ("invoke", "x", "--event", "e", "--phase", "request", "--payload", "{}", "--config", "[1]", "--", "x"),
            "--config must be a JSON object",
        ),
        (
            ("gateway", "--http", "127.0.0.1:99999", "--", "x"),
            "--http '127.0.0.1:99999': the port must be between 1 and 65535",
        ),
        (  # --check planned without the guard and said "configuration is valid"
            ("gateway", "--check", "examples/gateway.yaml", "--guard", "pii"),
            "--guard goes with an upstream command after --, or a client's mcpServers file; "
            "list guards in the gateway config instead",
        ),
        (
            ("gateway", "--config", "examples/gateway.yaml", "--guard", "pii"),
            "--guard goes with an upstream command after --, or a client's mcpServers file; "
            "list guards in the gateway config instead",
        ),
        (  # it checked the --check file only, and said "configuration is valid"
            ("gateway", "--config", "examples/demo-gateway.yaml", "--check", "examples/gateway.yaml"),
            "--check FILE checks that file and exits: give it without --config",
        ),
        (
            ("gateway", "--check", "examples/gateway.yaml", "--http", "127.0.0.1:8080"),
            "--check FILE checks that file and exits: give it without --http",
        ),
    ],
)
def test_usage_errors_exit_2_with_one_line(args: tuple[str, ...], message: str) -> None:
    line = one_line_error(cli(*args), 2)
    assert line == f"mcp-interceptors {args[0]}: error: {message}"


@pytest.mark.parametrize(
    "args",
    [("config-schema",), ("gateway", "--check", "examples/gateway.yaml"), ("list", "--", *VALIDATORS)],
    ids=["config-schema", "gateway-check", "list"],
)
def test_closed_stdout_stops_quietly(args: tuple[str, ...]) -> None:
    """`mcp-interceptors ... | head`: the reader is gone; no traceback, SIGPIPE's shell status."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write to stdout fails with EPIPE
    try:
        done = subprocess.run(
            [sys.executable, "-m", "mcp_interceptors", *args],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (141, "")


@pytest.mark.parametrize(
    ("options", "upstream"),
    [(("serve", "--guard", "secrets"), ()), (("gateway", "--guard", "secrets"), ("--", *VALIDATORS))],
    ids=["serve", "gateway"],
)
def test_http_port_in_use_fails_with_one_line(options: tuple[str, ...], upstream: tuple[str, ...]) -> None:
    """uvicorn only logs a failed bind and raises SystemExit(3): the CLI checks the address first."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli(*options, "--http", f"127.0.0.1:{port}", *upstream)
    line = one_line_error(done, 1)
    assert line == f"mcp-interceptors {options[0]}: error: cannot listen on 127.0.0.1:{port}: Address already in use"


def test_metrics_listen_port_in_use_fails_with_one_line_naming_the_setting(tmp_path: Path) -> None:
    """A taken `metrics.listen` address fails before any upstream starts, saying which listener it is."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = tmp_path / "gateway.yaml"
        config.write_text(f"upstreams: {{a: {{command: python}}}}\nmetrics: {{listen: '127.0.0.1:{port}'}}\n")
        done = cli("gateway", "--config", str(config))
    line = one_line_error(done, 1)
    assert line == (
        f"mcp-interceptors gateway: error: metrics.listen in {config}: cannot listen on 127.0.0.1:{port}: "
        "Address already in use"
    )


def test_metrics_listen_on_the_http_fronts_address_is_refused(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "gateway.yaml"
    config.write_text(f"upstreams: {{a: {{command: python}}}}\nmetrics: {{listen: '127.0.0.1:{port}'}}\n")
    done = cli("gateway", "--config", str(config), "--http", f"127.0.0.1:{port}")
    line = one_line_error(done, 1)
    assert line.startswith(f"mcp-interceptors gateway: error: metrics.listen in {config}: 127.0.0.1:{port} is where")


@pytest.mark.parametrize("count", ["-3", "0", "many"])
def test_audit_tail_refuses_a_count_below_one(tmp_path: Path, count: str) -> None:
    done = cli("audit", "tail", "-n", count, "--store", str(tmp_path / "audit.db"))
    assert done.returncode == 2
    assert f"argument -n: expected a whole number of records, at least 1, not '{count}'" in done.stderr


@pytest.mark.parametrize("action", [["tail"], ["show", "rec-1"], ["verify"], ["export"]])
def test_audit_errors_carry_the_commands_prefix_like_every_other_command(tmp_path: Path, action: list[str]) -> None:
    # They printed a bare `error: ...`, unlike `mcp-interceptors gateway: error: ...` and the rest.
    missing = tmp_path / "audit.db"
    done = cli("audit", *action, "--store", str(missing))
    assert one_line_error(done, 2) == f"mcp-interceptors audit: error: audit database {missing} does not exist"


def test_audit_verify_with_a_trust_file_that_is_not_keys_fails_with_one_line(tmp_path: Path) -> None:
    trust = tmp_path / "anchors.txt"
    trust.write_text("not json\n")
    done = cli("audit", "verify", "--store", str(tmp_path / "audit.db"), "--trust", str(trust))
    line = one_line_error(done, 2)
    assert line.endswith(
        f"{trust}: line 1 is not a public key; a trust file is a key file or JSON lines of "
        '{"public_key": ...} (see `audit keys --export`)'
    )


def test_audit_verify_with_a_named_key_file_that_is_missing_fails_instead_of_trusting_on_first_use(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "typo-key"
    done = cli("audit", "verify", "--store", str(tmp_path / "audit.db"), "--key-file", str(missing))
    assert one_line_error(done, 2) == f"mcp-interceptors audit: error: audit key file {missing} does not exist"


def test_audit_verify_with_a_config_whose_key_file_is_missing_fails_instead_of_trusting_on_first_use(
    tmp_path: Path,
) -> None:
    """`--config` names the key file as `--key-file` does: read where the key is not (another machine, a
    moved folder), `verify` must not pass on the store's own keys with only a note."""
    SqliteStore(tmp_path / "audit.db").close()  # an audit database: without the key, it would pass on first use
    config = tmp_path / "gateway.yaml"
    config.write_text(
        f"upstreams:\n  a:\n    command: {sys.executable}\n"
        "audit:\n  enabled: true\n  store: audit.db\n  key_file: keys/audit-key\n"
    )
    done = cli("audit", "verify", "--config", str(config))
    expected = f"mcp-interceptors audit: error: audit key file {tmp_path / 'keys' / 'audit-key'} does not exist"
    assert one_line_error(done, 2) == expected


def test_gateway_json_without_check_is_a_usage_error() -> None:
    done = cli("gateway", "--json", "--guard", "secrets", "--", "true")
    line = one_line_error(done, 2)
    assert line == "mcp-interceptors gateway: error: --json goes with --check (it prints the plan as JSON)"


def test_gateway_check_reads_an_existing_audit_key(tmp_path: Path) -> None:
    """A key path that cannot be a key fails `--check` naming the field, not at start with a traceback."""
    (tmp_path / "keydir").mkdir()
    config = tmp_path / "gateway.yaml"
    config.write_text(
        f"upstreams:\n  a:\n    command: {sys.executable}\n"
        "audit:\n  enabled: true\n  store: audit.db\n  key_file: keydir\n"
    )
    line = one_line_error(cli("gateway", "--check", str(config)), 1)
    assert line.startswith(f"mcp-interceptors gateway: error: {config}: audit.key_file: audit key file ")
    assert line.endswith(
        "cannot be read: Is a directory (fix: point audit.key_file at the gateway's key file, "
        "or at a path where it can create one)"
    )


@pytest.mark.parametrize("command", [("list",), ("pin", "-o", "-")])
def test_an_unreachable_url_is_named_in_the_one_line_error(command: tuple[str, ...]) -> None:
    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/mcp"
    line = one_line_error(cli(command[0], url, *command[1:]), 1)
    assert line.startswith(f"mcp-interceptors {command[0]}: error: cannot reach {url}: ConnectError"), line


@pytest.mark.parametrize("command", ["gateway", "serve"])
def test_an_unknown_guard_on_the_command_line_is_a_usage_error_listing_the_guards(command: str) -> None:
    upstream = ["--", sys.executable, "-c", "pass"] if command == "gateway" else []
    done = cli(command, "--guard", "nosuch", *upstream)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith(f"usage: mcp-interceptors {command} ")
    assert lines[-1] == (
        f"mcp-interceptors {command}: error: argument --guard: unknown guard 'nosuch'; choose from: "
        f"{', '.join(guards.available())}"
    )


@pytest.mark.parametrize("command", ["gateway", "serve"])
def test_guard_help_lists_every_guard_name(command: str) -> None:
    done = cli(command, "--help")
    assert done.returncode == 0
    help_text = " ".join(done.stdout.split()).replace("- ", "-")  # argparse wraps long names at their hyphens
    assert f"NAME is one of: {', '.join(guards.available())}" in help_text


@pytest.mark.parametrize(
    ("args", "usage", "message"),
    [
        (
            (
                "invoke",
                "secrets",
                "--event",
                "tools/call",
                "--phase",
                "request",
                "--payload",
                "{}",
                "http://127.0.0.1:9",
            ),
            "usage: mcp-interceptors invoke ",
            "mcp-interceptors invoke: error: the URL comes before the interceptor name: "
            "invoke http://127.0.0.1:9 secrets ...",
        ),
        (
            ("list", "http://127.0.0.1:9/mcp", "extra"),
            "usage: mcp-interceptors list ",
            "mcp-interceptors list: error: unrecognized arguments: extra",
        ),
        (
            ("audit", "tail", "--bogus"),
            "usage: mcp-interceptors audit tail ",
            "mcp-interceptors audit tail: error: unrecognized arguments: --bogus",
        ),
        (
            ("gateway", "--check", "examples/gateway.yaml", "stray"),
            "usage: mcp-interceptors gateway ",
            "mcp-interceptors gateway: error: unrecognized arguments: stray",
        ),
        (
            ("invoke", "x", "--event", "e", "--phase", "request", "--payload", "{}", "--timeout-ms", "inf", "--", "x"),
            "usage: mcp-interceptors invoke ",
            "mcp-interceptors invoke: error: argument --timeout-ms: expected a finite number of milliseconds above 0,"
            " not 'inf'",
        ),
        (
            ("nosuch",),
            "usage: mcp-interceptors [-h] [--version] COMMAND ...",
            "mcp-interceptors: error: argument COMMAND: invalid choice: 'nosuch'",
        ),
    ],
    ids=["url-after-name", "extra-positional", "nested-subcommand", "gateway", "infinite-timeout", "unknown-command"],
)
def test_a_misplaced_argument_prints_the_usage_of_the_command_it_was_given_to(
    args: tuple[str, ...], usage: str, message: str
) -> None:
    done = cli(*args)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith(usage)
    assert lines[-1].startswith(message), lines[-1]


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ('{"n": NaN}', "--payload: invalid JSON (NaN is not JSON; give a finite number)"),
        ('{"n": -Infinity}', "--payload: invalid JSON (-Infinity is not JSON; give a finite number)"),
        ("[" * 50_000 + "]" * 50_000, "--payload: invalid JSON (nested too deep)"),
        ("1" * 5000, "--payload: invalid JSON (Exceeds the limit (4300 digits) for integer string conversion"),
    ],
    ids=["nan", "infinity", "deep", "long-integer"],
)
def test_a_json_argument_no_peer_could_read_is_a_one_line_usage_error(payload: str, message: str) -> None:
    done = cli("invoke", "x", "--event", "tools/call", "--phase", "request", "--payload", payload, "--", "x")
    assert one_line_error(done, 2).startswith(f"mcp-interceptors invoke: error: {message}")


def _bash_completions(script: str, *words: str) -> list[str]:
    """What bash offers for the last of `words`, through the function the script registers with `complete`."""
    program = f"""
{script}
spec=$(complete -p mcp-interceptors) || exit 3
function=${{spec##*-F }}; function=${{function%% *}}
COMP_WORDS=({" ".join(shlex.quote(word) for word in words)})
COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
COMP_LINE="${{COMP_WORDS[*]}}"; COMP_POINT=${{#COMP_LINE}}
"$function" mcp-interceptors "${{COMP_WORDS[COMP_CWORD]}}" "${{COMP_WORDS[COMP_CWORD-1]}}"
printf '%s\n' "${{COMPREPLY[@]}}"
"""
    done = subprocess.run(["bash", "--norc", "-c", program], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.fixture(scope="module")
def bash_completion() -> str:
    done = cli("completion", "bash")
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(
    ("words", "offered"),
    [
        (
            ("mcp-interceptors", ""),
            ["list", "invoke", "gateway", "config-schema", "serve", "pin", "audit", "completion"],
        ),
        (("mcp-interceptors", "ga"), ["gateway"]),
        (("mcp-interceptors", "audit", "v"), ["verify"]),
        (("mcp-interceptors", "gateway", "--gu"), ["--guard"]),
        (("mcp-interceptors", "serve", "--guard", "ex"), ["exfiltration-guard"]),
        (("mcp-interceptors", "invoke", "--phase", ""), ["request", "response"]),
    ],
    ids=["subcommands", "subcommand-prefix", "nested", "option", "guard-name", "choices"],
)
def test_bash_completion_offers_subcommands_options_and_guard_names(
    bash_completion: str, words: tuple[str, ...], offered: list[str]
) -> None:
    assert set(offered) <= set(_bash_completions(bash_completion, *words))
    if words[-1]:  # a prefix: nothing else
        assert _bash_completions(bash_completion, *words) == offered


def test_bash_completion_offers_every_guard() -> None:
    script = cli("completion", "bash").stdout
    assert _bash_completions(script, "mcp-interceptors", "gateway", "--guard", "") == guards.available()


def _shell(name: str) -> str:
    """The shell's path; a missing one skips the test here, and fails it in CI (`MCPI_REQUIRE_SHELLS`)."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("MCPI_REQUIRE_SHELLS"):
            pytest.fail(f"{name} is not installed (.ci/run installs it)")
        pytest.skip(f"{name} is not installed")
    return path


@pytest.mark.parametrize(
    ("line", "offered"),
    [
        ("mcp-interceptors ga", ["gateway"]),
        ("mcp-interceptors audit v", ["verify"]),
        ("mcp-interceptors gateway --guard ex", ["exfiltration-guard"]),
        ("mcp-interceptors serve --guard ", guards.available()),
        ("mcp-interceptors completion f", ["fish"]),
    ],
)
def test_fish_completion_offers_subcommands_and_guard_names(line: str, offered: list[str], tmp_path: Path) -> None:
    script = tmp_path / "mcp-interceptors.fish"
    script.write_text(cli("completion", "fish").stdout, encoding="utf-8")
    program = f"source {shlex.quote(str(script))}; complete -C {shlex.quote(line)}"
    done = subprocess.run([_shell("fish"), "--no-config", "-c", program], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [candidate.split("\t")[0] for candidate in done.stdout.splitlines()] == offered


def test_zsh_completion_registers_for_the_command_when_evaluated() -> None:
    script = cli("completion", "zsh").stdout
    program = 'autoload -U compinit && compinit -u -D && eval "$MCPI_SCRIPT" && print -- ${_comps[mcp-interceptors]}'
    done = subprocess.run(
        [_shell("zsh"), "-f", "-c", program],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MCPI_SCRIPT": script},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "_shtab_mcp_interceptors"


@pytest.mark.parametrize("shell", ["zsh", "fish", "tcsh", "powershell"])
def test_completion_scripts_for_other_shells_name_the_subcommands_and_guards(shell: str) -> None:
    done = cli("completion", shell)
    assert done.returncode == 0, done.stderr
    for word in ("gateway", "config-schema", "--guard", *guards.available()):
        assert word in done.stdout, word


@pytest.mark.parametrize(
    "args", [("gateway", "--check", "examples/gateway.yaml"), ("serve", "--guard", "secrets")], ids=["gateway", "serve"]
)
def test_an_unknown_log_level_is_a_usage_error_not_a_traceback(args: tuple[str, ...]) -> None:
    done = cli(*args, "--log-level", "loud")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    last_line = done.stderr.strip().splitlines()[-1]
    assert last_line.endswith(
        "argument --log-level: invalid choice: 'LOUD' (choose from 'DEBUG', 'INFO', 'WARNING', 'ERROR', 'CRITICAL')"
    )


def test_the_log_level_is_read_in_any_case() -> None:
    done = cli("gateway", "--check", "examples/gateway.yaml", "--log-level", "error")
    assert done.returncode == 0, done.stderr[-2000:]


def test_freeze_start_up_heap_takes_what_start_up_built_out_of_full_collections() -> None:
    """A full collection walks every tracked object; frozen ones it skips (the gateway's p99 pauses)."""
    import gc

    from mcp_interceptors.cli._runtime import freeze_start_up_heap

    built = [[index] for index in range(20_000)]  # long-lived containers, as start-up leaves behind
    try:
        frozen = freeze_start_up_heap()
        assert frozen == gc.get_freeze_count() >= len(built)
        collected = {id(obj) for generation in range(3) for obj in gc.get_objects(generation=generation)}
        assert not any(id(item) in collected for item in built)
    finally:
        gc.unfreeze()


def test_watch_without_a_config_file_is_a_usage_error() -> None:
    done = cli("gateway", "--watch", "--", sys.executable, "-c", "pass")
    line = one_line_error(done, 2)
    assert line == (
        "mcp-interceptors gateway: error: --watch goes with --config FILE (it reloads that file when it changes)"
    )
