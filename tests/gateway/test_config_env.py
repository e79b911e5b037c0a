"""Loading gateway.yaml: `${VAR}` substitution in strings, and the locations it resolves."""

from __future__ import annotations

from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from mcp_interceptors.gateway.auditing import audit_store_location
from mcp_interceptors.gateway.config import ConfigError, config_json_schema, load_config, parse_config, substitute_env


def test_variables_defaults_and_a_literal_dollar_brace() -> None:
    config = {"a": "${HOME}/x", "b": ["${NOPE:-fallback}"], "cel": "args.x == '$${HOME}'", "n": 5}
    assert substitute_env(config, {"HOME": "/home/me"}, "gateway.yaml") == {
        "a": "/home/me/x",
        "b": ["fallback"],
        "cel": "args.x == '${HOME}'",  # `$${` is a literal `${`, whatever the environment holds
        "n": 5,
    }


def test_a_default_also_replaces_an_empty_variable_as_in_the_shell() -> None:
    config = {"store": "${AUDIT_DIR:-.audit}/audit.db", "token": "${TOKEN}"}
    assert substitute_env(config, {"AUDIT_DIR": "", "TOKEN": ""}, "gateway.yaml") == {
        "store": ".audit/audit.db",  # not "/audit.db" at the root of the filesystem
        "token": "",  # no default: the empty value stands
    }


def test_an_empty_static_token_is_refused_naming_the_field() -> None:
    raw = {"upstreams": {"a": {"command": "server"}}, "auth": {"tokens": ["ok", "${GATEWAY_TOKEN}"]}}
    with pytest.raises(ConfigError) as error:
        parse_config(raw, file="gateway.yaml", env={"GATEWAY_TOKEN": ""})
    assert (error.value.file, error.value.path) == ("gateway.yaml", "auth.tokens[1]")
    assert "non-empty" in error.value.fix


def test_a_missing_variable_names_the_field_and_the_fix() -> None:
    with pytest.raises(ConfigError) as error:
        substitute_env({"upstreams": {"a": {"env": {"TOKEN": "${MISSING_TOKEN}"}}}}, {}, "gateway.yaml")
    assert "upstreams.a.env.TOKEN" in str(error.value)
    assert "export MISSING_TOKEN=..." in str(error.value)


def test_the_audit_folder_the_gateway_creates_is_owner_only(tmp_path: Path) -> None:
    audit = {"enabled": True, "store": str(tmp_path / "trail" / "audit.db")}
    config = parse_config({"upstreams": {"a": {"command": "true"}}, "audit": audit})
    assert audit_store_location(config) == str(tmp_path / "trail" / "audit.db")
    assert (tmp_path / "trail").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("upstreams:\n  a: {command: one}\n  a: {command: two}\n", "upstreams.a"),
        ("upstreams:\n  a: {command: one, env: {X: '1', X: '2'}}\n", "upstreams.a.env.X"),
    ],
)
def test_a_key_given_twice_is_refused_rather_than_the_last_one_winning(tmp_path: Path, text: str, path: str) -> None:
    file = tmp_path / "gateway.yaml"
    file.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        load_config(file)
    assert (error.value.file, error.value.path) == (str(file), path)
    assert "given twice" in error.value.problem


def test_an_http_path_without_its_leading_slash_is_refused_at_load() -> None:
    raw = {"upstreams": {"a": {"command": "server"}}, "http": {"path": "mcp"}}
    with pytest.raises(ConfigError) as error:
        parse_config(raw, file="gateway.yaml")
    assert error.value.path == "http.path"
    assert "start the path with '/'" in error.value.fix


@pytest.mark.parametrize("path", ["/sse", "/messages/", "/messages/x"])
def test_an_http_path_of_the_legacy_sse_endpoint_is_refused_at_load(path: str) -> None:
    """Streamable HTTP answered there, so `/sse` (or `/messages/`) was gone without a word."""
    raw = {"upstreams": {"a": {"command": "server"}}, "http": {"path": path}}
    with pytest.raises(ConfigError) as error:
        parse_config(raw, file="gateway.yaml")
    assert error.value.path == "http.path"
    assert "legacy SSE endpoint" in error.value.problem and "http.sse: false" in error.value.fix
    parse_config({**raw, "http": {"path": path, "sse": False}}, file="gateway.yaml")  # no SSE endpoint: fine


@pytest.mark.parametrize(
    ("upstream", "misplaced"),
    [
        ({"url": "http://127.0.0.1:9/mcp", "cwd": "/srv"}, "cwd"),
        ({"url": "http://127.0.0.1:9/mcp", "args": ["-v"], "env": {"A": "1"}}, "args"),
        ({"url": "http://127.0.0.1:9/mcp", "env": {"A": "1"}}, "env"),
        ({"command": "server", "bearer_token": "t"}, "bearer_token"),
        ({"command": "server", "headers": {"X-A": "1"}}, "headers"),
        ({"command": "server", "transport": "sse"}, "transport"),
    ],
)
def test_settings_of_the_other_transport_are_refused_not_ignored(upstream: dict[str, object], misplaced: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config({"upstreams": {"a": upstream}}, file="gateway.yaml", env={})
    assert error.value.path == f"upstreams.a.{misplaced}"  # the field, not only the server
    assert error.value.problem.startswith(f"`{misplaced}` only applies to a ")


def test_an_unquoted_2026_era_is_the_era_not_a_date(tmp_path: Path) -> None:
    """YAML reads `era: 2026-07-28` as a date; the value the docs list must load as written."""
    path = tmp_path / "gateway.yaml"
    path.write_text("upstreams:\n  a: {command: server, era: 2026-07-28}\n", encoding="utf-8")
    assert load_config(path).upstreams["a"].era == "2026-07-28"


@pytest.mark.parametrize("events", [["tools/cal"], ["tools/call", "tool/call"], []])
def test_r66_a_required_pin_on_no_governed_event_is_refused_at_load(events: list[str]) -> None:
    # A typo'd event would pin nothing: while the host is down, the event it was meant for would go through.
    pin = {"name": "deny", "type": "validation", "events": events, "phase": "request"}
    server = {"name": "validators", "command": "validator", "required": [pin]}
    raw = {"upstreams": {"a": {"command": "server"}}, "interceptors": {"servers": [server]}}
    with pytest.raises(ConfigError) as error:
        parse_config(raw, file="gateway.yaml")
    assert error.value.path == "interceptors.servers[0].required[0].events"
    assert all(repr(event) in error.value.problem for event in events if event in ("tools/cal", "tool/call"))


@pytest.mark.parametrize("events", [["tools/call"], ["*"], ["tools/*", "sampling/createMessage"]])
def test_r66_a_required_pin_on_governed_events_loads(events: list[str]) -> None:
    pin = {"name": "deny", "type": "validation", "events": events}
    server = {"name": "validators", "command": "validator", "required": [pin]}
    config = parse_config({"upstreams": {"a": {"command": "server"}}, "interceptors": {"servers": [server]}})
    assert config.interceptors.servers[0].required[0].events == events


@pytest.mark.parametrize(
    ("hooks", "path"),
    [
        ([{"events": [], "phase": "request"}], "interceptors.overrides.secrets.hooks[0].events"),
        (
            [{"events": ["tools/call"], "phase": "request"}, {"events": [], "phase": "response"}],
            "interceptors.overrides.secrets.hooks[1].events",
        ),
        ([], "interceptors.overrides.secrets.hooks"),
    ],
)
def test_r61_a_hook_override_that_narrows_an_interceptor_to_nothing_is_refused_at_load(
    hooks: list[dict[str, object]], path: str
) -> None:
    # It was accepted, and the interceptor never ran again: `--check` showed "no interceptors" everywhere.
    raw = {
        "upstreams": {"a": {"command": "server"}},
        "interceptors": {"guards": [{"name": "secrets"}], "overrides": {"secrets": {"hooks": hooks}}},
    }
    with pytest.raises(ConfigError) as error:
        parse_config(raw, file="gateway.yaml")
    assert error.value.path == path
    assert "never run" in error.value.problem


def test_the_same_guard_listed_twice_is_refused_naming_both_entries() -> None:
    # It ran twice (sources `secrets` and `secrets-2`), and `overrides.secrets` / `config.secrets` applied to both.
    guards = [{"name": "pii"}, {"name": "secrets"}, {"name": "secrets", "config": {"action": "redact"}}]
    raw = {"upstreams": {"a": {"command": "server"}}, "interceptors": {"guards": guards}}
    with pytest.raises(ConfigError) as error:
        parse_config(raw, file="gateway.yaml")
    assert (error.value.file, error.value.path) == ("gateway.yaml", "interceptors.guards[2].name")
    assert "'secrets' is already listed as interceptors.guards[1]" in error.value.problem
    assert "once" in error.value.fix


def test_redact_writes_values_from_the_environment_back_as_their_variables() -> None:
    raw = {"upstreams": {"a": {"command": "server", "args": ["--token", "${TOKEN}", "${SHORT}", "${UNSET:-plain}"]}}}
    config = parse_config(raw, env={"TOKEN": "tok-123456", "SHORT": "ab"})
    assert config.redact("server --token tok-123456 ab plain") == "server --token ${TOKEN} ab plain"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "upstreams:\n  a: {command: x\n",
            "invalid YAML at line 3 column 1: expected ',' or '}', but got '<stream end>'",
        ),
        ("upstreams:\n\ta: {command: x}\n", "invalid YAML at line 2 column 1: found character '\\t' that cannot start"),
    ],
)
def test_a_yaml_syntax_error_says_what_the_parser_found(tmp_path: Path, text: str, problem: str) -> None:
    (tmp_path / "gateway.yaml").write_text(text)
    with pytest.raises(ConfigError) as error:
        load_config(tmp_path / "gateway.yaml")
    assert error.value.problem.startswith(problem)


def test_a_host_module_without_its_attribute_gets_the_form_as_the_fix() -> None:
    raw = {"upstreams": {"a": {"command": "server"}}, "interceptors": {"hosts": [{"module": "my_hosts"}]}}
    with pytest.raises(ConfigError) as error:
        parse_config(raw, file="gateway.yaml")
    assert error.value.path == "interceptors.hosts[0].module"
    assert error.value.fix == "name an InterceptorHost as module:attribute, e.g. my_hosts:host"


def test_the_schema_refuses_an_upstream_name_the_loader_refuses() -> None:
    validator = Draft202012Validator(config_json_schema())
    assert validator.is_valid({"upstreams": {"notes.v2": {"command": "server"}}})
    assert not validator.is_valid({"upstreams": {"my notes": {"command": "server"}}})
    with pytest.raises(ConfigError):
        parse_config({"upstreams": {"my notes": {"command": "server"}}})


@pytest.mark.parametrize("value", [0, -1, "many", 1.5])
def test_http_max_requests_in_flight_must_be_a_positive_integer(value: object) -> None:
    raw = {"upstreams": {"a": {"command": "server"}}, "http": {"max_requests_in_flight": value}}
    with pytest.raises(ConfigError) as error:
        parse_config(raw, file="gateway.yaml")
    assert error.value.path == "http.max_requests_in_flight"
    assert parse_config({**raw, "http": {}}, file="gateway.yaml").http.max_requests_in_flight == 1000


@pytest.mark.parametrize(
    ("upstreams", "path", "named"),
    [
        ({"a": {"command": "s", "prefix": "gh"}, "b": {"command": "s", "prefix": "gh"}}, "upstreams.b.prefix", "'a'"),
        ({"gh": {"command": "s"}, "b": {"command": "s", "prefix": "gh"}}, "upstreams.b.prefix", "'gh'"),
        # `a`'s tool `b__x` and `a__b`'s tool `x` are both `a__b__x`
        ({"a": {"command": "s"}, "a__b": {"command": "s"}}, "upstreams.a__b.prefix", "'a__b__x'"),
        (
            {"a": {"command": "s", "prefix": "gh_"}, "b": {"command": "s", "prefix": "gh"}},
            "upstreams.b.prefix",
            "'gh___x'",
        ),
    ],
    ids=["same-prefix", "a-prefix-equal-to-another-upstreams-name", "nested-prefix", "underscore-prefix"],
)
def test_upstreams_whose_prefixed_names_can_collide_are_refused_at_load(
    upstreams: dict[str, object], path: str, named: str
) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config({"upstreams": upstreams}, file="gateway.yaml")
    assert error.value.path == path
    assert sorted(error.value.data["upstreams"]) == sorted(upstreams)
    assert named in error.value.problem and "another `prefix`" in error.value.fix


@pytest.mark.parametrize(
    "upstreams",
    [
        {"a": {"command": "s", "prefix": "gh"}, "b": {"command": "s", "prefix": "ghx"}},
        {"a": {"command": "s", "prefix": "a_b"}, "b": {"command": "s", "prefix": "a"}},
        {"a": {"command": "s", "prefix": ""}, "b": {"command": "s", "prefix": ""}},  # clashes depend on the names
        {"a": {"command": "s", "prefix": ""}, "b": {"command": "s"}},
    ],
)
def test_upstreams_whose_prefixed_names_cannot_collide_load(upstreams: dict[str, object]) -> None:
    parse_config({"upstreams": upstreams}, file="gateway.yaml")


@pytest.mark.parametrize("priority", [{"request": "high"}, "abc", {"reqest": 5}, True, 2**31, {"request": 2**40}, 1.5])
def test_r15_a_bad_priority_override_names_its_field_and_what_is_allowed(priority: object) -> None:
    raw = {"upstreams": {"a": {"command": "s"}}, "interceptors": {"overrides": {"redact": {"priority": priority}}}}
    with pytest.raises(ConfigError) as error:
        parse_config(raw, file="gateway.yaml")
    assert error.value.path == "interceptors.overrides.redact.priority"  # not pydantic's `priority.int`
    assert error.value.problem.startswith(f"{priority!r} is no priority: give an integer from -2147483648 to ")
    assert "a mapping of `request` and/or `response` to one" in error.value.problem


@pytest.mark.parametrize("priority", [-(2**31), 2**31 - 1, {}, {"request": -100}, {"request": 1, "response": 2}])
def test_r15_an_int32_or_per_phase_priority_override_loads(priority: object) -> None:
    raw = {"upstreams": {"a": {"command": "s"}}, "interceptors": {"overrides": {"redact": {"priority": priority}}}}
    parse_config(raw, file="gateway.yaml").interceptors.overrides["redact"].to_overrides()


def test_r61_an_infinite_override_timeout_is_refused_at_load_naming_its_field() -> None:
    raw = {"upstreams": {"a": {"command": "s"}}, "interceptors": {"overrides": {"redact": {"timeout_ms": "inf"}}}}
    with pytest.raises(ConfigError) as error:
        parse_config(raw, file="gateway.yaml")
    assert error.value.path == "interceptors.overrides.redact.timeout_ms"


@pytest.mark.parametrize(
    ("raw", "path", "problem"),
    [
        # the misspelt key, not the `upstreams` it left empty
        ({"upstream": {"a": {"command": "s"}}}, "upstream", "Extra inputs are not permitted"),
        ({"upstreams": {"a": "s"}}, "upstreams.a", "Input should be a valid dictionary"),  # no class name
        ({"upstreams": {"a": {"command": "s"}}, "chain": {"points": ["recv"]}}, "chain.points[0]", "Input should be"),
        ({"upstreams": {"a b": {"command": "s"}}}, "upstreams.'a b'", "String should match pattern"),
        ({"upstreams": {}}, "upstreams", "at least one upstream server is needed"),  # no "Value error, "
    ],
)
def test_a_validation_error_names_the_field_as_written(raw: dict[str, object], path: str, problem: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(raw, file="gateway.yaml")
    assert error.value.path == path
    assert error.value.problem.startswith(problem)
    assert "instance of" not in error.value.problem


def test_a_file_that_is_not_utf8_is_a_config_error_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "gateway.yaml").write_bytes(b"upstreams:\n  a:\n    command: caf\xe9\n")
    with pytest.raises(ConfigError) as error:
        load_config(tmp_path / "gateway.yaml")
    assert error.value.problem == "not UTF-8 text (byte 0xe9 on line 3)"
    assert error.value.fix == "save the file as UTF-8 (YAML or JSON)"


def test_a_relative_cwd_is_relative_to_the_config_file_as_every_path_in_it(tmp_path: Path) -> None:
    (tmp_path / "gateway.yaml").write_text(
        "upstreams:\n  a: {command: ./tool.sh, cwd: sub}\n  b: {command: tool, cwd: /srv}\n"
        "interceptors:\n  servers:\n    - {name: guards, command: ./guards.sh, cwd: hosts}\n"
    )
    config = load_config(tmp_path / "gateway.yaml")
    assert config.upstreams["a"].cwd == str(tmp_path / "sub")  # not the gateway's working folder's `sub`
    assert config.upstreams["b"].cwd == "/srv"
    assert config.interceptors.servers[0].cwd == str(tmp_path / "hosts")


@pytest.mark.parametrize(
    ("upstream", "path", "fix"),
    [
        ({"command": ""}, "upstreams.a.command", "give a non-empty value"),
        ({"command": "s", "prefix": "my tools"}, "upstreams.a.prefix", "use letters, digits, '.', '_' or '-'"),
        ({"command": "s", "prefix": "gh/"}, "upstreams.a.prefix", "use letters, digits, '.', '_' or '-'"),
    ],
)
def test_an_upstream_that_could_not_start_or_be_named_is_refused_at_load(
    upstream: dict[str, object], path: str, fix: str
) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config({"upstreams": {"a": upstream}}, file="gateway.yaml")
    assert error.value.path == path
    assert error.value.fix.startswith(fix)


@pytest.mark.parametrize("value", [0, -5, "long", 7.5])
def test_http_keep_alive_s_must_be_a_positive_whole_number_of_seconds(value: object) -> None:
    raw = {"upstreams": {"a": {"command": "server"}}, "http": {"keep_alive_s": value}}
    with pytest.raises(ConfigError) as error:
        parse_config(raw, file="gateway.yaml")
    assert error.value.path == "http.keep_alive_s"
    assert parse_config({**raw, "http": {}}, file="gateway.yaml").http.keep_alive_s == 75
