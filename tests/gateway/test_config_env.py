"""`${VAR}` substitution in gateway.yaml strings."""

from __future__ import annotations

import pytest

from mcp_interceptors.gateway.config import ConfigError, substitute_env


def test_variables_defaults_and_a_literal_dollar_brace() -> None:
    config = {"a": "${HOME}/x", "b": ["${NOPE:-fallback}"], "cel": "args.x == '$${HOME}'", "n": 5}
    assert substitute_env(config, {"HOME": "/home/me"}, "gateway.yaml") == {
        "a": "/home/me/x",
        "b": ["fallback"],
        "cel": "args.x == '${HOME}'",  # `$${` is a literal `${`, whatever the environment holds
        "n": 5,
    }


def test_a_missing_variable_names_the_field_and_the_fix() -> None:
    with pytest.raises(ConfigError) as error:
        substitute_env({"upstreams": {"a": {"env": {"TOKEN": "${MISSING_TOKEN}"}}}}, {}, "gateway.yaml")
    assert "upstreams.a.env.TOKEN" in str(error.value)
    assert "export MISSING_TOKEN=..." in str(error.value)
