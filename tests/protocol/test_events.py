"""Event names, initiators and hook/wildcard matching (spec §1.2-§1.4)."""

from __future__ import annotations

import pytest

from mcp_interceptors.protocol.events import (
    CLIENT_INITIATED_EVENTS,
    CORE_EVENTS,
    SERVER_INITIATED_EVENTS,
    events_match,
    initiator_for,
    is_interceptable,
    is_pattern,
    pattern_covers,
    pattern_matches,
)

CUSTOM = "acme/indexDocument"


@pytest.mark.parametrize("event", sorted(CLIENT_INITIATED_EVENTS))
def test_r40_server_features_are_client_initiated(event: str) -> None:
    assert initiator_for(event) == "client"


@pytest.mark.parametrize("event", sorted(SERVER_INITIATED_EVENTS))
def test_r40_client_features_are_server_initiated(event: str) -> None:
    assert initiator_for(event) == "server"


@pytest.mark.parametrize("event", ["llm/completion", CUSTOM])
def test_r40_custom_and_llm_events_are_invoker_initiated(event: str) -> None:
    assert initiator_for(event) == "invoker"


@pytest.mark.parametrize("event", [*sorted(CORE_EVENTS), CUSTOM])
def test_r9_star_matches_every_interceptable_event(event: str) -> None:
    assert pattern_matches("*", event)
    assert events_match(("other/event", "*"), event)


@pytest.mark.parametrize("event", ["initialize", "ping", "server/discover", "notifications/cancelled"])
def test_r9_star_never_matches_non_interceptable_methods(event: str) -> None:
    assert not is_interceptable(event)
    assert not pattern_matches("*", event)
    assert not pattern_matches(event, event)  # not even literally


@pytest.mark.parametrize(
    ("pattern", "event", "expected"),
    [
        ("tools/call", "tools/call", True),
        ("tools/call", "tools/list", False),
        ("tools/*", "tools/call", True),
        ("tools/*", "tools/list", True),
        ("tools/*", "prompts/get", False),
        ("tools/*", "resources/templates/list", False),
        ("resources/*", "resources/templates/list", False),  # one segment only
        ("*/call", "tools/call", True),
        ("*", "acme/x/y", True),
    ],
)
def test_r8_hook_pattern_matching(pattern: str, event: str, expected: bool) -> None:
    assert pattern_matches(pattern, event) is expected


@pytest.mark.parametrize(
    ("event", "expected"), [("*", True), ("tools/*", True), ("tools/cal?", True), ("tools/call", False)]
)
def test_r10_is_pattern(event: str, expected: bool) -> None:
    assert is_pattern(event) is expected


@pytest.mark.parametrize(
    ("declared", "requested", "covered"),
    [
        ("*", "tools/call", True),
        ("*", "*", True),
        ("*", "tools/*", True),
        ("tools/call", "tools/call", True),
        ("tools/call", "tools/list", False),
        ("tools/call", "*", False),  # a `*` override is covered only by a declared `*`
        ("tools/*", "tools/call", True),
        ("tools/*", "tools/*", True),
        ("tools/*", "*", False),
        ("tools/*", "prompts/get", False),
        ("tools/call", "tools/*", False),
    ],
)
def test_r62_pattern_covers_table(declared: str, requested: str, covered: bool) -> None:
    assert pattern_covers(declared, requested) is covered
