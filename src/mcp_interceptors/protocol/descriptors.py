"""The interceptor descriptor of `interceptors/list` (spec §1.6), with legacy input normalised.

Accepted legacy shapes (never emitted): mode `enforce`; a singular `hook` object; G1 flat
`events` + `phase`; phase `both`; `*/request` and `*/response` wildcards.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, Strict, ValidationError, field_validator, model_validator

from mcp_interceptors.protocol._base import INT32_MAX, INT32_MIN, WireModel
from mcp_interceptors.protocol.errors import DiscoveryError
from mcp_interceptors.protocol.events import PHASES, Phase, events_match

Int32 = Annotated[int, Strict(), Field(ge=INT32_MIN, le=INT32_MAX)]
InterceptorType = Literal["validation", "mutation", "sink"]
Mode = Literal["active", "audit"]
KNOWN_TYPES: frozenset[str] = frozenset({"validation", "mutation", "sink"})


class HookEntry(WireModel):
    """One phase and the events (or patterns) it covers."""

    events: tuple[str, ...]
    phase: Phase

    def covers(self, event: str, phase: str) -> bool:
        return self.phase == phase and events_match(self.events, event)


class PhasePriority(WireModel):
    """Per-phase priority hint: `{request?, response?}`."""

    request: Int32 | None = None
    response: Int32 | None = None


PriorityHint = Int32 | PhasePriority


def unknown_priority_keys(priority: object) -> list[str]:
    """Keys of a per-phase priority mapping other than `request`/`response`.

    Local configuration (a decorator's `priority=`, an override) refuses them: the wire model ignores
    unknown members, so a typo (`{"req": -100}`) would silently leave the priority at 0.
    """
    if not isinstance(priority, Mapping):
        return []
    return sorted(str(key) for key in priority if key not in PHASES)


def resolve_priority(
    hint: PriorityHint | Mapping[str, Any] | None,
    phase: Phase,
    override: PriorityHint | Mapping[str, Any] | None = None,
) -> int:
    """Effective priority (R33): override, else hint; none -> 0; int -> int; object -> member or 0.

    An object may be a `PhasePriority` or its wire form (`{"request": -5}`).
    """
    chosen = override if override is not None else hint
    if chosen is None:
        return 0
    if isinstance(chosen, int):
        return chosen
    if isinstance(chosen, Mapping):
        chosen = PhasePriority.model_validate(chosen)
    member = chosen.request if phase == "request" else chosen.response
    return 0 if member is None else member


class Compat(WireModel):
    """Protocol versions an interceptor supports; date strings compare correctly as strings."""

    min_protocol: str
    max_protocol: str | None = None

    def includes(self, version: str) -> bool:
        return self.min_protocol <= version and (self.max_protocol is None or version <= self.max_protocol)


def _expand_phase(phase: Any) -> tuple[str, ...]:
    return PHASES if phase == "both" else (phase,)


def _normalise_entry_events(events: Any, phase: str) -> Any:
    """Map `*/request` and `*/response` to `*` when they agree with the entry's phase, else drop them."""
    if not isinstance(events, list | tuple):
        return events
    out: list[Any] = []
    for event in events:
        if event in ("*/request", "*/response"):
            if event == f"*/{phase}":
                out.append("*")
            continue
        out.append(event)
    return out


def _normalise_hooks(raw: Any) -> Any:
    entries: list[Any] = []
    for entry in raw:
        if not isinstance(entry, Mapping):
            entries.append(entry)
            continue
        for phase in _expand_phase(entry.get("phase")):
            entries.append({**entry, "phase": phase, "events": _normalise_entry_events(entry.get("events"), phase)})
    return entries


class InterceptorDescriptor(WireModel):
    """An entry of `interceptors/list`. Dump with `to_wire()`: defaults are omitted (R13)."""

    name: Annotated[str, Field(min_length=1)]
    type: InterceptorType
    hooks: tuple[HookEntry, ...]
    version: str | None = None
    description: str | None = None
    mode: Mode = "active"
    fail_open: Annotated[bool, Strict()] = False
    priority_hint: PriorityHint = 0
    compat: Compat | None = None
    config_schema: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _accept_legacy_shapes(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        if "hooks" not in data:
            if isinstance(data.get("hook"), Mapping):  # G2: one `hook` object
                data["hooks"] = [data["hook"]]
            elif "events" in data and "phase" in data:  # G1: flat events + phase
                data["hooks"] = [{"events": data["events"], "phase": data["phase"]}]
        if isinstance(data.get("hooks"), list | tuple):
            data["hooks"] = _normalise_hooks(data["hooks"])
        if data.get("mode") == "enforce":
            data["mode"] = "active"
        return data

    @field_validator("config_schema")
    @classmethod
    def _object_schema_only(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and value.get("type", "object") != "object":
            raise ValueError("configSchema must be an object schema ({'type': 'object', ...})")
        return value

    def covers(self, event: str, phase: str) -> bool:
        """Whether an advertised hook entry covers `(event, phase)`."""
        return any(entry.covers(event, phase) for entry in self.hooks)

    def matches_event(self, event: str) -> bool:
        """Whether any hook entry, in any phase, covers `event` (the `interceptors/list` filter, R8/R9)."""
        return any(events_match(entry.events, event) for entry in self.hooks)

    def priority_for(self, phase: Phase) -> int:
        return resolve_priority(self.priority_hint, phase)


@dataclass(frozen=True, slots=True)
class DescriptorWarning:
    """A descriptor skipped while parsing a remote list; the caller decides how to log it."""

    index: int
    name: str | None
    reason: str


def parse_descriptor(raw: Any) -> InterceptorDescriptor:
    """Parse one descriptor; raises `pydantic.ValidationError` when it is malformed."""
    return InterceptorDescriptor.model_validate(raw)


def parse_descriptors(raw: Any) -> tuple[list[InterceptorDescriptor], list[DescriptorWarning]]:
    """Parse a remote list one entry at a time: one bad entry is skipped, never poisons the rest (R31).

    Later entries reusing an earlier name are skipped too (names are unique per host).
    """
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes):
        return [], [DescriptorWarning(-1, None, "`interceptors` is not an array")]
    parsed: list[InterceptorDescriptor] = []
    warnings: list[DescriptorWarning] = []
    seen: set[str] = set()
    for index, item in enumerate(raw):
        name = item.get("name") if isinstance(item, Mapping) and isinstance(item.get("name"), str) else None
        try:
            descriptor = parse_descriptor(item)
        except ValidationError as exc:
            warnings.append(DescriptorWarning(index, name, _first_error(exc)))
            continue
        if descriptor.name in seen:
            warnings.append(DescriptorWarning(index, name, "duplicate interceptor name in one host's list"))
            continue
        seen.add(descriptor.name)
        parsed.append(descriptor)
    return parsed, warnings


def parse_list_result(result: Any) -> tuple[list[InterceptorDescriptor], list[DescriptorWarning]]:
    """The descriptors of an `interceptors/list` result; one without an `interceptors` array is a failed
    discovery (`DiscoveryError`), never an empty list that would let every operation through (R66)."""
    raw = result.get("interceptors") if isinstance(result, Mapping) else None
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes):
        reason = "interceptors/list result has no `interceptors` array"
        raise DiscoveryError(reason, data={"reason": reason})
    return parse_descriptors(raw)


def _first_error(exc: ValidationError) -> str:
    error = exc.errors(include_url=False)[0]
    location = ".".join(str(part) for part in error["loc"]) or "<root>"
    return f"{location}: {error['msg']}"


def supported_events(descriptors: Iterable[InterceptorDescriptor]) -> list[str]:
    """Sorted union of every event string in every hook (the capability hint, R3/R4)."""
    return sorted({event for d in descriptors for entry in d.hooks for event in entry.events})
