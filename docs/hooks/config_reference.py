"""MkDocs hook: the gateway configuration reference, generated from `mcp-interceptors config-schema`.

`docs/configuration.md` holds the marker below; each build replaces it with one table per top-level key,
so the reference cannot drift from the code. A field's effect is its JSON Schema `description`, else its
entry in `config_notes.yaml` beside this file; `tests/docs/test_config_reference.py` fails when a field
has neither, when a note names no field, and when a default shown here is not the model's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

MARKER = "<!-- config-reference -->"
NOTES = Path(__file__).with_name("config_notes.yaml")


@dataclass(frozen=True)
class Row:
    """One setting: its dotted path, its type and default as shown, and what it does."""

    section: str
    path: str
    type: str
    default: str
    effect: str


def load_schema() -> dict[str, Any]:
    """The JSON Schema the installed package prints (the same command users run)."""
    done = subprocess.run(
        [sys.executable, "-m", "mcp_interceptors", "config-schema"], capture_output=True, text=True, check=True
    )
    schema: dict[str, Any] = json.loads(done.stdout)
    return schema


def load_notes() -> dict[str, dict[str, Any]]:
    """`config_notes.yaml`: path -> {effect, default}; a plain string is the effect."""
    raw = yaml.safe_load(NOTES.read_text(encoding="utf-8")) or {}
    return {path: value if isinstance(value, dict) else {"effect": value} for path, value in raw.items()}


class _Walker:
    def __init__(self, schema: dict[str, Any], notes: dict[str, dict[str, Any]]) -> None:
        self.defs: dict[str, Any] = schema.get("$defs", {})
        self.notes = notes
        self.rows: list[Row] = []

    def resolve(self, node: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in node:
            node = self.defs[node["$ref"].rsplit("/", 1)[-1]]
        return node

    def model(self, node: dict[str, Any]) -> dict[str, Any] | None:
        """The object model `node` is (or may be, beside null), if it has properties of its own."""
        for option in [node, *node.get("anyOf", [])]:
            resolved = self.resolve(option)
            if "properties" in resolved:
                return resolved
        return None

    def describe_type(self, node: dict[str, Any]) -> str:
        node = self.resolve(node)
        if "anyOf" in node:
            options = [option for option in node["anyOf"] if option.get("type") != "null"]
            return " or ".join(self.describe_type(option) for option in options)
        if "enum" in node:
            return " \\| ".join(f"`{json.dumps(value)}`" for value in node["enum"])
        kind = node.get("type")
        if kind == "array":
            return f"list of {self.describe_type(node.get('items', {}))}"
        if kind == "object" or "properties" in node:
            if "properties" in node:
                return "object"
            if "propertyNames" in node:
                keys = " \\| ".join(node["propertyNames"].get("enum", []))
                return f"map of {keys} to {self.describe_type(node.get('additionalProperties', {}))}"
            return "map"
        bounds = []
        if "exclusiveMinimum" in node:
            bounds.append(f"> {node['exclusiveMinimum']}")
        if "minimum" in node:
            bounds.append(f"≥ {node['minimum']}")
        if "maximum" in node:
            bounds.append(f"≤ {node['maximum']:,}")
        return " ".join([str(kind or "any"), *bounds])

    def describe_default(self, path: str, node: dict[str, Any], required: bool) -> str:
        if "default" in self.notes.get(path, {}):
            return f"`{json.dumps(self.notes[path]['default'])}`"
        if required:
            return "required"
        if "default" not in node:
            return "`[]`" if self.resolve(node).get("type") == "array" else "`{}`"
        default = node["default"]
        return "unset" if default is None else f"`{json.dumps(default)}`"

    def effect(self, path: str, node: dict[str, Any]) -> str:
        text = node.get("description") or self.notes.get(path, {}).get("effect") or ""
        return " ".join(str(text).split()).replace("|", "\\|")

    def walk(self, section: str, prefix: str, node: dict[str, Any]) -> None:
        model = self.resolve(node)
        required = set(model.get("required", []))
        for name, field in model.get("properties", {}).items():
            path = f"{prefix}.{name}" if prefix else name
            self.field(section, path, field, name in required)

    def field(self, section: str, path: str, node: dict[str, Any], required: bool) -> None:
        model = self.model(node)
        if not (path == section and model is not None):  # a section's own object is its heading
            self.rows.append(
                Row(
                    section,
                    path,
                    self.describe_type(node),
                    self.describe_default(path, node, required),
                    self.effect(path, node),
                )
            )
        if model is not None:
            self.walk(section, path, model)
            return
        for option in [node, *node.get("anyOf", [])]:
            resolved = self.resolve(option)
            items = resolved.get("items")
            if resolved.get("type") == "array" and isinstance(items, dict) and self.model(items) is not None:
                self.walk(section, f"{path}[]", items)
            values = [*resolved.get("patternProperties", {}).values()]
            if isinstance(resolved.get("additionalProperties"), dict):
                values.append(resolved["additionalProperties"])
            for value in values:
                if self.model(value) is not None:
                    self.walk(section, f"{path}.<name>", value)


def rows(schema: dict[str, Any], notes: dict[str, dict[str, Any]]) -> list[Row]:
    """Every setting of the schema, depth first, each under the top-level key it belongs to."""
    walker = _Walker(schema, notes)
    required = set(schema.get("required", []))
    for name, node in schema["properties"].items():
        section = name if walker.model(node) is not None or "patternProperties" in node else ""
        walker.field(section, name, node, name in required)
    return walker.rows


def render(schema: dict[str, Any], notes: dict[str, dict[str, Any]]) -> str:
    """Markdown: the top-level scalars first, then a section per top-level object."""
    by_section: dict[str, list[Row]] = {}
    for row in rows(schema, notes):
        by_section.setdefault(row.section, []).append(row)
    out: list[str] = []
    for section, section_rows in sorted(by_section.items(), key=lambda item: item[0] != ""):
        out.append(f"## `{section}`" if section else "## Top level")
        out.append("")
        out.append("| Setting | Type | Default | Effect |")
        out.append("|---|---|---|---|")
        out.extend(f"| `{row.path}` | {row.type} | {row.default} | {row.effect} |" for row in section_rows)
        out.append("")
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render(load_schema(), load_notes()))
