"""Pure JSON diffs as RFC 6902 operations (`add`, `remove`, `replace`), and applying them back.

Records keep what a mutator changed, not whole payloads: a diff carries only new values, never the
removed or replaced ones, so a scrubbed secret does not reappear in the audit trail.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from mcp_interceptors.protocol.results import same_json as is_same_json


def json_diff(before: Any, after: Any) -> list[dict[str, Any]]:
    """Operations that turn `before` into `after`, applied in order."""
    ops: list[dict[str, Any]] = []
    _diff_into(ops, "", before, after)
    return ops


def apply_json_diff(document: Any, ops: Sequence[dict[str, Any]]) -> Any:
    """Apply `add`/`remove`/`replace` operations to a deep copy of `document` and return it."""
    result = copy.deepcopy(document)
    for op in ops:
        result = _apply_one(result, op)
    return result


def _pointer(parent: str, token: str | int) -> str:
    return f"{parent}/{str(token).replace('~', '~0').replace('/', '~1')}"


def _diff_into(ops: list[dict[str, Any]], path: str, before: Any, after: Any) -> None:
    if is_same_json(before, after):
        return
    if isinstance(before, dict) and isinstance(after, dict):
        for key in before:
            if key not in after:
                ops.append({"op": "remove", "path": _pointer(path, key)})
        for key, value in after.items():
            if key in before:
                _diff_into(ops, _pointer(path, key), before[key], value)
            else:
                ops.append({"op": "add", "path": _pointer(path, key), "value": value})
    elif isinstance(before, list | tuple) and isinstance(after, list | tuple):
        _diff_lists(ops, path, before, after)
    else:
        ops.append({"op": "replace", "path": path, "value": after})


def _diff_lists(ops: list[dict[str, Any]], path: str, before: Sequence[Any], after: Sequence[Any]) -> None:
    # Trim the common head and tail so an insertion or deletion in the middle stays a small diff.
    head = 0
    while head < min(len(before), len(after)) and is_same_json(before[head], after[head]):
        head += 1
    tail = 0
    while tail < min(len(before), len(after)) - head and is_same_json(
        before[len(before) - 1 - tail], after[len(after) - 1 - tail]
    ):
        tail += 1
    old = before[head : len(before) - tail]
    new = after[head : len(after) - tail]
    for offset in range(min(len(old), len(new))):
        _diff_into(ops, _pointer(path, head + offset), old[offset], new[offset])
    # Removals go from the highest index down so earlier indices stay valid while applying.
    for offset in reversed(range(len(new), len(old))):
        ops.append({"op": "remove", "path": _pointer(path, head + offset)})
    for offset in range(len(old), len(new)):
        ops.append({"op": "add", "path": _pointer(path, head + offset), "value": new[offset]})


def _tokens(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise ValueError(f"JSON pointer {pointer!r} must be empty or start with '/'")
    return [part.replace("~1", "/").replace("~0", "~") for part in pointer[1:].split("/")]


def _apply_one(document: Any, op: dict[str, Any]) -> Any:
    tokens = _tokens(op["path"])
    if not tokens:
        if op["op"] == "remove":
            raise ValueError("cannot remove the whole document")
        return copy.deepcopy(op["value"])
    parent = document
    for token in tokens[:-1]:
        parent = parent[int(token)] if isinstance(parent, list) else parent[token]
    last = tokens[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        match op["op"]:
            case "add":
                parent.insert(index, copy.deepcopy(op["value"]))
            case "remove":
                del parent[index]
            case "replace":
                parent[index] = copy.deepcopy(op["value"])
            case other:
                raise ValueError(f"unsupported JSON patch op {other!r}")
    else:
        match op["op"]:
            case "add" | "replace":
                parent[last] = copy.deepcopy(op["value"])
            case "remove":
                del parent[last]
            case other:
                raise ValueError(f"unsupported JSON patch op {other!r}")
    return document
