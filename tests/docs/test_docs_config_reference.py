"""The generated configuration reference (docs/configuration.md) describes every field of the gateway's
JSON Schema, with the defaults the configuration model really has."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from mcp_interceptors.gateway.config import GatewayConfig

ROOT = Path(__file__).resolve().parents[2]


def reference_hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("config_reference", ROOT / "docs" / "hooks" / "config_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


HOOK = reference_hook()
SCHEMA = HOOK.load_schema()
NOTES = HOOK.load_notes()
ROWS = HOOK.rows(SCHEMA, NOTES)

#: One of each list item and map entry, so that every default of the model can be read.
FULL = {
    "upstreams": {"up": {"command": "server"}},
    "interceptors": {
        "guards": [{"name": "secrets"}],
        "hosts": [{"module": "m:host"}],
        "servers": [
            {"name": "s", "command": "host", "required": [{"name": "g", "type": "validation", "events": ["*"]}]}
        ],
        "overrides": {"g": {"hooks": [{"events": ["tools/call"], "phase": "request"}]}},
    },
    "auth": {"jwt": {"jwks_file": "keys.json"}},
    "telemetry": {},  # off when absent: present, its fields show their defaults
}


def model_value(dump: Any, path: str) -> Any:
    """The value at a reference path (`a.<name>.b[].c`) in the dump of the FULL config."""
    for part in path.split("."):
        items = part.endswith("[]")
        part = part.removesuffix("[]")
        dump = next(iter(dump.values())) if part == "<name>" else dump[part]
        if items:
            dump = dump[0]
    return dump


def test_every_field_has_an_effect() -> None:
    assert [row.path for row in ROWS if not row.effect] == []


def test_every_note_names_a_field_the_schema_does_not_describe_itself() -> None:
    paths = {row.path: row for row in ROWS}
    assert [path for path in NOTES if path not in paths] == []
    redundant = [row.path for row in HOOK.rows(SCHEMA, {}) if row.effect and NOTES.get(row.path, {}).get("effect")]
    assert redundant == [], "the schema describes these now: remove their notes"


def paths_set(value: Any, path: str = "") -> set[str]:
    """The reference paths FULL gives a value of its own (and so shows no default at)."""
    found = {path} if path else set()
    if isinstance(value, dict):
        for key, item in value.items():
            named = "<name>" if path in {"upstreams", "interceptors.overrides"} else key
            found |= paths_set(item, f"{path}.{named}" if path else named)
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        found |= paths_set(value[0], f"{path}[]")
    return found


def test_the_defaults_shown_are_the_models() -> None:
    dump = GatewayConfig.model_validate(FULL).model_dump(mode="json")
    given = paths_set(FULL)
    wrong = []
    for row in ROWS:
        if row.default == "required" or row.path in given:
            continue
        shown = None if row.default == "unset" else json.loads(row.default.strip("`"))
        actual = model_value(dump, row.path)
        if shown != actual:
            wrong.append(f"{row.path}: shown {shown!r}, model {actual!r}")
    assert wrong == []


def test_the_rendered_page_has_a_row_per_field() -> None:
    page = HOOK.render(SCHEMA, NOTES)
    assert [row.path for row in ROWS if f"| `{row.path}` |" not in page] == []
    assert page.count("\n## ") + page.startswith("## ") == len({row.section for row in ROWS})
