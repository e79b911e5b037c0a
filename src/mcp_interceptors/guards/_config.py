"""Guard configuration: validate a config object against the guard's JSON Schema with a precise error,
fill top-level defaults, and compile settings once per distinct config.

A guard is built with a config (`guards.load`) and may be invoked with a per-invocation `config` that
overrides it key by key; each distinct override is compiled once and cached, so the hot path never
recompiles. Build-only keys (those that pick interceptor types, storage or files) are not advertised.
"""

from __future__ import annotations

import copy
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from mcp_interceptors.guards._detectors._engine import PatternRefusedError, compile_user_pattern
from mcp_interceptors.protocol.errors import InvalidParamsError
from mcp_interceptors.protocol.events import CORE_EVENTS, WILDCARD

T = TypeVar("T")

__all__ = [
    "EVENT",
    "EVENT_OR_WILDCARD",
    "GuardSchema",
    "SettingsCache",
    "check_config",
    "check_patterns",
    "config_path",
]

#: An event the spec defines (§1.2), for guards' `events` fields: a typo would silently never match and
#: disable the guard, so config names only these (the error lists them).
EVENT: dict[str, Any] = {"enum": sorted(CORE_EVENTS)}
#: The field a guard's compile error starts with: `config.limits[0].limit 'lots' is not ...`.
_FIELD = re.compile(r"config(?:\.[^\s.\[:'\"]+|\[[^\]]*\])*")
#: The same, or `*` (every interceptable event), where the value becomes a hook.
EVENT_OR_WILDCARD: dict[str, Any] = {"enum": [WILDCARD, *sorted(CORE_EVENTS)]}


class GuardSchema:
    """A guard's config schema: `properties` with defaults, some of them build-only."""

    def __init__(self, properties: Mapping[str, Any], *, build_only: Iterable[str] = ()) -> None:
        self.properties = dict(properties)
        self.build_only = frozenset(build_only)
        self.full = {"type": "object", "properties": self.properties, "additionalProperties": False}
        Draft202012Validator.check_schema(self.full)
        self._validator = Draft202012Validator(self.full)

    @property
    def advertised(self) -> dict[str, Any]:
        """The descriptor's `configSchema`: what an invoker may send per invocation."""
        properties = {k: v for k, v in self.properties.items() if k not in self.build_only}
        return {"type": "object", "properties": properties, "additionalProperties": False}

    def defaults(self) -> dict[str, Any]:
        return {k: copy.deepcopy(v["default"]) for k, v in self.properties.items() if "default" in v}

    def check(self, guard: str, config: Mapping[str, Any]) -> dict[str, Any]:
        """`config` with defaults filled in; raises `ValueError` naming the offending field."""
        check_config(guard, self._validator, config)
        return {**self.defaults(), **config}


def check_config(guard: str, validator: Draft202012Validator, config: Mapping[str, Any]) -> None:
    error = best_match(validator.iter_errors(dict(config)))
    if error is None:
        return
    raise ValueError(f"guard {guard!r}: {config_path(error.absolute_path)}: {error.message}")


def config_path(parts: Iterable[Any]) -> str:
    """`config.rules[0].tool`, quoting keys that are not identifiers: `config.per_event["tools/call"]`."""
    out = ["config"]
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif str(part).isidentifier():
            out.append(f".{part}")
        else:
            out.append(f"[{orjson.dumps(str(part)).decode()}]")
    return "".join(out)


def check_patterns(field: str, patterns: Mapping[str, str] | Iterable[str], *, ignore_case: bool = False) -> list[Any]:
    """Compile configured regexes (`{key: regex}` or a list) as `compile_user_pattern` does, each
    compiled; a bad one is a ValueError naming its field (`config.extra_patterns.acme`) and the pattern."""
    entries = patterns.items() if isinstance(patterns, Mapping) else enumerate(patterns)
    compiled = []
    for key, source in entries:
        where = config_path([field, key])
        try:
            compiled.append(compile_user_pattern(source, ignore_case=ignore_case))
        except PatternRefusedError as exc:
            raise ValueError(f"{where}: pattern {source!r} is refused: {exc}") from None
        except ValueError as exc:
            raise ValueError(f"{where} does not compile: {exc}") from None
    return compiled


class SettingsCache(Generic[T]):
    """Compiled settings for the build config and for each per-invocation override (LRU-bounded)."""

    def __init__(
        self,
        guard: str,
        schema: GuardSchema,
        config: Mapping[str, Any],
        compile_settings: Callable[[Mapping[str, Any]], T],
        *,
        max_entries: int = 32,
    ) -> None:
        self.guard = guard
        self.schema = schema
        self.raw = schema.check(guard, config)
        self._compile = compile_settings
        try:
            self.base = compile_settings(self.raw)
        except ValueError as exc:
            raise ValueError(f"guard {guard!r}: {exc}") from None
        self._cache: OrderedDict[bytes, T] = OrderedDict()
        self._max = max_entries

    def for_config(self, override: Mapping[str, Any]) -> T:
        """The settings for an invocation's `config` (already checked against the advertised schema)."""
        if not override:
            return self.base
        key = orjson.dumps(override, option=orjson.OPT_SORT_KEYS)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        merged = {**self.raw, **override}
        try:
            settings = self._compile(merged)
        except ValueError as exc:
            # The same `data` as a configSchema violation (R23): name, interceptor, field and reason.
            field = _FIELD.match(str(exc))
            data = {"name": self.guard, "interceptor": self.guard, "field": field[0] if field else "config"}
            raise InvalidParamsError(
                f"config for {self.guard!r} is invalid: {exc}", data={**data, "reason": str(exc)}
            ) from None
        self._cache[key] = settings
        if len(self._cache) > self._max:
            self._cache.popitem(last=False)
        return settings
