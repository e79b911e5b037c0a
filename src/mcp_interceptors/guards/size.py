"""size-limit: a validator that caps a payload's serialized size and the length of its strings, per event.

The byte size comes from one `orjson.dumps`; strings are walked only when the payload is big enough
to hold one over the limit (no string is longer than the JSON that contains it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from mcp_interceptors.guards._config import EVENT, EVENT_OR_WILDCARD, GuardSchema, SettingsCache
from mcp_interceptors.guards._walk import compact_json, format_path, walk_strings
from mcp_interceptors.host import InterceptorHost, Invocation
from mcp_interceptors.protocol.results import ValidationMessage, ValidationResult

_LIMITS = {
    "max_payload_bytes": {"type": "integer", "minimum": 1, "description": "Largest serialized payload (UTF-8 JSON)."},
    "max_string_length": {"type": "integer", "minimum": 1, "description": "Longest single string, in characters."},
}
SCHEMA = GuardSchema(
    {
        "max_payload_bytes": {**_LIMITS["max_payload_bytes"], "default": 1_048_576},
        "max_string_length": {**_LIMITS["max_string_length"], "default": 262_144},
        "per_event": {
            "type": "object",
            "description": 'Limits for one event, e.g. {"tools/call": {"max_payload_bytes": 65536}}.',
            "propertyNames": EVENT,
            "additionalProperties": {"type": "object", "properties": _LIMITS, "additionalProperties": False},
            "default": {},
        },
        "events": {
            "type": "array",
            "items": EVENT_OR_WILDCARD,
            "minItems": 1,
            "description": "Events to check (both phases); `*` is every event.",
            "default": ["*"],
        },
    },
    build_only=["events"],
)
DESCRIPTION = "Denies payloads whose serialized size or longest string exceeds the configured limits."
_OPTIONS = orjson.OPT_NON_STR_KEYS
_MAX_REPORTED = 5


@dataclass(frozen=True, slots=True)
class _Limits:
    max_bytes: int
    max_string: int


@dataclass(frozen=True, slots=True)
class _Settings:
    default: _Limits
    per_event: Mapping[str, _Limits]


def _compile(raw: Mapping[str, Any]) -> _Settings:
    default = _Limits(raw["max_payload_bytes"], raw["max_string_length"])
    per_event = {
        event: _Limits(
            limits.get("max_payload_bytes", default.max_bytes), limits.get("max_string_length", default.max_string)
        )
        for event, limits in raw["per_event"].items()
    }
    return _Settings(default, per_event)


def payload_size(payload: Any) -> int:
    """Bytes of the payload as compact UTF-8 JSON (values JSON cannot hold are counted as their `str`).
    Raises `RecursionError` for a payload nested too deep for the interpreter to serialise."""
    # The run's compact JSON, which the scanners made already (`compact_json`): where orjson alone holds
    # the payload, `default=str` is never called.
    data = compact_json(payload)
    if data is not None:
        return len(data)
    try:  # orjson is about twice as fast without OPT_NON_STR_KEYS, which only JSON-RPC-foreign keys need
        return len(orjson.dumps(payload, default=str))
    except orjson.JSONEncodeError:
        pass
    try:
        return len(orjson.dumps(payload, default=str, option=_OPTIONS))
    except orjson.JSONEncodeError:  # nested past orjson's 255 levels (an in-process chain's own payload)
        return len(json.dumps(payload, default=str, ensure_ascii=False, separators=(",", ":")).encode())


def check_size(limits: _Limits, event: str, payload: Any) -> ValidationResult | bool:
    try:
        size = payload_size(payload)
    except RecursionError:
        return ValidationResult(
            valid=False,
            severity="error",
            messages=(ValidationMessage(message="payload is nested too deep to measure", severity="error", path="$"),),
            info={"limit": limits.max_bytes},
        )
    if size > limits.max_bytes:
        message = f"payload is {size} bytes; the limit for {event} is {limits.max_bytes} bytes"
        return ValidationResult(
            valid=False,
            severity="error",
            messages=(ValidationMessage(message=message, severity="error", path="$"),),
            info={"bytes": size, "limit": limits.max_bytes},
        )
    if size <= limits.max_string:
        return True
    # Mapping keys are strings too: a 200 KB key must not slip under the string limit.
    long_strings = [
        (path, len(value)) for path, value in walk_strings(payload, include_keys=True) if len(value) > limits.max_string
    ]
    if not long_strings:
        return True
    messages = tuple(
        ValidationMessage(
            message=f"string of {length} characters exceeds the limit of {limits.max_string}",
            severity="error",
            path=format_path(path),
        )
        for path, length in long_strings[:_MAX_REPORTED]
    )
    return ValidationResult(
        valid=False,
        severity="error",
        messages=messages,
        info={"strings": len(long_strings), "limit": limits.max_string},
    )


def build(name: str, config: Mapping[str, Any]) -> InterceptorHost:
    """A host with one validator on every configured event, both phases."""
    settings = SettingsCache(name, SCHEMA, config, _compile)
    host = InterceptorHost(name, copy_payloads=False)

    @host.validator(
        name,
        events=settings.raw["events"],
        phase="both",
        description=DESCRIPTION,
        config_schema=SCHEMA.advertised,
    )
    async def check(inv: Invocation) -> ValidationResult | bool:
        current = settings.for_config(inv.config)
        return check_size(current.per_event.get(inv.event, current.default), inv.event, inv.payload)

    return host
