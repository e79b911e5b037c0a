"""schema-guard's quick check: a plain tool schema is checked by compiled closures, with jsonschema's answer."""

from __future__ import annotations

import random
from typing import Any

import pytest
from jsonschema.validators import validator_for

from mcp_interceptors.guards._schemas import compile_schema

TYPES = ["array", "boolean", "integer", "null", "number", "object", "string"]
DIALECTS = [
    None,
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2019-09/schema",
    "http://json-schema.org/draft-07/schema#",
    "http://json-schema.org/draft-06/schema#",
]
NAMES = ["a", "b", "text", "n"]
#: Values that tell the type checks apart: a bool is no integer, 1.0 is one, a float with a fraction is not.
SCALARS: list[Any] = [None, True, False, 0, 1, -3, 1.0, 2.5, "", "x", "hello world", "b"]


def random_schema(rng: random.Random, depth: int = 0) -> Any:
    """A schema made of the keywords the quick check knows (and, at times, annotations or bool subschemas)."""
    if depth > 0 and rng.random() < 0.1:
        return rng.choice([True, False])
    schema: dict[str, Any] = {}
    if rng.random() < 0.8:
        schema["type"] = rng.choice(TYPES) if rng.random() < 0.7 else rng.sample(TYPES, rng.randint(1, 3))
    if depth < 3 and rng.random() < 0.6:
        schema["properties"] = {name: random_schema(rng, depth + 1) for name in rng.sample(NAMES, rng.randint(1, 3))}
    if rng.random() < 0.4:
        schema["required"] = rng.sample(NAMES, rng.randint(0, 2))
    if depth < 3 and rng.random() < 0.3:
        schema["additionalProperties"] = rng.choice([False, True, random_schema(rng, depth + 1)])
    if depth < 3 and rng.random() < 0.3:
        schema["items"] = random_schema(rng, depth + 1)
    if rng.random() < 0.2:
        schema["enum"] = rng.sample(["x", "b", "hello world", ""], rng.randint(1, 3))
    if rng.random() < 0.2:
        schema["minLength"] = rng.randint(0, 3)
    if rng.random() < 0.2:
        schema["maxLength"] = rng.randint(0, 5)
    if rng.random() < 0.2:
        schema["description"] = "annotated"
        schema["format"] = "email"  # asserts nothing without a format checker
    return schema


def random_instance(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.5:
        return rng.choice(SCALARS)
    if roll < 0.75:
        return [random_instance(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {name: random_instance(rng, depth + 1) for name in rng.sample(NAMES, rng.randint(0, 4))}


@pytest.mark.parametrize("seed", range(8))
def test_quick_check_answers_as_jsonschema_does(seed: int) -> None:
    rng = random.Random(seed)
    compared = 0
    for _ in range(150):
        schema = random_schema(rng)
        if (dialect := rng.choice(DIALECTS)) is not None:
            schema["$schema"] = dialect
        compiled = compile_schema(schema)
        assert compiled.quick is not None, schema
        reference = validator_for(schema)(schema)
        for _ in range(20):
            instance = random_instance(rng)
            assert compiled.is_valid(instance) == reference.is_valid(instance), (schema, instance)
            compared += 1
    assert compared == 150 * 20


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {"type": "string"}}},
        {"type": "integer", "$schema": "http://json-schema.org/draft-04/schema#"},  # its integer refuses 1.0
        {"type": "object", "patternProperties": {"^a": {"type": "string"}}, "additionalProperties": False},
        {"type": "array", "prefixItems": [{"type": "string"}], "items": False},
        {"enum": [1, True]},  # jsonschema tells 1 from True here; `in` would not
        {"type": "number", "minimum": 3},
        {"properties": {"a": {"$schema": "http://json-schema.org/draft-04/schema#"}}},
    ],
)
def test_schemas_with_other_keywords_or_dialects_are_left_to_jsonschema(schema: dict[str, Any]) -> None:
    compiled = compile_schema(schema)
    assert compiled.quick is None
    assert compiled.is_valid({"a": "x"}) == validator_for(schema)(schema).is_valid({"a": "x"})
