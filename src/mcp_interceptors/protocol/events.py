"""Lifecycle event names, who initiates each event, and hook/wildcard matching (spec §1.2-§1.4).

Pure data and predicates; `descriptors`, `planning` and the host build on these.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from functools import lru_cache
from typing import Literal

Phase = Literal["request", "response"]
Direction = Literal["sending", "receiving"]
Role = Literal["client", "server"]
Initiator = Literal["client", "server", "invoker"]

PHASES: tuple[Phase, Phase] = ("request", "response")
WILDCARD = "*"
EXTENSION_ID = "io.modelcontextprotocol/interceptors"

#: Server features, in the spec's table order: the client initiates the governed request.
SERVER_FEATURE_EVENTS: tuple[str, ...] = (
    "tools/list",
    "tools/call",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
)
#: Client features: the server initiates the governed request, so roles swap (§5.1).
CLIENT_FEATURE_EVENTS: tuple[str, ...] = ("sampling/createMessage", "elicitation/create", "roots/list")
CLIENT_INITIATED_EVENTS = frozenset(SERVER_FEATURE_EVENTS)
SERVER_INITIATED_EVENTS = frozenset(CLIENT_FEATURE_EVENTS)
LLM_COMPLETION = "llm/completion"
CORE_EVENTS = CLIENT_INITIATED_EVENTS | SERVER_INITIATED_EVENTS | {LLM_COMPLETION}
#: Never interceptable, not even through `*` (§1.2).
NON_INTERCEPTABLE_METHODS = frozenset({"initialize", "ping", "server/discover"})


def initiator_for(event: str) -> Initiator:
    """Who sends the request of `event`: custom events and `llm/completion` belong to the invoker."""
    if event in CLIENT_INITIATED_EVENTS:
        return "client"
    if event in SERVER_INITIATED_EVENTS:
        return "server"
    return "invoker"


def is_interceptable(event: str) -> bool:
    """Whether any hook (even `*`) may match `event`: never `initialize`, `ping` or notifications."""
    return event not in NON_INTERCEPTABLE_METHODS and not event.startswith("notifications/")


def is_pattern(event: str) -> bool:
    """Whether `event` is a wildcard or glob rather than one concrete event name."""
    return "*" in event or "?" in event or "[" in event


#: Longest event name whose matches are cached: names come from callers, and the cache must not hold
#: thousands of megabyte-long ones.
MAX_CACHED_EVENT_LENGTH = 256


def pattern_matches(pattern: str, event: str) -> bool:
    """Whether one hook pattern covers one concrete event.

    `*` alone matches every interceptable event; a pattern containing `*` matches segment by
    segment (`tools/*` covers `tools/call` but not `tools/a/b`); anything else is literal.
    """
    if len(event) > MAX_CACHED_EVENT_LENGTH:
        return _pattern_matches(pattern, event)
    return _cached_pattern_matches(pattern, event)


def _pattern_matches(pattern: str, event: str) -> bool:
    if pattern == event:
        return is_interceptable(event)
    if pattern == WILDCARD:
        return is_interceptable(event)
    if "*" not in pattern:
        return False
    pattern_parts = pattern.split("/")
    event_parts = event.split("/")
    if len(pattern_parts) != len(event_parts):
        return False
    return is_interceptable(event) and all(
        fnmatchcase(part, p) for p, part in zip(pattern_parts, event_parts, strict=True)
    )


_cached_pattern_matches = lru_cache(maxsize=4096)(_pattern_matches)


def events_match(events: tuple[str, ...] | list[str], event: str) -> bool:
    """Whether any pattern in `events` covers `event`."""
    return any(pattern_matches(pattern, event) for pattern in events)


def pattern_covers(declared: str, requested: str) -> bool:
    """Whether a declared hook pattern covers everything a requested (override) pattern names.

    Used to reject widening overrides (§5.2): `*` in an override is covered only by `*`.
    """
    if declared in (requested, WILDCARD):
        return True
    if requested == WILDCARD:
        return False
    if is_pattern(requested):
        # A narrower glob is covered only by an identical glob or by `*` (both handled above),
        # or by a declared glob that matches every segment of it textually.
        return "*" in declared and fnmatchcase(requested, declared) and requested.count("/") == declared.count("/")
    return pattern_matches(declared, requested)
