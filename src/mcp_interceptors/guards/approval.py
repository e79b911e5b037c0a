"""approval: ask a person before a risky tool call runs. A validator on `tools/call` whose rules (tool-name
globs, a CEL condition over the arguments and the principal) pick the calls that need a yes; for those it
answers with an escalation (`protocol.results.escalate`) instead of a verdict.

An invoker that knows escalations (the gateway) asks the client's user and runs the call on their yes; any
other sees `valid: false` and blocks it. Rules compile at build time; the first that matches asks. A
condition that cannot be evaluated blocks the call (fail closed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from mcp_interceptors.guards._cel import CelCondition, CelFailure, cel_activation
from mcp_interceptors.guards._config import GuardSchema, SettingsCache
from mcp_interceptors.guards._names import Glob, ServerMap, arguments_of, server_for, tool_name_of
from mcp_interceptors.host import InterceptorHost, Invocation
from mcp_interceptors.protocol.escalation import NO_FIELDS, RememberScope, escalate
from mcp_interceptors.protocol.results import ValidationMessage, ValidationResult

#: The property types a form elicitation may ask for (MCP's restricted, flat schema).
_FIELD_TYPES = ("string", "number", "integer", "boolean")
#: How much of the arguments the person is shown.
_SHOWN_ARGUMENTS = 1500
_GLOBS = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "minItems": 1}]}
SCHEMA = GuardSchema(
    {
        "rules": {
            "type": "array",
            "default": [],
            "description": "Which calls need a person's approval; the first rule that matches asks.",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "minLength": 1, "description": "The rule's name (audit, memory)."},
                    "tool": {**_GLOBS, "description": "Tool-name globs (default `*`)."},
                    "server": {**_GLOBS, "description": "Server-name globs."},
                    "cel": {"type": "string", "description": "Asks only if true; sees args, tool, server, principal."},
                    "message": {"type": "string", "minLength": 1, "maxLength": 1000},
                    "requested_schema": {"type": "object", "description": "What the person fills in to approve."},
                    "timeout_s": {"type": "number", "exclusiveMinimum": 0, "maximum": 86_400},
                    "remember": {"enum": ["call", "session", "principal"]},
                    "remember_minutes": {"type": "number", "exclusiveMinimum": 0, "maximum": 44_640},
                },
                "additionalProperties": False,
            },
        },
        "timeout_s": {
            "type": "number",
            "exclusiveMinimum": 0,
            "maximum": 86_400,
            "default": 120,
            "description": "How long a person has to answer, unless a rule says otherwise.",
        },
        "tool_servers": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "default": {},
            "description": "Outside the gateway: {tool-name glob: server name}.",
        },
        "webhook": {
            "type": "object",
            "description": "The gateway asks here when the client cannot be asked (no form elicitation).",
            "properties": {
                "url": {"type": "string", "pattern": "^https?://[^/?#]+"},
                "secret": {"type": "string", "minLength": 16, "description": "Shared HMAC-SHA256 key (${ENV})."},
                "public_url": {
                    "type": "string",
                    "pattern": "^https?://[^/?#]+",
                    "description": "The gateway's base URL for callback answers, as the receiver reaches it.",
                },
            },
            "required": ["url", "secret"],
            "additionalProperties": False,
        },
    },
    build_only=["webhook"],
)
DESCRIPTION = "Asks a person to approve tool calls that match its rules (names, CEL over arguments and principal)."


@dataclass(frozen=True, slots=True)
class _Rule:
    name: str
    tools: Glob
    servers: Glob | None
    condition: CelCondition | None
    message: str | None
    requested_schema: Mapping[str, Any]
    timeout_ms: int
    remember: RememberScope
    remember_ms: int | None

    def applies(self, server: str | None, tool: str) -> bool:
        if self.servers is not None and not self.servers.matches(server):
            return False
        return self.tools.matches_name(tool)


@dataclass(frozen=True, slots=True)
class _Settings:
    rules: Sequence[_Rule]
    servers: ServerMap


def _globs(raw: str | Sequence[str]) -> Glob:
    return Glob([raw] if isinstance(raw, str) else raw)


def form_schema_problem(schema: Any) -> str | None:
    """Why a form elicitation cannot ask `schema` (it must be an object schema of flat, primitive
    properties), or None."""
    if not isinstance(schema, Mapping):
        return "it is not an object"
    try:
        Draft202012Validator.check_schema(dict(schema))
    except SchemaError as exc:
        return f"it is not a JSON Schema: {exc.message}"
    if schema.get("type") != "object":
        return "its type must be 'object' (a form of fields)"
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping):
        return "its properties must be an object"
    for name, spec in properties.items():
        if not isinstance(spec, Mapping) or spec.get("type") not in _FIELD_TYPES:
            return f"properties.{name}.type must be one of {', '.join(_FIELD_TYPES)} (a form asks for flat fields)"
    return None


def check_requested_schema(schema: Mapping[str, Any], where: str) -> dict[str, Any]:
    """`schema` if a form elicitation can ask it, else `ValueError` naming `where`."""
    problem = form_schema_problem(schema)
    if problem is not None:
        raise ValueError(f"{where}: {problem}")
    return dict(schema)


def _rule(index: int, raw: Mapping[str, Any], timeout_s: float) -> _Rule:
    where = f"config.rules[{index}]"
    remember: RememberScope = raw.get("remember", "call")
    minutes = raw.get("remember_minutes")
    if minutes is not None and remember == "call":
        raise ValueError(f"{where}.remember_minutes needs remember: session or principal")
    if remember == "principal" and minutes is None:
        raise ValueError(f"{where}: remember: principal needs remember_minutes (how long the approval holds)")
    schema = raw.get("requested_schema")
    return _Rule(
        name=raw.get("name") or f"rule-{index}",
        tools=_globs(raw.get("tool", "*")),
        servers=_globs(raw["server"]) if "server" in raw else None,
        condition=CelCondition(raw["cel"], f"{where}.cel") if "cel" in raw else None,
        message=raw.get("message"),
        requested_schema=check_requested_schema(schema, f"{where}.requested_schema") if schema else dict(NO_FIELDS),
        timeout_ms=max(1, round(float(raw.get("timeout_s", timeout_s)) * 1000)),
        remember=remember,
        remember_ms=max(1, round(minutes * 60_000)) if minutes is not None else None,
    )


def _compile(raw: Mapping[str, Any]) -> _Settings:
    rules = [_rule(i, rule, raw["timeout_s"]) for i, rule in enumerate(raw["rules"])]
    names = [rule.name for rule in rules]
    duplicate = next((name for name in names if names.count(name) > 1), None)
    if duplicate is not None:
        raise ValueError(f"config.rules: two rules are named {duplicate!r} (an approval is remembered by name)")
    return _Settings(rules, ServerMap(raw["tool_servers"]))


def question_for(rule: _Rule, tool: str, server: str | None, arguments: Mapping[str, Any]) -> str:
    """What the person is shown: the rule's message (or a plain one), then the call itself."""
    shown = orjson.dumps(dict(arguments), option=orjson.OPT_SORT_KEYS).decode()
    if len(shown) > _SHOWN_ARGUMENTS:
        shown = shown[:_SHOWN_ARGUMENTS] + "…"
    where = f" on {server}" if server else ""
    head = rule.message or f"Allow the call to {tool}{where}?"
    return f"{head}\n\nTool: {tool}{where}\nArguments: {shown}"


def check_call(settings: _Settings, inv: Invocation) -> ValidationResult | bool:
    tool = tool_name_of(inv.payload)
    if tool is None:
        return True  # not a tool call this guard can judge; the server rejects it
    server = server_for(inv, tool, settings.servers)
    arguments = arguments_of(inv.payload)
    activation: dict[str, Any] | None = None
    for rule in settings.rules:
        if not rule.applies(server, tool):
            continue
        if rule.condition is not None:
            if activation is None:
                activation = cel_activation(inv, tool, server, arguments)
            holds = rule.condition.evaluate(activation)
            if isinstance(holds, CelFailure):  # no value: nobody can be asked about what the rule cannot read
                message = f"approval rule {rule.name!r} ({rule.condition.source}) {holds.reason}"
                detail = ValidationMessage(message=message, severity="error", path="$.params.arguments")
                return ValidationResult(valid=False, severity="error", messages=(detail,), info={"rule": rule.name})
            if not holds:
                continue
        return escalate(
            question_for(rule, tool, server, arguments),
            requested_schema=rule.requested_schema,
            timeout_ms=rule.timeout_ms,
            key=f"{rule.name}:{tool}",
            remember=rule.remember,
            remember_ms=rule.remember_ms,
            info={"rule": rule.name, "tool": tool},
        )
    return True


def build(name: str, config: Mapping[str, Any]) -> InterceptorHost:
    """A host with the one validator."""
    settings = SettingsCache(name, SCHEMA, config, _compile)
    host = InterceptorHost(name, copy_payloads=False)

    @host.validator(
        name, events=["tools/call"], phase="request", description=DESCRIPTION, config_schema=SCHEMA.advertised
    )
    async def check(inv: Invocation) -> ValidationResult | bool:
        return check_call(settings.for_config(inv.config), inv)

    return host
