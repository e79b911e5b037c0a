"""Reading a config file's text into plain data, within bounds, so a hostile or broken file is a
`ConfigError` naming the file, field path and line: never a traceback, a hang or a memory blow-up.

| bound | value | why |
|---|---|---|
| nesting | 64 levels (`MAX_DEPTH`), aliases expanded | PyYAML composes one level per Python call |
| values | 100,000 (`MAX_VALUES`), aliases expanded | a 1 KB alias bomb expands to billions of values |
| integer length | 40 digits (`MAX_INT_DIGITS`) | no setting takes more; Python refuses 4,301 |
| aliases | may not refer to their own anchor | a cycle has no finite expansion |
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from mcp_interceptors.gateway.config.base import ConfigError

MAX_DEPTH = 64
MAX_VALUES = 100_000
MAX_INT_DIGITS = 40

_INT_TAG = "tag:yaml.org,2002:int"


def read_document(text: str, file: str) -> Any:
    """A config file's text as plain data: JSON when it is JSON (client configs may be tab-indented,
    which YAML refuses), else YAML; `None` for an empty file."""
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_json_constant)
        except json.JSONDecodeError:
            pass  # YAML's flow style, e.g. `{upstreams: {...}}`
        except RecursionError:
            raise ConfigError(file, "", f"nested more than {MAX_DEPTH} levels deep", "flatten the document") from None
        except _RepeatedKey as exc:
            raise ConfigError(file, "", f"the key {exc.key!r} is given twice in one object", "keep one") from None
        except ValueError as exc:  # an integer past Python's digit limit
            raise ConfigError(file, "", f"cannot read the JSON ({exc})", "correct the value") from None
    return read_yaml(text, file)


class _RepeatedKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """JSON keeps the last of two equal keys silently, as YAML does."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _RepeatedKey(key)
        result[key] = value
    return result


def _json_constant(name: str) -> Any:
    return float(name.replace("Infinity", "inf"))  # refused, naming its field, with YAML's `.inf`


def read_yaml(text: str, file: str) -> Any:
    """The YAML (or JSON) document in `text` as plain data; `None` for an empty one."""
    try:
        loader = _BoundedLoader(text, file)  # its reader refuses control characters at once
    except yaml.YAMLError as exc:
        raise _syntax_error(exc, file) from None
    try:
        try:
            node = loader.get_single_node()
            if node is None:
                return None
            paths = _Measure(file).walk(node)
            return loader.construct_bounded(node, paths)
        except yaml.YAMLError as exc:
            raise _syntax_error(exc, file) from None
    finally:
        loader.dispose()


def path_text(parts: list[str | int] | tuple[str | int, ...]) -> str:
    """Field path parts as our errors write them: `upstreams.a.args[0]`."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _where(mark: Any) -> str:
    return f"line {mark.line + 1} column {mark.column + 1}" if mark is not None else "unknown position"


def _syntax_error(exc: yaml.YAMLError, file: str) -> ConfigError:
    if isinstance(exc, yaml.reader.ReaderError):
        where = f"character {exc.position + 1}" if isinstance(exc.position, int) else "an unknown position"
        what = f"#x{exc.character:04x}" if isinstance(exc.character, int) else repr(exc.character)
        return ConfigError(file, "", f"invalid YAML at {where}: {what}: {exc.reason}", "remove the character")
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)  # what the parser expected or found there
    what = f": {' '.join(problem.split())}" if problem else ""
    return ConfigError(file, "", f"invalid YAML at {_where(mark)}{what}", "fix the YAML syntax")


def _too_deep(file: str, parts: list[str | int], mark: Any, how: str = "") -> ConfigError:
    shown = path_text(parts[:8]) + ("..." if len(parts) > 8 else "")  # where it starts; the line says where it is
    return ConfigError(
        file,
        shown,
        f"nested more than {MAX_DEPTH} levels deep{how} (at {_where(mark)})",
        "flatten the document; no setting nests this deep",
    )


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing nesting past `MAX_DEPTH` while it composes (its composer recurses
    per level), and naming the field path and line of a value it cannot construct."""

    def __init__(self, text: str, file: str) -> None:
        super().__init__(text)
        self.file = file
        self.parts: list[str | int] = []

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if parent is None or index is None:  # the document, or a mapping's key
            part: str | int = "<key>" if parent is not None else ""
        elif isinstance(parent, yaml.SequenceNode):
            part = int(index)
        else:
            part = str(index.value) if isinstance(index, yaml.ScalarNode) else "<key>"
        if len(self.parts) > MAX_DEPTH:
            raise _too_deep(self.file, self.parts, self.peek_event().start_mark)  # type: ignore[no-untyped-call]
        self.parts.append(part)
        try:
            node: yaml.Node | None = super().compose_node(parent, index)
        finally:
            self.parts.pop()
        return node

    def construct_bounded(self, node: yaml.Node, paths: dict[int, str]) -> Any:
        self._paths = paths
        return self.construct_document(node)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as exc:  # a timestamp such as 2024-13-01: datetime's ValueError
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError(
                self.file,
                self._paths.get(id(node), ""),
                f"{node.value!r} at {_where(node.start_mark)} is not a valid {node.tag.rpartition(':')[2]} ({exc})",
                "quote the value to make it a string, or correct it",
            ) from None


class _Measure:
    """One walk of the composed node graph, each node once (an alias shares its anchor's node): each node's
    size and height with aliases expanded, keys given twice, integers past `MAX_INT_DIGITS`, cycles."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (values, levels), aliases expanded
        self.paths: dict[int, str] = {}  # id(node) -> the first field path it was met at
        self.open: set[int] = set()  # nodes being walked: meeting one again is a cycle

    def walk(self, root: yaml.Node) -> dict[int, str]:
        self._visit(root, [], 0)
        return self.paths

    def _visit(self, node: yaml.Node, parts: list[str | int], depth: int) -> tuple[int, int]:
        key = id(node)
        if key in self.open:
            raise ConfigError(
                self.file,
                path_text(parts),
                f"an alias here refers to the anchor at {_where(node.start_mark)}, which holds it: it would never end",
                "point the alias at an anchor outside it",
            )
        if (known := self.sizes.get(key)) is not None:
            if depth + known[1] > MAX_DEPTH:
                raise _too_deep(self.file, parts, node.start_mark, ", once its aliases are expanded")
            return known
        if depth > MAX_DEPTH:
            raise _too_deep(self.file, parts, node.start_mark, ", once its aliases are expanded")
        self.paths[key] = path_text(parts)
        self.open.add(key)
        values, levels = 1, 0
        for child_parts, child in self._children(node, parts):
            child_values, child_levels = self._visit(child, child_parts, depth + 1)
            values += child_values
            levels = max(levels, child_levels + 1)
            if values > MAX_VALUES:
                raise ConfigError(
                    self.file,
                    path_text(parts),
                    f"holds more than {MAX_VALUES:,} values once its aliases are expanded"
                    f" (from {_where(node.start_mark)})",
                    "write the values out, or use fewer aliases; no gateway config needs this many",
                )
        self.open.discard(key)
        if isinstance(node, yaml.ScalarNode) and node.tag == _INT_TAG:
            digits = sum(char.isdigit() for char in node.value)
            if digits > MAX_INT_DIGITS:
                raise ConfigError(
                    self.file,
                    path_text(parts),
                    f"an integer of {digits} digits at {_where(node.start_mark)}: no setting takes one this long",
                    f"give a number of at most {MAX_INT_DIGITS} digits, or quote it to make it a string",
                )
        self.sizes[key] = (values, levels)
        return values, levels

    def _children(self, node: yaml.Node, parts: list[str | int]) -> list[tuple[list[str | int], yaml.Node]]:
        if isinstance(node, yaml.SequenceNode):
            return [([*parts, index], item) for index, item in enumerate(node.value)]
        if not isinstance(node, yaml.MappingNode):
            return []
        children: list[tuple[list[str | int], yaml.Node]] = []
        keys: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else None
            where: list[str | int] = [*parts, key if key is not None else "<key>"]
            if key is not None and key in keys and key_node.tag != "tag:yaml.org,2002:merge":
                raise ConfigError(
                    self.file,
                    path_text(where),
                    f"given twice (the second at line {key_node.start_mark.line + 1})",
                    "keep only one of them",
                )
            if key is not None:
                keys.add(key)
            children.append(([*parts, "<key>"], key_node))
            children.append((where, value_node))
        return children
