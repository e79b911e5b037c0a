"""JSON Schema validators for the guards that never touch the network, and error messages that never quote
the validated value.

jsonschema's default registry retrieves a remote `$ref` with a blocking `urlopen`: an upstream advertising
`{"$ref": "http://169.254.169.254/..."}` would make the gateway fetch that URL on the event loop. Here a `$ref`
resolves only inside its own schema (or to a draft metaschema); `compile_schema` names the first one that
does not, so callers decide up front (tool-policy rejects its config, schema-guard fails closed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from jsonschema_specifications import REGISTRY as METASCHEMAS
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource, Unresolvable
from referencing.jsonschema import DRAFT202012, SchemaResource, specification_with

from mcp_interceptors.guards._walk import Path, walk_strings

__all__ = ["CompiledSchema", "Unresolvable", "compile_config_schema", "compile_schema", "describe_error"]

_REF_KEYWORDS = frozenset({"$ref", "$dynamicRef"})
#: Keywords whose value is data, not a schema: a `$ref` key inside them is not a reference.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})
#: Keywords whose value maps names to schemas: a `const` key inside them is a name, not a keyword.
_NAMING_KEYWORDS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})


def _refuse(uri: str) -> Resource[Any]:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # attrs class mypy cannot see


#: Metaschemas resolve (offline, from jsonschema-specifications); any other URI is never retrieved.
_OFFLINE: Registry[Any] = METASCHEMAS.combine(Registry(retrieve=_refuse))  # type: ignore[call-arg]


@dataclass(frozen=True, slots=True)
class CompiledSchema:
    """A validator that cannot fetch, and the first `$ref` it could not resolve (None: all resolve)."""

    validator: Validator
    unresolvable: str | None


def compile_schema(schema: Mapping[str, Any]) -> CompiledSchema:
    """Compile `schema` (its `$schema` dialect, else 2020-12); raises `SchemaError` when it is not a schema."""
    contents = dict(schema)
    cls: Any = validator_for(contents, default=Draft202012Validator)
    cls.check_schema(contents)
    return CompiledSchema(cls(contents, registry=_OFFLINE), _first_unresolvable(contents))


def compile_config_schema(schema: Any, where: str) -> CompiledSchema:
    """A schema from a guard's config, or ValueError naming `where`: not a schema, or a `$ref` that does not
    resolve inside it (rejected at load, so `gateway --check` catches it; at call time it would only fail
    every call)."""
    try:
        compiled = compile_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"{where} is not a valid JSON Schema: {exc.message}") from None
    if compiled.unresolvable is not None:
        raise ValueError(
            f"{where} has a $ref that does not resolve inside the schema: {compiled.unresolvable!r}; remote"
            " references are never fetched, so put the referenced schema under $defs and point at it with"
            " '#/$defs/...'"
        )
    return compiled


def _first_unresolvable(schema: dict[str, Any]) -> str | None:
    refs = [(path, ref) for path, ref in walk_strings(schema) if path and path[-1] in _REF_KEYWORDS]
    if not refs:
        return None
    dialect = schema.get("$schema")
    specification = specification_with(dialect if isinstance(dialect, str) else "", default=DRAFT202012)
    root: SchemaResource = specification.create_resource(schema)
    registry = _OFFLINE.with_resource(root.id() or "", root).crawl()
    for path, ref in refs:
        if _is_data(path):
            continue
        resolver = registry.resolver(root.id() or "")
        node: Any = schema
        for part in path[:-1]:  # enter each embedded resource (`$id`) on the way, as validation does
            node = node[part]
            if isinstance(node, dict) and isinstance(node.get("$id"), str) and node is not schema:
                resolver = resolver.in_subresource(specification.create_resource(node))
        try:
            resolver.lookup(ref)
        except Unresolvable:
            return ref
    return None


def _is_data(path: Path) -> bool:
    return any(
        part in _DATA_KEYWORDS and (i == 0 or path[i - 1] not in _NAMING_KEYWORDS) for i, part in enumerate(path)
    )


def describe_error(error: ValidationError) -> str:
    """The failed keyword and its constraint, never the instance: `fails maxLength 8`, `required property "id"`.

    jsonschema's own messages quote the value (`'hunter2' is too long`); ours go to clients and to the signed
    audit trail, where a message carries paths, never values.
    """
    keyword, constraint = error.validator, error.validator_value
    if keyword is None:
        return "fails a false schema (nothing is allowed here)"
    if keyword == "required" and isinstance(constraint, list):
        present = error.instance if isinstance(error.instance, Mapping) else {}
        missing = [name for name in constraint if name not in present] or constraint
        return f"required property {', '.join(_json(name) for name in missing)} is missing"
    if isinstance(constraint, dict) or (isinstance(constraint, list) and keyword not in ("type", "enum")):
        return f"fails {keyword}"  # a subschema: the path and keyword say where; its text adds nothing
    return f"fails {keyword} {_json(constraint)}"


def _json(value: Any) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= 80 else text[:77] + "..."
