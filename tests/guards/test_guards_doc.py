"""docs/guards.md stays true: one section per guard whose config table matches the guard's schema (keys,
defaults, build-only keys), and every snippet in it loads."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from mcp_interceptors import guards
from mcp_interceptors.gateway.config import parse_config
from mcp_interceptors.guards import (
    approval,
    audit_log,
    client_features,
    exfiltration,
    injection,
    pii,
    pinning,
    policy,
    rate_limit,
    schema,
    secrets,
    size,
)
from mcp_interceptors.guards._config import GuardSchema
from mcp_interceptors.guards._detectors import PII_KINDS, SECRET_KINDS
from mcp_interceptors.guards._scanning import CONTENT_EVENTS

DOC = Path(__file__).resolve().parents[2] / "docs" / "guards.md"
SCHEMAS: dict[str, GuardSchema] = {
    "secrets": secrets.SCHEMA,
    "pii": pii.SCHEMA,
    "exfiltration-guard": exfiltration.SCHEMA,
    "tool-policy": policy.SCHEMA,
    "schema-guard": schema.SCHEMA,
    "prompt-injection": injection.SCHEMA,
    "rate-limit": rate_limit.SCHEMA,
    "sampling-guard": client_features.SAMPLING_SCHEMA,
    "elicitation-guard": client_features.ELICITATION_SCHEMA,
    "roots-guard": client_features.ROOTS_SCHEMA,
    "size-limit": size.SCHEMA,
    "tool-pinning": pinning.SCHEMA,
    "audit-log": audit_log.SCHEMA,
    "approval": approval.SCHEMA,
}
#: Wordings the tables use for long defaults.
NAMED_DEFAULTS = {"all kinds": (list(SECRET_KINDS), list(PII_KINDS)), "content events": (CONTENT_EVENTS,)}
_ROW = re.compile(r"^\| `(?P<key>\w+)` \| [^|]*(?:\\\|[^|]*)* \| (?P<default>[^|]+) \| (?P<when>[^|]+) \|")


def sections() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    parts = re.split(r"^## (.+)\n", text, flags=re.MULTILINE)
    return {title.strip("`"): body for title, body in zip(parts[1::2], parts[2::2], strict=True) if title[0] == "`"}


def table(section: str) -> dict[str, tuple[str, str]]:
    rows = {}
    for line in section.splitlines():
        match = _ROW.match(line)
        if match:
            rows[match["key"]] = (match["default"].strip(), match["when"].strip())
    return rows


def test_one_section_per_guard() -> None:
    assert list(sections()) == guards.available() == list(SCHEMAS)


@pytest.mark.parametrize("guard", list(SCHEMAS))
def test_config_table_matches_the_schema(guard: str) -> None:
    schema = SCHEMAS[guard]
    rows = table(sections()[guard])
    assert list(rows) == list(schema.properties)
    for key, (default, when) in rows.items():
        assert (when == "no (build only)") == (key in schema.build_only), key
        expected = schema.properties[key].get("default")
        if default in NAMED_DEFAULTS:
            assert expected in NAMED_DEFAULTS[default], key
        else:
            assert json.loads(default.strip("`")) == expected, key


def yaml_snippets() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)


@pytest.mark.parametrize("snippet", yaml_snippets())
def test_yaml_snippets_are_valid_gateway_config(snippet: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pins.json").write_text(json.dumps(pinning.pin_document([{"name": "echo"}])))
    raw: dict[str, Any] = yaml.safe_load(snippet)
    # The environment a snippet names (the approval webhook's secret).
    env = {"APPROVAL_WEBHOOK_SECRET": "a-secret-of-32-characters-or-so"}
    config = parse_config({**raw, "upstreams": {"u": {"command": "true"}}}, env=env)
    assert config.interceptors.guards
    for guard in config.interceptors.guards:
        guards.load(guard.name, guard.config)


def test_python_snippet_runs(capsys: pytest.CaptureFixture[str]) -> None:
    [code] = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)
    exec(compile(code, str(DOC), "exec"), {})
    assert "secrets" in capsys.readouterr().out
