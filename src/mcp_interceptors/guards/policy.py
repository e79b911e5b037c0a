"""tool-policy: allow/deny tools by server and name globs, at discovery (a mutator filtering `tools/list`)
and at call time (a validator on `tools/call`), plus argument rules written in CEL or JSON Schema.

Rules compile at build time. A deny pattern wins over an allow pattern; an empty `allow` allows every
tool not denied. A CEL rule must evaluate to `true` for the call to pass; an evaluation error denies.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from jsonschema.exceptions import best_match

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

if TYPE_CHECKING:
    import celpy

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
    program: Any  # celpy Runner, or None
    cel: str | None
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


@cache
def _cel() -> celpy.Environment:
    """The CEL environment, built on the first rule written in CEL: its parser costs ~0.25 s of a gateway's
    start (`bench/footprint.py cold-start`), which a policy without CEL rules never needs."""
    import celpy

    return celpy.Environment()


#: The variables a CEL rule can name (see `_activation`).
_CEL_VARIABLES = frozenset({"args", "tool", "server", "principal", "session"})
#: Names CEL itself declares: type names (`type(args.n) == int`) and the protobuf well-known types' package.
_CEL_BUILTIN_NAMES = frozenset(
    {"bool", "bytes", "double", "duration", "dyn", "int", "list", "map", "null_type", "string", "timestamp"}
    | {"type", "uint", "google"}
)
#: Macros whose first argument declares a variable for the rest of the call (`args.tags.all(t, t != "")`).
_CEL_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})


def _undeclared_names(tree: Any) -> list[str]:
    """The variables a compiled CEL expression names that its activation will not have, in order.

    Without this check such a rule compiles, then fails to evaluate on every call (denying it).
    """
    return list(dict.fromkeys(_free_names(tree, _CEL_VARIABLES | _CEL_BUILTIN_NAMES)))


def _free_names(tree: Any, bound: frozenset[str]) -> Iterator[str]:
    if not hasattr(tree, "data"):  # a token (celpy's trees are lark's: subtrees have `data`, tokens are str)
        return
    if tree.data == "primary" and tree.children and getattr(tree.children[0], "data", None) == "ident":
        name = str(tree.children[0].children[0])
        if name not in bound:
            yield name
        return
    if tree.data == "member_dot_arg" and len(tree.children) == 3 and str(tree.children[1]) in _CEL_MACROS:
        target, _, arguments = tree.children
        yield from _free_names(target, bound)
        expressions = arguments.children if hasattr(arguments, "data") else []
        variable = _macro_variable(expressions[0]) if expressions else None
        inner = bound | {variable} if variable is not None else bound
        for expression in expressions[1:] if variable is not None else expressions:
            yield from _free_names(expression, inner)
        return
    for child in tree.children:
        yield from _free_names(child, bound)


def _macro_variable(expression: Any) -> str | None:
    """The name a macro's first argument declares, when it is a bare identifier."""
    idents = [node for node in expression.iter_subtrees() if node.data == "ident"]
    primaries = [node for node in expression.iter_subtrees() if node.data == "primary"]
    if len(idents) == 1 and len(primaries) == 1:
        return str(idents[0].children[0])
    return None


def _compile_rule(index: int, raw: Mapping[str, Any]) -> _ArgumentRule:
    if "cel" not in raw and "schema" not in raw:
        raise ValueError(f"config.arguments[{index}]: give `cel` (a condition) or `schema` (a JSON Schema), or both")
    program = None
    if "cel" in raw:
        try:
            tree = _cel().compile(raw["cel"])
            program = _cel().program(tree)
        except Exception as exc:  # celpy raises its own parse error types
            detail = " ".join(str(exc).split())
            raise ValueError(f"config.arguments[{index}].cel does not compile: {detail}") from None
        unknown = _undeclared_names(tree)
        if unknown:
            raise ValueError(
                f"config.arguments[{index}].cel names {', '.join(map(repr, unknown))}, which "
                f"{'is not a variable' if len(unknown) == 1 else 'are not variables'}; "
                f"use {', '.join(sorted(_CEL_VARIABLES))}"
            )
    schema = None
    if "schema" in raw:
        schema = compile_config_schema(raw["schema"], f"config.arguments[{index}].schema")
    applies = _pattern({k: raw[k] for k in ("server", "tool") if k in raw} or {"tool": "*"})
    return _ArgumentRule(index, applies, program, raw.get("cel"), schema, raw.get("message"))


def _compile(raw: Mapping[str, Any]) -> _Settings:
    return _Settings(
        allow=[_pattern(p) for p in raw["allow"]],
        deny=[_pattern(p) for p in raw["deny"]],
        arguments=[_compile_rule(i, rule) for i, rule in enumerate(raw["arguments"])],
        filter_listing=raw["filter_listing"],
        servers=ServerMap(raw["tool_servers"]),
    )


def _activation(inv: Invocation, tool: str, server: str | None, arguments: Mapping[str, Any]) -> dict[str, Any]:
    principal: dict[str, Any] = {"type": "anonymous"}
    if inv.context is not None and inv.context.principal is not None:
        principal = inv.context.principal.to_wire()
    values: dict[str, Any] = {
        "args": dict(arguments),
        "tool": tool,
        "server": server or "",
        "principal": principal,
        "session": inv.session_id or "",
    }
    from celpy.adapter import json_to_cel  # loaded already: only CEL rules need an activation

    return {key: json_to_cel(value) for key, value in values.items()}


def _check_rule(rule: _ArgumentRule, arguments: Mapping[str, Any], activation: dict[str, Any]) -> str | None:
    """None when the rule holds, else why not."""
    if rule.schema is not None:
        error = best_match(rule.schema.validator.iter_errors(dict(arguments)))
        if error is not None:
            where = format_path(("params", "arguments", *error.absolute_path))
            return rule.message or f"arguments violate rule #{rule.index} at {where}: {describe_error(error)}"
    if rule.program is not None:
        try:
            outcome = rule.program.evaluate(activation)
        except Exception as exc:  # a CEL evaluation error (e.g. a missing field) denies: fail closed
            return rule.message or f"argument rule #{rule.index} ({rule.cel}) could not be evaluated: {exc.args[0]}"
        from celpy.celtypes import BoolType  # loaded with the rule's program

        if not isinstance(outcome, bool | BoolType):
            return f"argument rule #{rule.index} ({rule.cel}) must evaluate to a bool, got {type(outcome).__name__}"
        if not outcome:
            return rule.message or f"argument rule #{rule.index} failed: {rule.cel}"
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
    activation = _activation(inv, tool, server, arguments) if any(r.program is not None for r in rules) else {}
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
