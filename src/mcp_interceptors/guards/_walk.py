"""THE payload walker: every string in a JSON payload with its JSON path, and a rebuild with replacements.

Every guard walks payloads with this module and never with a copy of its own. Paths come back as plain
tuples of parts (cheap to build); `format_path` turns one into `$.a[0]["b c"]` only when a guard needs
to show it. The walk is iterative, so deeply nested payloads cannot exhaust the recursion limit.
`string_values` is the path-free walk (about 3x faster): scanners read every string with it and ask
`walk_strings` for paths only when something was found, by the string's index in document order.
`verbatim_json` is the walk done in C: one text that holds every string of a payload as it is, which a
scanner can rule a whole payload out on in one pass.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeAlias

import orjson

from mcp_interceptors.executor.memo import memo_for

__all__ = [
    "Path",
    "PathMark",
    "PathPart",
    "compact_json",
    "format_path",
    "iter_strings",
    "replace_strings",
    "string_values",
    "string_values_within",
    "text_block_runs",
    "verbatim_json",
    "verbatim_json_bytes",
    "walk_strings",
]


class PathMark(enum.Enum):
    """Marks a path that points at a mapping key rather than at its value."""

    KEY = "~"


PathPart: TypeAlias = str | int | PathMark
Path: TypeAlias = tuple[PathPart, ...]
Replacer: TypeAlias = Callable[[Path, str], "str | None"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def format_path(parts: Path, hidden_keys: Mapping[Path, str] | None = None) -> str:
    """Render path parts as JSONPath: `$.params.arguments.text`, `$.content[0]`, `$["a b"]`.

    A trailing `PathMark.KEY` renders as `~` (the JSONPath-Plus "property name" suffix): the string found
    was the key itself, e.g. `$.headers["x-token"]~`. A key whose path (the parts up to and including it)
    is in `hidden_keys` is shown as the label given there, not as itself: a guard that found a credential
    in a key names where it is without quoting it (`$.arguments["[REDACTED:aws_access_key]"]~`).
    """
    out = ["$"]
    for index, part in enumerate(parts):
        if hidden_keys and isinstance(part, str) and (label := hidden_keys.get(parts[: index + 1])) is not None:
            part = label
        if part is PathMark.KEY:
            out.append("~")
        elif isinstance(part, int):
            out.append(f"[{part}]")
        elif _IDENTIFIER.fullmatch(part):
            out.append(f".{part}")
        else:
            out.append(f"[{json.dumps(part, ensure_ascii=False)}]")
    return "".join(out)


def _entries(node: dict[Any, Any] | list[Any]) -> Iterator[tuple[Any, Any]]:
    return iter(node.items()) if isinstance(node, dict) else enumerate(node)


#: A float is read as digits up to this size: past it, a double no longer holds every digit of an integer.
_EXACT_FLOAT = 2.0**63


def _integer_text(value: Any) -> str | None:
    """An integer's decimal digits (a card number a tool put in a JSON number is still one), also of a
    float with an integral value (`4111111111111111.0`, `4.111111111111111e15`), or None for anything
    else: booleans, fractions, and integers past the interpreter's digit limit for `str`."""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < _EXACT_FLOAT else None
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    try:
        return str(value)
    except ValueError:
        return None


def walk_strings(
    payload: Any, *, include_keys: bool = False, include_integers: bool = False
) -> Iterator[tuple[Path, str]]:
    """Yield `(path_parts, value)` for every string in `payload`, in document order, each exactly once.

    Dicts and lists are descended; every other non-string value is skipped. With `include_keys`, mapping
    keys are yielded too, with the entry's path plus `PathMark.KEY`, just before the entry's value. With
    `include_integers`, integer values (and floats with an integral value) are yielded too, as their
    decimal digits.
    """
    if isinstance(payload, str):
        yield (), payload
        return
    if not isinstance(payload, dict | list):
        if include_integers and (digits := _integer_text(payload)) is not None:
            yield (), digits
        return
    stack: list[tuple[Iterator[tuple[Any, Any]], Path, bool]] = [
        (_entries(payload), (), include_keys and isinstance(payload, dict))
    ]
    while stack:
        entries, base, with_keys = stack[-1]
        for key, value in entries:
            if with_keys and isinstance(key, str):
                yield (*base, key, PathMark.KEY), key
            if isinstance(value, str):
                yield (*base, key), value
            elif include_integers and (digits := _integer_text(value)) is not None:
                yield (*base, key), digits
            elif isinstance(value, dict | list):
                stack.append((_entries(value), (*base, key), include_keys and isinstance(value, dict)))
                break
        else:
            stack.pop()


#: Nesting depth the recursive collector handles; deeper payloads take the iterative walk instead.
_MAX_RECURSION = 64


class _TooDeep(Exception):
    pass


def string_values(payload: Any, *, include_keys: bool = False, include_integers: bool = False) -> list[str]:
    """`[value for _, value in walk_strings(payload, ...)]`, without building any path.

    Index `i` of the result is the `i`-th string `walk_strings` yields, so a caller that finds something
    in a few strings can recover their paths with one `walk_strings` pass.
    """
    if type(payload) is dict and not include_keys:  # what payloads are: spared the tests below
        values: Iterable[Any] = payload.values()
    elif isinstance(payload, str):
        return [payload]
    elif include_keys or not isinstance(payload, dict | list):
        walk = walk_strings(payload, include_keys=include_keys, include_integers=include_integers)
        return [value for _, value in walk]
    else:
        values = payload.values() if isinstance(payload, dict) else payload
    out: list[str] = []
    try:
        _collect(values, out.append, 0, include_integers)
    except _TooDeep:
        return [value for _, value in walk_strings(payload, include_integers=include_integers)]
    return out


class _TooMany(Exception):
    pass


def string_values_within(payload: Any, limit: int, *, include_integers: bool = False) -> list[str] | None:
    """`string_values(payload)` when it holds at most `limit` strings, else None (also for nesting past
    the recursive walk's depth): the walk stops at string `limit + 1`, so a big payload costs `limit`. In a
    chain run, a payload past the limit is walked once for all its scanners (`memo_for`)."""
    if type(payload) is not dict:
        every = string_values(payload, include_integers=include_integers)
        return every if len(every) <= limit else None
    memo = memo_for(payload)
    if memo is not None and memo.get(_PAST_LIMIT, -1) >= limit:
        return None
    values = _values_within(payload, limit, include_integers)
    # Integers read as digits only add strings: a payload past the limit without them is past it with them.
    if memo is not None and values is None and not include_integers:
        memo[_PAST_LIMIT] = limit
    return values


def _values_within(payload: dict[Any, Any], limit: int, include_integers: bool) -> list[str] | None:
    out: list[str] = []

    def append(value: str) -> None:
        if len(out) >= limit:
            raise _TooMany
        out.append(value)

    try:
        _collect(payload.values(), append, 0, include_integers)
    except (_TooMany, _TooDeep):
        return None
    return out


def _collect(values: Iterable[Any], append: Callable[[str], None], depth: int, integers: bool) -> None:
    # Recursion is the fastest walk in CPython, and exact-type tests are cheaper than isinstance for the
    # JSON types; subclasses still go where `walk_strings` sends them. Nesting past _MAX_RECURSION raises
    # _TooDeep, so no payload can exhaust the stack.
    if depth > _MAX_RECURSION:
        raise _TooDeep
    for value in values:
        kind = type(value)
        if kind is str:
            append(value)
        elif kind is dict:
            _collect(value.values(), append, depth + 1, integers)
        elif kind is list:
            _collect(value, append, depth + 1, integers)
        elif kind is bool or value is None:
            continue
        elif kind is float:
            if integers and (digits := _integer_text(value)) is not None:
                append(digits)
        elif isinstance(value, str):
            append(value)
        elif integers and (digits := _integer_text(value)) is not None:
            append(digits)
        elif isinstance(value, dict):
            _collect(value.values(), append, depth + 1, integers)
        elif isinstance(value, list):
            _collect(value, append, depth + 1, integers)


#: The JSON escapes `verbatim_json` undoes, and those it gives up on (a quote, a backslash, other controls).
_UNDONE_ESCAPES = ((b"\\n", b"\n"), (b"\\r", b"\r"), (b"\\t", b"\t"))
_KEPT_ESCAPES = (b'\\"', b"\\\\", b"\\u", b"\\b", b"\\f")


def verbatim_json(payload: Any) -> str | None:
    """`payload` as compact JSON in which every string and key `walk_strings` yields, and every integer's
    digits (not those of a float written with an exponent, `1e+16`), stand as they are, or None where that
    text cannot be had: non-ASCII text, a string holding a
    quote, a backslash or a control character other than newline, tab and carriage return, a value or key
    JSON cannot hold, nesting past orjson's limit.

    One `orjson.dumps` in C, against a walk in Python: a scanner that finds nothing in this text, where
    strings are bounded by quotes as they are by separators in a joined scan, finds nothing in any string.
    The text holds more than the strings (keys, numbers, punctuation), which can only add to what is found.
    """
    data = verbatim_json_bytes(payload)
    return None if data is None else data.decode("ascii")


def verbatim_json_bytes(payload: Any) -> bytes | None:
    """`verbatim_json(payload)` as its ASCII bytes (what RE2 reads), without decoding them; made once per
    payload in a chain run (`memo_for`), for every scanner of the run."""
    memo = memo_for(payload)
    if memo is None:
        return _verbatim_of(compact_json(payload))
    data = memo.get(_VERBATIM, _UNKNOWN)
    if data is _UNKNOWN:
        data = memo[_VERBATIM] = _verbatim_of(compact_json(payload, memo))
    return data  # type: ignore[no-any-return]


def compact_json(payload: Any, memo: dict[Any, Any] | None = None) -> bytes | None:
    """`orjson.dumps(payload)`, or None for a value or key JSON cannot hold, a lone surrogate, nesting past
    orjson's limit; made once per payload in a chain run (`memo`, else `memo_for`), for every guard of the run."""
    if memo is None and (memo := memo_for(payload)) is None:
        return _compact_json(payload)
    data = memo.get(_COMPACT, _UNKNOWN)
    if data is _UNKNOWN:
        data = memo[_COMPACT] = _compact_json(payload)
    return data  # type: ignore[no-any-return]


#: Keys of a payload's entries in a run's memo, and a miss.
_COMPACT, _VERBATIM, _PAST_LIMIT, _UNKNOWN = "compact_json", "verbatim_json", "strings_past", object()


def _compact_json(payload: Any) -> bytes | None:
    try:
        return orjson.dumps(payload)
    except orjson.JSONEncodeError:
        return None


def _verbatim_of(data: bytes | None) -> bytes | None:
    if data is None or not data.isascii():
        return None
    if b"\\" in data:
        if any(escape in data for escape in _KEPT_ESCAPES):
            return None
        for escape, char in _UNDONE_ESCAPES:
            data = data.replace(escape, char)
    return data


def iter_strings(payload: Any, *, include_keys: bool = False) -> Iterator[tuple[str, str]]:
    """Like `walk_strings`, with each path already formatted; use it where every path gets shown."""
    for parts, value in walk_strings(payload, include_keys=include_keys):
        yield format_path(parts), value


def _shallow_copy(node: dict[Any, Any] | list[Any]) -> dict[Any, Any] | list[Any]:
    return dict(node) if isinstance(node, dict) else list(node)


def replace_strings(payload: Any, fn: Replacer, *, include_integers: bool = False) -> tuple[Any, int]:
    """Return `(new_payload, count)` where each string value becomes `fn(path_parts, value)`.

    `fn` returns the replacement or None to keep the value. Containers on the way to a replaced string
    are copied; untouched subtrees are shared with the input, which is never mutated. Keys are never
    rewritten (renaming could collide); a guard that finds something in a key should block instead.
    With `include_integers`, `fn` also gets each integer value as its digits, and its replacement (a
    string) takes the integer's place.
    """
    if isinstance(payload, str):
        new = fn((), payload)
        return (new, 1) if new is not None and new != payload else (payload, 0)
    if not isinstance(payload, dict | list):
        digits = _integer_text(payload) if include_integers else None
        new = fn((), digits) if digits is not None else None
        return (new, 1) if new is not None and new != digits else (payload, 0)
    count = 0
    result: Any = payload
    # Frame: [node, entries, path, copy-or-None, key in parent]; the copy is made on the first change.
    stack: list[list[Any]] = [[payload, _entries(payload), (), None, None]]
    while stack:
        frame = stack[-1]
        node, entries, base = frame[0], frame[1], frame[2]
        for key, value in entries:
            text = value if isinstance(value, str) else _integer_text(value) if include_integers else None
            if text is not None:
                new = fn((*base, key), text)
                if new is not None and new != text:
                    if frame[3] is None:
                        frame[3] = _shallow_copy(node)
                    frame[3][key] = new
                    count += 1
            elif isinstance(value, dict | list):
                stack.append([value, _entries(value), (*base, key), None, key])
                break
        else:
            stack.pop()
            changed = frame[3]
            if changed is None:
                continue
            if not stack:
                result = changed
                continue
            parent = stack[-1]
            if parent[3] is None:
                parent[3] = _shallow_copy(parent[0])
            parent[3][frame[4]] = changed
    return result, count


def text_block_runs(payload: Any) -> list[list[tuple[Path, str]]]:
    """Runs of two or more consecutive text content blocks (`{"type": "text", "text": ...}`) in any list
    of `payload`, each as `[(path of the block's text, text), ...]`, in document order within a run.

    A model reads such a run as one text (a tool result's `content`, a sampling message's content list),
    so a value cut across two blocks is whole there; scanners read each run joined as well.
    """
    runs: list[list[tuple[Path, str]]] = []
    stack: list[tuple[Path, Any]] = [((), payload)]
    while stack:
        base, node = stack.pop()
        if isinstance(node, dict):
            stack.extend(((*base, key), value) for key, value in node.items() if isinstance(value, dict | list))
            continue
        if not isinstance(node, list):
            continue
        run: list[tuple[Path, str]] = []
        for index, item in enumerate(node):
            if isinstance(item, dict) and item.get("type") == "text" and isinstance(text := item.get("text"), str):
                run.append(((*base, index, "text"), text))
            else:
                if len(run) > 1:
                    runs.append(run)
                run = []
            if isinstance(item, dict | list):
                stack.append(((*base, index), item))
        if len(run) > 1:
            runs.append(run)
    return runs
