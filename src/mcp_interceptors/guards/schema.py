"""schema-guard: validate `tools/call` arguments against the tool's advertised `inputSchema` and results
against its `outputSchema`, both learned from `tools/list` results per session (or configured).

A result carries no tool name, so the tool of a call is remembered under the invocation's `traceId`
(the gateway's request id) until its result arrives. Results that are not `complete` (the 2026-07-28
`input_required` result) and error results pass untouched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from jsonschema.exceptions import SchemaError, ValidationError, relevance

from mcp_interceptors.guards._config import GuardSchema, SettingsCache
from mcp_interceptors.guards._names import params_of
from mcp_interceptors.guards._schemas import (
    CompiledSchema,
    Unresolvable,
    compile_config_schema,
    compile_schema,
    describe_error,
)
from mcp_interceptors.guards._state import SessionState, TtlMap
from mcp_interceptors.guards._walk import format_path
from mcp_interceptors.host import InterceptorHost, Invocation
from mcp_interceptors.protocol.results import ValidationMessage, ValidationResult

SCHEMA = GuardSchema(
    {
        "validate_arguments": {"type": "boolean", "default": True},
        "validate_results": {"type": "boolean", "default": True},
        "unknown_tools": {
            "enum": ["allow", "deny"],
            "default": "allow",
            "description": "A call to a tool with no known schema (not listed in this session, not configured).",
        },
        "schemas": {
            "type": "object",
            "default": {},
            "description": "Fixed schemas by tool name: {tool: {input: {...}, output: {...}}}; they win over listings.",
            "additionalProperties": {
                "type": "object",
                "properties": {"input": {"type": "object"}, "output": {"type": "object"}},
                "additionalProperties": False,
            },
        },
        "max_sessions": {"type": "integer", "minimum": 1, "default": 10_000},
        "session_ttl_seconds": {"type": "number", "exclusiveMinimum": 0, "default": 3600},
    },
    build_only=["max_sessions", "session_ttl_seconds"],
)
DESCRIPTION = "Validates tools/call arguments and results against the schemas the tool advertised in tools/list."
_MAX_MESSAGES = 5
_MAX_TOOLS = 5_000
_MAX_PENDING = 1_000


@dataclass(frozen=True, slots=True)
class _ToolSchemas:
    input: CompiledSchema | None
    output: CompiledSchema | None


@dataclass
class _Session:
    tools: TtlMap[str, _ToolSchemas] = field(default_factory=lambda: TtlMap(max_items=_MAX_TOOLS, ttl_s=86_400))
    pending: TtlMap[str, str] = field(default_factory=lambda: TtlMap(max_items=_MAX_PENDING, ttl_s=600))


class _ValidatorCache:
    """Compiled validators shared by all sessions, keyed by the schema's canonical JSON."""

    def __init__(self) -> None:
        self._cache: TtlMap[bytes, CompiledSchema | None] = TtlMap(max_items=4096, ttl_s=86_400)

    def get(self, schema: Any) -> CompiledSchema | None:
        """A validator, or None for a missing or invalid schema (an upstream's bad schema is not our crash)."""
        if not isinstance(schema, Mapping):
            return None
        key = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
        if key in self._cache:
            return self._cache.get(key)
        try:
            validator: CompiledSchema | None = compile_schema(schema)
        except SchemaError:
            validator = None
        self._cache.set(key, validator)
        return validator


_VALIDATORS = _ValidatorCache()


@dataclass(frozen=True, slots=True)
class _Settings:
    validate_arguments: bool
    validate_results: bool
    deny_unknown: bool
    fixed: Mapping[str, _ToolSchemas]


def _compile(raw: Mapping[str, Any]) -> _Settings:
    fixed = {}
    for tool, schemas in raw["schemas"].items():
        compiled = {
            key: compile_config_schema(schemas[key], f"config.schemas.{tool}.{key}")
            for key in ("input", "output")
            if key in schemas
        }
        fixed[tool] = _ToolSchemas(compiled.get("input"), compiled.get("output"))
    return _Settings(raw["validate_arguments"], raw["validate_results"], raw["unknown_tools"] == "deny", fixed)


def _errors(schema: CompiledSchema, instance: Any, base: tuple[str, ...], tool: str) -> list[ValidationMessage]:
    # An unresolvable $ref fails closed: the schema cannot be checked, and it is never fetched to find out.
    ref = schema.unresolvable
    if ref is None:
        try:
            if schema.is_valid(instance):
                return []
            errors: list[ValidationError] = sorted(schema.validator.iter_errors(instance), key=relevance)
        except Unresolvable as exc:
            ref = str(getattr(exc, "ref", "")) or "?"
    if ref is not None:
        message = f"the schema of tool {tool!r} has a $ref that cannot be resolved without fetching it: {ref[:200]!r}"
        return [ValidationMessage(message=message, severity="error", path=format_path(base))]
    return [
        ValidationMessage(message=describe_error(e), severity="error", path=format_path((*base, *e.absolute_path)))
        for e in errors[:_MAX_MESSAGES]
    ]


class SchemaGuard:
    """Per-session tool schemas and the three checks that use them."""

    def __init__(self, settings: SettingsCache[_Settings]) -> None:
        self.settings = settings
        raw = settings.raw
        self.sessions: SessionState[_Session] = SessionState(
            _Session, max_sessions=raw["max_sessions"], ttl_s=raw["session_ttl_seconds"]
        )

    def learn(self, inv: Invocation) -> bool:
        tools = inv.payload.get("tools") if isinstance(inv.payload, Mapping) else None
        if not isinstance(tools, list):
            return True
        session = self.sessions.get(inv.session_id)
        for tool in tools:
            if isinstance(tool, Mapping) and isinstance(tool.get("name"), str):
                schemas = _ToolSchemas(
                    _VALIDATORS.get(tool.get("inputSchema")), _VALIDATORS.get(tool.get("outputSchema"))
                )
                session.tools.set(tool["name"], schemas)
        return True

    def check_arguments(self, settings: _Settings, inv: Invocation) -> ValidationResult | bool:
        params = params_of(inv.payload)
        name = params.get("name")
        if not isinstance(name, str):
            return True
        session = self.sessions.get(inv.session_id)
        trace = inv.context.trace_id if inv.context is not None else None
        if trace is not None:
            session.pending.set(trace, name)
        schemas = _schemas_for(settings, name, session)
        if schemas is None:
            if settings.deny_unknown:
                return _invalid(
                    [ValidationMessage(message=f"no schema is known for tool {name!r}", path="$.params.name")]
                )
            return True
        if not settings.validate_arguments or schemas.input is None:
            return True
        base = ("arguments",) if params is inv.payload else ("params", "arguments")
        arguments = params.get("arguments")
        messages = _errors(schemas.input, {} if arguments is None else arguments, base, name)
        return _invalid(messages, tool=name) if messages else True

    def check_result(self, settings: _Settings, inv: Invocation) -> ValidationResult | bool:
        result = inv.payload
        if not settings.validate_results or not isinstance(result, Mapping):
            return True
        trace = inv.context.trace_id if inv.context is not None else None
        session = self.sessions.peek(inv.session_id)
        name = session.pending.pop(trace) if session is not None and trace is not None else None
        if result.get("resultType", "complete") != "complete" or result.get("isError") is True:
            return True
        if name is None:
            return True
        schemas = _schemas_for(settings, name, session)
        if schemas is None or schemas.output is None:
            return True
        if "structuredContent" not in result:
            message = f"tool {name!r} declares an outputSchema but its result has no structuredContent"
            return _invalid([ValidationMessage(message=message, path="$.structuredContent")], tool=name)
        messages = _errors(schemas.output, result["structuredContent"], ("structuredContent",), name)
        return _invalid(messages, tool=name) if messages else True


def _schemas_for(settings: _Settings, name: str, session: _Session | None) -> _ToolSchemas | None:
    """A configured schema wins over the listed one key by key: configuring only `output` keeps the
    listing's `inputSchema` checked."""
    fixed = settings.fixed.get(name)
    listed = session.tools.get(name) if session is not None else None
    if fixed is None or listed is None:
        return fixed or listed
    return _ToolSchemas(fixed.input or listed.input, fixed.output or listed.output)


def _invalid(messages: list[ValidationMessage], **info: Any) -> ValidationResult:
    return ValidationResult(valid=False, severity="error", messages=tuple(messages), info=info or None)


def build(name: str, config: Mapping[str, Any]) -> InterceptorHost:
    """A host with one validator: learns on tools/list results, checks tools/call requests and results."""
    guard = SchemaGuard(SettingsCache(name, SCHEMA, config, _compile))
    host = InterceptorHost(name, copy_payloads=False)
    hooks = [
        {"events": ["tools/list"], "phase": "response"},
        {"events": ["tools/call"], "phase": "request"},
        {"events": ["tools/call"], "phase": "response"},
    ]

    @host.validator(name, hooks=hooks, description=DESCRIPTION, config_schema=SCHEMA.advertised)
    async def check(inv: Invocation) -> ValidationResult | bool:
        if inv.event == "tools/list":
            return guard.learn(inv)
        settings = guard.settings.for_config(inv.config)
        if inv.phase == "request":
            return guard.check_arguments(settings, inv)
        return guard.check_result(settings, inv)

    return host
