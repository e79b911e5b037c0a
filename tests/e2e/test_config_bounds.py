"""Hostile or broken config files through the real CLI: each is a one-line config error naming the file,
the field path and the fix, within seconds, and `--check` refuses exactly what start-up would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from e2e_support import ConfigWriter
from helpers import run_cli

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

#: Nine aliases of nine aliases, eight times over: ~1 KB that expands to 9**9 values.
ALIAS_BOMB = (
    "upstreams:\n  a: {command: python}\n"
    + 'x0: &x0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    + "".join(f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 9)}]\n" for i in range(1, 9))
)
#: The CLI starts in about a second; a file it took longer to refuse would be a denial of service.
LIMIT_S = 30


async def _refused(config: Path, flag: str) -> str:
    done = await run_cli("gateway", flag, str(config), limit_s=LIMIT_S)
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 1, done.stderr.decode()
    assert len(lines) == 1, lines  # one line, no traceback
    assert done.stdout == b""
    prefix = f"mcp-interceptors gateway: error: {config}: "
    assert lines[0].startswith(prefix)
    return lines[0].removeprefix(prefix)


@pytest.mark.parametrize("flag", ["--check", "--config"])
async def test_f13_a_yaml_alias_bomb_is_refused_at_once(write_config: ConfigWriter, flag: str) -> None:
    assert len(ALIAS_BOMB) < 1100
    message = await _refused(write_config(ALIAS_BOMB), flag)
    assert message.startswith("x5: holds more than 100,000 values once its aliases are expanded (from line 8 column 5)")


async def test_f13_an_alias_inside_its_own_anchor_is_refused(write_config: ConfigWriter) -> None:
    message = await _refused(write_config("upstreams:\n  a: &a {command: python, args: [*a]}\n"), "--check")
    expected = "upstreams.a.args[0]: an alias here refers to the anchor at line 2 column 6, which holds it"
    assert message.startswith(expected)


async def test_anchors_and_aliases_within_the_bounds_still_work(write_config: ConfigWriter) -> None:
    text = "env: &env {A: '1'}\nupstreams:\n  a: {command: python, env: *env}\n  b: {command: python, env: *env}\n"
    done = await run_cli("gateway", "--check", str(write_config(text)), limit_s=LIMIT_S)
    assert "env: Extra inputs are not permitted" in done.stderr.decode()  # the anchors' own key, not a bound


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        (
            "upstreams:\n  a: {command: python}\nhttp:\n  max_sessions: " + "9" * 5000 + "\n",
            "http.max_sessions: an integer of 5000 digits at line 4 column 17: no setting takes one this long",
        ),
        (
            "upstreams:\n  a: {command: python, args: " + "[" * 50_000 + "]" * 50_000 + "}\n",
            "upstreams.a.args[0][0][0][0]...: nested more than 64 levels deep (at line 2 column ",
        ),
        (
            "upstreams:\n  a:\n    command: python\n    args:\n"
            + "".join("  " * (depth + 2) + "-\n" for depth in range(5000)),
            "upstreams.a.args[0][0][0][0]...: nested more than 64 levels deep (at line ",
        ),
        (
            "upstreams:\n  a: {command: python, args: [2024-13-01]}\n",
            "upstreams.a.args[0]: '2024-13-01' at line 2 column 31 is not a valid timestamp (month must be in 1..12)",
        ),
    ],
    ids=["5000-digit-integer", "50000-deep-flow-list", "5000-deep-block-list", "impossible-date"],
)
@pytest.mark.parametrize("flag", ["--check", "--config"])
async def test_f14_values_python_cannot_build_are_config_errors(
    write_config: ConfigWriter, yaml_text: str, message: str, flag: str
) -> None:
    assert (await _refused(write_config(yaml_text), flag)).startswith(message)


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        (
            "upstreams:\n  a: {command: python}\nhttp: {session_idle_s: .inf}\n",
            "http.session_idle_s: inf is not a finite number: no setting may be unbounded or undefined",
        ),
        (
            "upstreams:\n  a: {command: python, timeout_ms: .nan}\n",
            "upstreams.a.timeout_ms: nan is not a finite number",
        ),
        (
            "upstreams:\n  a: {command: python}\nchain: {deadline_ms: -.inf}\n",
            "chain.deadline_ms: -inf is not a finite number",
        ),
        (  # a guard's own config: its JSON Schema `number` would take it
            "upstreams:\n  a: {command: python}\ninterceptors:\n  guards: [{name: size}]\n"
            "  config:\n    size: {max_bytes: .inf}\n",
            "interceptors.config.size.max_bytes: inf is not a finite number",
        ),
        (
            "upstreams:\n  a: {command: python}\nhttp: {session_idle_s: 1.0e+400}\n",
            "http.session_idle_s: inf is not a finite number",
        ),
        (
            "upstreams:\n  a: {command: python}\nhttp: {session_idle_s: 10000000}\n",
            "http.session_idle_s: Input should be less than or equal to 604800 (fix: give a finite number within",
        ),
        (
            "upstreams:\n  a: {command: python}\nstdio: {max_message_bytes: 99999999999}\n",
            "stdio.max_message_bytes: Input should be less than or equal to 1073741824",
        ),
        (
            "upstreams:\n  a: {command: python, timeout_ms: 0}\n",
            "upstreams.a.timeout_ms: Input should be greater than 0",
        ),
        (
            "upstreams:\n  a: {command: python}\ninterceptors:\n  config:\n    x: {n: 99999999999999999999}\n",
            "interceptors.config.x.n: an integer of 20 digits is past 64 bits: no setting takes one",
        ),
    ],
    ids=[
        "inf-idle",
        "nan-timeout",
        "minus-inf-deadline",
        "inf-in-a-guard-config",
        "overflow-to-inf",
        "idle-past-a-week",
        "message-past-1-gib",
        "zero-timeout",
        "integer-past-64-bits",
    ],
)
@pytest.mark.parametrize("flag", ["--check", "--config"])
async def test_f15_every_duration_size_and_count_is_finite_and_in_range(
    write_config: ConfigWriter, yaml_text: str, message: str, flag: str
) -> None:
    assert (await _refused(write_config(yaml_text), flag)).startswith(message)


async def test_f15_the_schema_documents_each_range() -> None:
    done = await run_cli("config-schema", limit_s=LIMIT_S)
    schema = json.loads(done.stdout)
    http = schema["$defs"]["HttpConfig"]["properties"]
    assert http["session_idle_s"]["exclusiveMinimum"] == 0 and http["session_idle_s"]["maximum"] == 604800
    assert http["max_sessions"]["maximum"] == 1_000_000
    assert schema["$defs"]["ChainConfig"]["properties"]["deadline_ms"]["anyOf"][0]["maximum"] == 86_400_000
