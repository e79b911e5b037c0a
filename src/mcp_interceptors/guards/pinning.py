"""tool-pinning: pin a hash of each tool's name, description and schemas, from a pin file or at first sight,
and deny (or flag, or drop) a tool whose definition later changes: a rug pull. Checked on every
`tools/list` result (clients re-list after `notifications/tools/list_changed`) and on `tools/call`.

The pin file (`mcp-interceptors pin TARGET -o pins.json` writes one from a live server) is JSON:
`{"format": "mcp-interceptors/tool-pins", "version": 1, "algorithm": "sha256", "tools": {name: hex}}`.
Digests are SHA-256 over the RFC 8785 canonical JSON of the pinned fields, so any tool can compute them.

First-sight pins and the tools found changed live in the guard's state store (`state/`), per session or for
the process (`scope`): gateway replicas sharing one (Redis) pin a tool once, and all refuse it once changed.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rfc8785

from mcp_interceptors.guards._config import GuardSchema, SettingsCache
from mcp_interceptors.guards._names import tool_name_of
from mcp_interceptors.guards._state import ANONYMOUS
from mcp_interceptors.host import InterceptorHost, Invocation
from mcp_interceptors.protocol.invoke import now_iso
from mcp_interceptors.protocol.results import ValidationMessage, ValidationResult
from mcp_interceptors.state import StateStore
from mcp_interceptors.state.memory import MemoryState

#: `guards.load` hands this guard the gateway's state store.
USES_STATE = True

PIN_FORMAT = "mcp-interceptors/tool-pins"
PINNED_FIELDS = ("name", "description", "inputSchema", "outputSchema")
DROP_PRIORITY = {"response": -25_000}  # security sanitization band (spec §6)
#: Pins (and changed tools) one scope holds; past it a new tool is refused, never pinned by pushing one out.
_MAX_TOOLS = 10_000
_PIN, _CHANGED = "pin:", "changed:"
_DIGEST = re.compile("[0-9a-f]{64}")  # as `tool_digest` writes it: a digest in another form never matches

SCHEMA = GuardSchema(
    {
        "pin_file": {"type": ["string", "null"], "default": None, "description": "Pins written by `pin`."},
        "pins": {
            "type": "object",
            "additionalProperties": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
            "default": {},
            "description": "Inline pins {tool: sha256 hex}; they win over the pin file.",
        },
        "action": {"enum": ["deny", "flag", "drop"], "default": "deny", "description": "On a changed definition."},
        "unpinned": {
            "enum": ["pin", "deny", "allow", None],
            "default": None,
            "description": "A tool with no pin: pin it at first sight, deny it, or allow it. Default: deny "
            "when pins or a pin file are configured, else pin.",
        },
        "scope": {"enum": ["session", "global"], "default": "session", "description": "Where first-sight pins live."},
        "max_sessions": {"type": "integer", "minimum": 1, "default": 10_000},
        "session_ttl_seconds": {"type": "number", "exclusiveMinimum": 0, "default": 86_400},
    },
    build_only=["pin_file", "action", "scope", "max_sessions", "session_ttl_seconds"],
)


def tool_digest(tool: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of a tool's name, description and schemas."""
    pinned = {key: tool[key] for key in PINNED_FIELDS if tool.get(key) is not None}
    return hashlib.sha256(rfc8785.dumps(pinned)).hexdigest()


def pin_document(tools: Iterable[Mapping[str, Any]], source: str | None = None) -> dict[str, Any]:
    """The pin file body for these tools."""
    document: dict[str, Any] = {"format": PIN_FORMAT, "version": 1, "algorithm": "sha256", "created": now_iso()}
    if source:
        document["source"] = source
    document["tools"] = {tool["name"]: tool_digest(tool) for tool in tools}
    return document


def load_pin_file(path: str) -> dict[str, str]:
    """The `{tool: digest}` pins of a pin file; `ValueError` says what is wrong with it."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"config.pin_file: cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"config.pin_file: {path} is not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(document, dict) or document.get("format") != PIN_FORMAT:
        raise ValueError(f"config.pin_file: {path} is not a pin file (expected format {PIN_FORMAT!r})")
    if document.get("version") != 1 or document.get("algorithm") != "sha256":
        raise ValueError(f"config.pin_file: {path}: unsupported version or algorithm (expected 1 / sha256)")
    tools = document.get("tools")
    if not isinstance(tools, dict) or not all(isinstance(v, str) and _DIGEST.fullmatch(v) for v in tools.values()):
        raise ValueError(
            f"config.pin_file: {path}: `tools` must map tool names to sha256 digests (64 lowercase hex digits)"
        )
    return dict(tools)


@dataclass(frozen=True, slots=True)
class _Settings:
    fixed: Mapping[str, str]
    unpinned: str


def _compile_with(file_pins: Mapping[str, str]) -> Any:
    def compile_settings(raw: Mapping[str, Any]) -> _Settings:
        fixed = {**file_pins, **raw["pins"]}
        # A pin file configures pins even when it pins nothing (a server that had no tools): a new tool
        # is then unpinned, not pinned at first sight.
        unpinned = raw["unpinned"] or ("deny" if fixed or raw["pin_file"] is not None else "pin")
        return _Settings(fixed, unpinned)

    return compile_settings


class PinningGuard:
    def __init__(self, name: str, settings: SettingsCache[_Settings], state: StateStore) -> None:
        raw = settings.raw
        self.name = name
        self.settings = settings
        self.state = state
        self.action: str = raw["action"]
        self.scope: str = raw["scope"]
        self.ttl_s: float | None = raw["session_ttl_seconds"] if self.scope == "session" else None

    def _key(self, inv: Invocation) -> str:
        where = "global" if self.scope == "global" else f"session:{inv.session_id or ANONYMOUS}"
        return f"pinning:{self.name}:{where}"

    async def review(self, inv: Invocation) -> list[tuple[int, str, str, bool]]:
        """`(index, tool, problem, changed)` for each listed tool that is changed or refused as unpinned."""
        tools = inv.payload.get("tools") if isinstance(inv.payload, Mapping) else None
        if not isinstance(tools, list):
            return []
        settings = self.settings.for_config(inv.config)
        key, state = self._key(inv), self.state
        seen = await state.fields(key)
        problems = []
        for index, tool in enumerate(tools):
            name = tool.get("name") if isinstance(tool, Mapping) else None
            if not isinstance(name, str):
                continue
            digest = tool_digest(tool)
            pinned = settings.fixed.get(name) or seen.get(_PIN + name)
            if pinned is None:
                if settings.unpinned == "pin":
                    # The first writer wins: a replica that pinned it first decides what "changed" means.
                    pinned = await state.put(
                        key, _PIN + name, digest, ttl_s=self.ttl_s, max_fields=2 * _MAX_TOOLS, only_new=True
                    )
                    if pinned is None:
                        problems.append((index, name, f"tool {name!r} cannot be pinned: {_MAX_TOOLS} are", False))
                        continue
                elif settings.unpinned == "deny":
                    problems.append((index, name, f"tool {name!r} is not pinned", False))
                    continue
                else:
                    continue
            if pinned != digest:
                await state.put(key, _CHANGED + name, digest, ttl_s=self.ttl_s, max_fields=2 * _MAX_TOOLS)
                problems.append((index, name, f"tool {name!r} changed since it was pinned (rug pull?)", True))
            elif _CHANGED + name in seen:
                await state.remove(key, _CHANGED + name)  # back to the pinned definition
        return problems

    def verdict(self, problems: list[tuple[str, str, bool]]) -> ValidationResult | bool:
        """`action: flag` only warns about changed definitions; an unpinned tool refused by `unpinned: deny`
        is denied whatever the action."""
        if not problems:
            return True
        flag = self.action == "flag"
        messages = tuple(
            ValidationMessage(message=m, severity="warn" if flag and changed else "error", path=p)
            for m, p, changed in problems
        )
        severity = "error" if any(message.severity == "error" for message in messages) else "warn"
        return ValidationResult(valid=False, severity=severity, messages=messages)

    async def check_listing(self, inv: Invocation) -> ValidationResult | bool:
        problems = await self.review(inv)
        return self.verdict([(problem, f"$.tools[{i}]", changed) for i, _, problem, changed in problems])

    async def drop_from_listing(self, inv: Invocation) -> Any:
        problems = await self.review(inv)
        if not problems:
            return None
        dropped = {index for index, _, _, _ in problems}
        kept = [tool for index, tool in enumerate(inv.payload["tools"]) if index not in dropped]
        return {**inv.payload, "tools": kept}

    async def check_call(self, inv: Invocation) -> ValidationResult | bool:
        name = tool_name_of(inv.payload)
        if name is None:
            return True
        settings = self.settings.for_config(inv.config)
        seen = await self.state.fields(self._key(inv))
        if _CHANGED + name in seen:
            return self.verdict([(f"tool {name!r} changed since it was pinned (rug pull?)", "$.params.name", True)])
        if settings.unpinned == "deny" and name not in settings.fixed and _PIN + name not in seen:
            return self.verdict([(f"tool {name!r} is not pinned", "$.params.name", False)])
        return True

    async def check(self, inv: Invocation) -> ValidationResult | bool:
        return await (self.check_listing(inv) if inv.event == "tools/list" else self.check_call(inv))


def build(name: str, config: Mapping[str, Any], state: StateStore | None = None) -> InterceptorHost:
    """deny/flag: one validator on tools/list results and tools/call requests; drop: a listing mutator too.
    Pins live in `state` (a store of the guard's own in memory by default)."""
    pin_file = config.get("pin_file")
    try:
        file_pins = load_pin_file(pin_file) if isinstance(pin_file, str) else {}
    except ValueError as exc:
        raise ValueError(f"guard {name!r}: {exc}") from None
    settings = SettingsCache(name, SCHEMA, config, _compile_with(file_pins))
    guard = PinningGuard(name, settings, state or MemoryState(max_keys=settings.raw["max_sessions"]))
    host = InterceptorHost(name, copy_payloads=False)
    advertised = SCHEMA.advertised
    description = "Pins tool definitions and refuses tools whose name, description or schemas changed."
    if guard.action == "drop":
        host.mutator(
            name,
            events=["tools/list"],
            phase="response",
            priority=DROP_PRIORITY,
            description=description,
            config_schema=advertised,
        )(guard.drop_from_listing)
        host.validator(
            f"{name}-calls",
            events=["tools/call"],
            description="Refuses calls to changed tools.",
            config_schema=advertised,
        )(guard.check_call)
        return host
    hooks = [{"events": ["tools/list"], "phase": "response"}, {"events": ["tools/call"], "phase": "request"}]
    host.validator(name, hooks=hooks, description=description, config_schema=advertised)(guard.check)
    return host
