"""JSON Schema validators for the guards that never touch the network, and error messages that never quote
the validated value.

jsonschema's default registry retrieves a remote `$ref` with a blocking `urlopen`: an upstream advertising
`{"$ref": "http://169.254.169.254/..."}` would make the gateway fetch that URL on the event loop. Here a `$ref`
resolves only inside its own schema (or to a draft metaschema); `compile_schema` names the first one that
does not, so callers decide up front (tool-policy rejects its config, schema-guard fails closed).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

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


Check: TypeAlias = Callable[[Any], bool]


@dataclass(frozen=True, slots=True)
class CompiledSchema:
    """A validator that cannot fetch, and the first `$ref` it could not resolve (None: all resolve).

    `is_valid` answers as `validator.is_valid` does; for the plain schemas tools advertise (see
    `_quick_check`) it runs a check compiled from the schema, which costs a tenth of jsonschema's.
    """

    validator: Validator
    unresolvable: str | None
    quick: Check | None = None

    def is_valid(self, instance: Any) -> bool:
        return self.quick(instance) if self.quick is not None else bool(self.validator.is_valid(instance))


def compile_schema(schema: Mapping[str, Any]) -> CompiledSchema:
    """Compile `schema` (its `$schema` dialect, else 2020-12); raises `SchemaError` when it is not a schema."""
    contents = dict(schema)
    cls: Any = validator_for(contents, default=Draft202012Validator)
    cls.check_schema(contents)
    quick = _quick_check(contents) if cls.TYPE_CHECKER is Draft202012Validator.TYPE_CHECKER else None
    return CompiledSchema(cls(contents, registry=_OFFLINE), _first_unresolvable(contents), quick)


# ------------------------------------------------------------------ the quick check
#
# jsonschema builds a validator object per subschema it descends into, on every validation. A schema made
# only of the keywords below (what tool input schemas are made of) compiles to nested closures that give
# the same answer. Dialects draft 6 to 2020-12 share these keywords' meaning and their type checker (the
# caller checks it): `integer` admits a float with no fraction, `number` any `numbers.Number` but a bool.
# Any other keyword, a `$ref` among them, leaves the schema to jsonschema. Messages always come from
# jsonschema: the quick check only answers whether an instance is valid.

#: Keywords that assert nothing (`format` asserts only with a format checker, which these validators lack).
_ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly", "format"}
)
#: Deeper schemas are left to jsonschema (compiling is recursive).
_MAX_QUICK_DEPTH = 32


def _is_integer(instance: Any) -> bool:
    if isinstance(instance, bool):
        return False
    return isinstance(instance, int) or (isinstance(instance, float) and instance.is_integer())


def _is_number(instance: Any) -> bool:
    return not isinstance(instance, bool) and isinstance(instance, numbers.Number)


_TYPES: dict[str, Check] = {
    "array": lambda instance: isinstance(instance, list),
    "boolean": lambda instance: isinstance(instance, bool),
    "integer": _is_integer,
    "null": lambda instance: instance is None,
    "number": _is_number,
    "object": lambda instance: isinstance(instance, dict),
    "string": lambda instance: isinstance(instance, str),
}


def _always(instance: Any) -> bool:
    return True


def _never(instance: Any) -> bool:
    return False


def _quick_check(schema: Any, depth: int = 0) -> Check | None:
    """An exact `is_valid` for `schema` (a schema checked against its metaschema), or None when it uses a
    keyword this does not know."""
    if schema is True:
        return _always
    if schema is False:
        return _never
    if not isinstance(schema, dict) or depth > _MAX_QUICK_DEPTH:
        return None
    checks: list[Check] = []
    for keyword, value in schema.items():
        if keyword in _ANNOTATIONS or (keyword == "$schema" and depth == 0):
            continue
        check = _keyword_check(keyword, value, schema, depth)
        if check is None:
            return None
        checks.append(check)
    return _all_of(checks) if checks else _always


def _all_of(checks: list[Check]) -> Check:
    # Nested `and`s: a generator for `all()` costs more than the few checks a schema has.
    first = checks[0]
    if len(checks) == 1:
        return first
    rest = _all_of(checks[1:])
    return lambda instance: first(instance) and rest(instance)


def _keyword_check(keyword: str, value: Any, schema: dict[str, Any], depth: int) -> Check | None:
    if keyword == "type":
        names = value if isinstance(value, list) else [value]
        if not all(isinstance(name, str) and name in _TYPES for name in names):
            return None
        tests = [_TYPES[name] for name in names]
        if len(tests) == 1:
            return tests[0]
        return lambda instance: any(test(instance) for test in tests)
    if keyword == "properties":
        subchecks = {name: _quick_check(sub, depth + 1) for name, sub in value.items()}
        if None in subchecks.values():
            return None
        return _properties_check(subchecks)  # type: ignore[arg-type]  # no None left
    if keyword == "required":
        required = frozenset(value)
        return lambda instance: not isinstance(instance, dict) or instance.keys() >= required
    if keyword == "additionalProperties":
        if "patternProperties" in schema:
            return None
        extra = _quick_check(value, depth + 1)
        if extra is None:
            return None
        return _additional_check(frozenset(schema.get("properties", {})), extra)
    if keyword == "items":
        if "prefixItems" in schema or isinstance(value, list):  # the tuple forms
            return None
        item = _quick_check(value, depth + 1)
        if item is None:
            return None
        return lambda instance: not isinstance(instance, list) or all(item(each) for each in instance)
    if keyword == "enum":
        if not all(isinstance(each, str) for each in value):  # jsonschema's `equal` is `==` only for strings
            return None
        options = tuple(value)
        return lambda instance: instance in options
    if keyword == "minLength":
        return lambda instance: not isinstance(instance, str) or len(instance) >= value
    if keyword == "maxLength":
        return lambda instance: not isinstance(instance, str) or len(instance) <= value
    return None


def _properties_check(subchecks: dict[str, Check]) -> Check:
    pairs = tuple(subchecks.items())

    def check(instance: Any) -> bool:
        if not isinstance(instance, dict):
            return True
        for name, sub in pairs:  # noqa: SIM110 - all() over a generator costs more than the check itself
            if name in instance and not sub(instance[name]):
                return False
        return True

    return check


def _additional_check(declared: frozenset[str], extra: Check) -> Check:
    if extra is _always:
        return _always
    if extra is _never:  # `additionalProperties: false`
        return lambda instance: not isinstance(instance, dict) or instance.keys() <= declared

    def check(instance: Any) -> bool:
        if not isinstance(instance, dict):
            return True
        return all(extra(instance[name]) for name in instance if name not in declared)

    return check


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
