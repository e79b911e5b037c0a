"""The payload walker: every string once with a path that resolves back to it; rebuilds never mutate."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_interceptors.guards._walk import (
    Path,
    PathMark,
    format_path,
    iter_strings,
    replace_strings,
    string_values,
    walk_strings,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
    max_leaves=40,
)

_TOKEN = re.compile(r'\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]|(~)$')


def parse_path(text: str) -> Path:
    """Inverse of format_path, for checking that formatted paths resolve."""
    assert text.startswith("$")
    parts: list[Any] = []
    pos = 1
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        assert match, f"unparseable path {text!r} at {pos}"
        name, index, quoted, _key = match.groups()
        if name is not None:
            parts.append(name)
        elif index is not None:
            parts.append(int(index))
        elif quoted is not None:
            parts.append(json.loads(quoted))
        else:
            parts.append(PathMark.KEY)
        pos = match.end()
    return tuple(parts)


def resolve(payload: Any, parts: Path) -> Any:
    """The value a path points at; for a key path, the key itself after checking it exists."""
    node = payload
    for i, part in enumerate(parts):
        if part is PathMark.KEY:
            assert i == len(parts) - 1
            key = parts[i - 1]
            return key
        if i + 1 < len(parts) and parts[i + 1] is PathMark.KEY:
            assert part in node
            continue
        node = node[part]
    return node


def count_strings(payload: Any, include_keys: bool = False) -> int:
    if isinstance(payload, str):
        return 1
    if isinstance(payload, list):
        return sum(count_strings(v, include_keys) for v in payload)
    if isinstance(payload, dict):
        return sum(count_strings(v, include_keys) + (include_keys and isinstance(k, str)) for k, v in payload.items())
    return 0


def upper_everywhere(payload: Any) -> Any:
    if isinstance(payload, str):
        return payload.upper()
    if isinstance(payload, list):
        return [upper_everywhere(v) for v in payload]
    if isinstance(payload, dict):
        return {k: upper_everywhere(v) for k, v in payload.items()}
    return payload


MCP_CALL = {
    "jsonrpc": "2.0",
    "id": 3,
    "method": "tools/call",
    "params": {"name": "send", "arguments": {"text": "hi", "to list": ["a@example.com", {"cc": "b"}], "n": 1}},
}


def test_paths_of_an_mcp_request() -> None:
    assert list(iter_strings(MCP_CALL)) == [
        ("$.jsonrpc", "2.0"),
        ("$.method", "tools/call"),
        ("$.params.name", "send"),
        ("$.params.arguments.text", "hi"),
        ('$.params.arguments["to list"][0]', "a@example.com"),
        ('$.params.arguments["to list"][1].cc', "b"),
    ]


def test_keys_come_just_before_their_values() -> None:
    got = list(iter_strings({"x-token": "v", "a": [{"b": 1}]}, include_keys=True))
    assert got == [('$["x-token"]~', "x-token"), ('$["x-token"]', "v"), ("$.a~", "a"), ("$.a[0].b~", "b")]


@pytest.mark.parametrize(
    ("parts", "text"),
    [
        ((), "$"),
        (("content", 0, "text"), "$.content[0].text"),
        (("a b",), '$["a b"]'),
        (("é", 'q"uote'), '$["é"]["q\\"uote"]'),
        (("_meta", "x", PathMark.KEY), "$._meta.x~"),
        (("1abc",), '$["1abc"]'),
    ],
)
def test_format_path(parts: Path, text: str) -> None:
    assert format_path(parts) == text
    assert parse_path(text) == parts


def test_top_level_string_and_scalars() -> None:
    assert list(walk_strings("x")) == [((), "x")]
    assert list(walk_strings(5)) == []
    assert replace_strings("x", lambda p, v: "y") == ("y", 1)
    assert replace_strings(None, lambda p, v: "y") == (None, 0)


@given(json_values)
def test_each_string_visited_once_with_a_resolving_path(payload: Any) -> None:
    visited = list(walk_strings(payload))
    assert len(visited) == count_strings(payload)
    assert len({parts for parts, _ in visited}) == len(visited)
    for parts, value in visited:
        assert resolve(payload, parts) == value
        assert resolve(payload, parse_path(format_path(parts))) == value


@given(json_values)
def test_keys_visited_once_with_a_resolving_path(payload: Any) -> None:
    visited = list(walk_strings(payload, include_keys=True))
    assert len(visited) == count_strings(payload, include_keys=True)
    for parts, value in visited:
        assert resolve(payload, parse_path(format_path(parts))) == value


@given(json_values)
def test_identity_replacement_returns_an_equal_payload(payload: Any) -> None:
    before = copy.deepcopy(payload)
    for fn in (lambda p, v: v, lambda p, v: None):
        result, count = replace_strings(payload, fn)
        assert result == before
        assert result is payload  # nothing changed, nothing copied
        assert count == 0


@given(json_values)
def test_replacement_rewrites_every_string_without_mutating_input(payload: Any) -> None:
    before = copy.deepcopy(payload)
    seen: list[Path] = []

    def shout(parts: Path, value: str) -> str:
        seen.append(parts)
        return value.upper()

    result, count = replace_strings(payload, shout)
    assert payload == before
    assert result == upper_everywhere(before)
    assert count == sum(1 for _, v in walk_strings(before) if v.upper() != v)
    assert seen == [parts for parts, _ in walk_strings(before)]


def test_untouched_subtrees_are_shared() -> None:
    payload = {"keep": {"deep": ["x"]}, "change": {"secret": "s3cr3t"}}
    result, count = replace_strings(payload, lambda p, v: "[REDACTED]" if p[-1] == "secret" else None)
    assert count == 1
    assert result == {"keep": {"deep": ["x"]}, "change": {"secret": "[REDACTED]"}}
    assert result["keep"] is payload["keep"]
    assert payload["change"]["secret"] == "s3cr3t"


def test_deep_nesting_does_not_recurse() -> None:
    # Deeper than the interpreter's recursion limit; JSON parsers stop near 1000 levels anyway.
    depth = 3_000
    payload: Any = "leaf"
    for _ in range(depth):
        payload = [payload]
    [(parts, value)] = list(walk_strings(payload))
    assert value == "leaf" and len(parts) == depth
    result, count = replace_strings(payload, lambda p, v: "LEAF")
    assert count == 1
    node = result
    for _ in range(depth):
        node = node[0]
    assert node == "LEAF"


@given(json_values)
def test_path_free_walk_returns_the_same_strings_in_the_same_order(payload: Any) -> None:
    for include_keys in (False, True):
        for include_integers in (False, True):
            walk = walk_strings(payload, include_keys=include_keys, include_integers=include_integers)
            expected = [value for _, value in walk]
            assert string_values(payload, include_keys=include_keys, include_integers=include_integers) == expected


def test_integers_are_read_as_their_digits_and_replaced_by_strings() -> None:
    huge = 10**5000  # past the interpreter's digit limit for str(): skipped, not an error
    payload = {"n": 4111111111111111, "flag": True, "x": 1.5, "deep": [7, {"m": -12}], "huge": huge}
    walked = list(walk_strings(payload, include_integers=True))
    assert walked == [(("n",), "4111111111111111"), (("deep", 0), "7"), (("deep", 1, "m"), "-12")]
    assert string_values(payload, include_integers=True) == [value for _, value in walked]
    assert list(walk_strings(payload)) == []
    new, count = replace_strings(
        payload, lambda path, text: "[card]" if len(text) > 12 else None, include_integers=True
    )
    assert (new, count) == ({**payload, "n": "[card]"}, 1)
    assert replace_strings(payload, lambda path, text: "[card]")[0] is payload  # integers untouched by default


class _Text(str):
    pass


class _Mapping(dict):  # type: ignore[type-arg]
    pass


def test_path_free_walk_follows_subclasses_and_skips_other_values() -> None:
    payload = {"a": _Text("sub"), "b": _Mapping(c=["x", 1, 2.5, True, None, ("tuple",), b"bytes"]), "d": "y"}
    assert string_values(payload) == [value for _, value in walk_strings(payload)] == ["sub", "x", "y"]
    assert string_values("top") == ["top"]
    assert string_values(7) == []


@pytest.mark.parametrize("depth", [10, 64, 65, 3_000])
def test_path_free_walk_handles_any_depth(depth: int) -> None:
    payload: Any = "leaf"
    for level in range(depth):
        payload = [payload, f"s{level}"] if level % 2 else {"k": payload, "t": f"s{level}"}
    assert string_values(payload) == [value for _, value in walk_strings(payload)]
    assert len(string_values(payload)) == depth + 1


def test_text_block_runs_are_consecutive_text_blocks_of_any_list() -> None:
    from mcp_interceptors.guards._walk import text_block_runs

    payload = {
        "content": [
            {"type": "text", "text": "a"},
            {"type": "text", "text": "b"},
            {"type": "image", "data": "x"},
            {"type": "text", "text": "c"},
        ],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "d"}, {"type": "text", "text": "e"}]}],
    }
    runs = sorted(text_block_runs(payload))
    assert runs == [
        [(("content", 0, "text"), "a"), (("content", 1, "text"), "b")],
        [(("messages", 0, "content", 0, "text"), "d"), (("messages", 0, "content", 1, "text"), "e")],
    ]
    assert text_block_runs({"content": [{"type": "text", "text": "alone"}]}) == []
