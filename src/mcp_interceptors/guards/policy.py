"""tool-policy: allow/deny tools by server and name globs, at discovery (a mutator filtering `tools/list`)
and at call time (a validator on `tools/call`), plus argument rules written in CEL or JSON Schema.

Rules compile at build time. A deny pattern wins over an allow pattern; an empty `allow` allows every
tool not denied. A CEL rule must evaluate to `true` for the call to pass; an evaluation error denies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema.exceptions import best_match

from mcp_interceptors.guards._cel import CelCondition, CelFailure, cel_activation
from mcp_interceptors.guards._config import GuardSchema, SettingsCache
from mcp_interceptors.guards._names import (
    Glob,
    ServerMap,
    arguments_of,
    server_for,
    tool_name_of,
)
from mcp_interceptors.guards._schemas import CompiledSchema, compile_config_schema, describe_error
from mcp_interceptors.guards._walk import format_path
from mcp_interceptors.host import InterceptorHost, Invocation
from mcp_interceptors.protocol.results import ValidationMessage, ValidationResult

_PATTERN = {
    "oneOf": [
        {"type": "string", "description": "A tool-name glob."},
        {
            "type": "object",
            "properties": {"server": {"type": "string"}, "tool": {"type": "string"}},
            "additionalProperties": False,
            "minProperties": 1,
        },
    ]
}
SCHEMA = GuardSchema(
    {
        "allow": {
            "type": "array",
            "items": _PATTERN,
            "default": [],
            "description": "If non-empty, only matching tools are allowed. Globs match the tool name.",
        },
        "deny": {"type": "array", "items": _PATTERN, "default": [], "description": "Matching tools are denied."},
        "arguments": {
            "type": "array",
            "default": [],
            "description": "Argument rules for matching tools: a CEL condition that must hold, or a JSON Schema.",
            "items": {
                "type": "object",
                "properties": {
                    "tool": {"type": "string", "default": "*"},
                    "server": {"type": "string"},
                    "cel": {"type": "string", "description": "Variables: args, tool, server, principal, session."},
                    "schema": {"type": "object"},
                    "message": {"type": "string"},
                },
                "additionalProperties": False,
            },
        },
        "filter_listing": {"type": "boolean", "default": True, "description": "Remove denied tools from tools/list."},
        "tool_servers": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "default": {},
            "description": "Outside the gateway: {tool-name glob: server name}.",
        },
    },
)
DESCRIPTION = "Allows or denies tools by server and name globs (tools/list and tools/call) and checks arguments."
#: Filtering a listing is security sanitization (spec §6 band).
LISTING_PRIORITY = {"response": -20_000}


@dataclass(frozen=True, slots=True)
class _Pattern:
    server: Glob | None
    tool: Glob

    def matches(self, server: str | None, tool: str, *, strict_prefix: bool = False) -> bool:
        """With `strict_prefix` (an allowlist), a name matches after its prefix only when that prefix is the
        server's own name, the gateway's default; with a custom `prefix`, allow the exposed name."""
        if self.server is not None and not self.server.matches(server):
            return False
        return self.tool.matches_name(tool, prefix=(server or "") if strict_prefix else None)


@dataclass(frozen=True, slots=True)
class _ArgumentRule:
    index: int
    applies: _Pattern
    condition: CelCondition | None
    schema: CompiledSchema | None
    message: str | None


@dataclass(frozen=True, slots=True)
class _Settings:
    allow: Sequence[_Pattern]
    deny: Sequence[_Pattern]
    arguments: Sequence[_ArgumentRule]
    filter_listing: bool
    servers: ServerMap

    def is_allowed(self, server: str | None, tool: str) -> bool:
        if any(p.matches(server, tool) for p in self.deny):
            return False
        return not self.allow or any(p.matches(server, tool, strict_prefix=True) for p in self.allow)


def _pattern(raw: str | Mapping[str, str]) -> _Pattern:
    if isinstance(raw, str):
        return _Pattern(None, Glob([raw]))
    server = raw.get("server")
    return _Pattern(Glob([server]) if server is not None else None, Glob([raw.get("tool", "*")]))


def _compile_rule(index: int, raw: Mapping[str, Any]) -> _ArgumentRule:
    if "cel" not in raw and "schema" not in raw:
        raise ValueError(f"config.arguments[{index}]: give `cel` (a condition) or `schema` (a JSON Schema), or both")
    condition = CelCondition(raw["cel"], f"config.arguments[{index}].cel") if "cel" in raw else None
    schema = None
    if "schema" in raw:
        schema = compile_config_schema(raw["schema"], f"config.arguments[{index}].schema")
    applies = _pattern({k: raw[k] for k in ("server", "tool") if k in raw} or {"tool": "*"})
    return _ArgumentRule(index, applies, condition, schema, raw.get("message"))


def _compile(raw: Mapping[str, Any]) -> _Settings:
    return _Settings(
        allow=[_pattern(p) for p in raw["allow"]],
        deny=[_pattern(p) for p in raw["deny"]],
        arguments=[_compile_rule(i, rule) for i, rule in enumerate(raw["arguments"])],
        filter_listing=raw["filter_listing"],
        servers=ServerMap(raw["tool_servers"]),
    )


def _check_rule(rule: _ArgumentRule, arguments: Mapping[str, Any], activation: dict[str, Any]) -> str | None:
    """None when the rule holds, else why not."""
    if rule.schema is not None:
        error = best_match(rule.schema.validator.iter_errors(dict(arguments)))
        if error is not None:
            where = format_path(("params", "arguments", *error.absolute_path))
            return rule.message or f"arguments violate rule #{rule.index} at {where}: {describe_error(error)}"
    if rule.condition is not None:
        holds = rule.condition.evaluate(activation)
        if isinstance(holds, CelFailure):  # no value (e.g. a missing field) denies: fail closed
            why = f"argument rule #{rule.index} ({rule.condition.source}) {holds.reason}"
            return why if holds.not_bool else rule.message or why
        if not holds:
            return rule.message or f"argument rule #{rule.index} failed: {rule.condition.source}"
    return None


def check_call(settings: _Settings, inv: Invocation) -> ValidationResult | bool:
    tool = tool_name_of(inv.payload)
    if tool is None:
        return True  # not a tool call this guard can judge; the server rejects it
    server = server_for(inv, tool, settings.servers)
    if not settings.is_allowed(server, tool):
        where = f" on server {server!r}" if server else ""
        return _deny(f"tool {tool!r}{where} is not allowed by policy", "$.params.name", {"tool": tool})
    rules = [rule for rule in settings.arguments if rule.applies.matches(server, tool)]
    if not rules:
        return True
    arguments = arguments_of(inv.payload)
    activation = cel_activation(inv, tool, server, arguments) if any(r.condition is not None for r in rules) else {}
    failures = [why for rule in rules if (why := _check_rule(rule, arguments, activation)) is not None]
    if failures:
        messages = tuple(ValidationMessage(message=m, severity="error", path="$.params.arguments") for m in failures)
        return ValidationResult(valid=False, severity="error", messages=messages, info={"tool": tool})
    return True


def _deny(message: str, path: str, info: dict[str, Any]) -> ValidationResult:
    return ValidationResult(
        valid=False,
        severity="error",
        messages=(ValidationMessage(message=message, severity="error", path=path),),
        info=info,
    )


def filter_listing(settings: _Settings, inv: Invocation) -> dict[str, Any] | None:
    """The listing without denied tools, or None when nothing is removed (no copy is made)."""
    payload = inv.payload
    tools = payload.get("tools") if isinstance(payload, Mapping) else None
    if not settings.filter_listing or not isinstance(tools, list):
        return None
    kept = []
    for tool in tools:
        name = tool.get("name") if isinstance(tool, Mapping) else None
        if not isinstance(name, str) or settings.is_allowed(server_for(inv, name, settings.servers), name):
            kept.append(tool)
    if len(kept) == len(tools):
        return None
    return {**payload, "tools": kept}


def build(name: str, config: Mapping[str, Any]) -> InterceptorHost:
    """A host with the call-time validator and the listing filter."""
    settings = SettingsCache(name, SCHEMA, config, _compile)
    host = InterceptorHost(name, copy_payloads=False)
    advertised = SCHEMA.advertised

    @host.validator(name, events=["tools/call"], phase="request", description=DESCRIPTION, config_schema=advertised)
    async def check(inv: Invocation) -> ValidationResult | bool:
        return check_call(settings.for_config(inv.config), inv)

    @host.mutator(
        f"{name}-listing",
        events=["tools/list"],
        phase="response",
        priority=LISTING_PRIORITY,
        description="Removes tools that tool-policy denies from tools/list results.",
        config_schema=advertised,
    )
    async def listing(inv: Invocation) -> dict[str, Any] | None:
        return filter_listing(settings.for_config(inv.config), inv)

    return host
