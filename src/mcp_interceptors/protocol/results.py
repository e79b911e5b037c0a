"""Flat invoke result bodies (spec §2.3, §5.12): validation, mutation and the opt-in sink result.

Handlers build results without the echo fields; the host stamps `interceptor`, `type`, `phase` and
`durationMs`. `parse_result` reads a remote result leniently (missing echoes filled in) but
treats a present, mismatching echo as malformed (§5.9).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Strict, ValidationError, ValidatorFunctionWrapHandler, field_validator

from mcp_interceptors.protocol._base import WireModel
from mcp_interceptors.protocol.errors import MalformedResultError
from mcp_interceptors.protocol.events import Phase

#: pydantic-core refuses to serialise past 255 levels counted from the result body, so a payload or
#: `info` value (one level below it) may nest 254 levels.
MAX_JSON_DEPTH = 254
Severity = Literal["info", "warn", "error"]
KNOWN_SEVERITIES: frozenset[str] = frozenset({"info", "warn", "error"})


class ValidationMessage(WireModel):
    message: str
    severity: str = "error"
    path: str | None = None

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class Suggestion(WireModel):
    """Advisory only: never applied by an invoker."""

    path: str
    value: Any = None


class Signature(WireModel):
    """Reserved in G4 for proof of validation; our audit feature fills and checks it when configured."""

    algorithm: str
    public_key: str
    value: str


class _ResultBase(WireModel):
    interceptor: str | None = None
    phase: Phase | None = None
    duration_ms: float | None = None
    info: dict[str, Any] | None = None
    #: SDK aggregate marker for results of audit-mode interceptors; never sent by a host.
    mode: Literal["audit"] | None = None

    def to_wire(self) -> dict[str, Any]:
        """The flat JSON body; echo fields and `type` are always present once stamped."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class ValidationResult(_ResultBase):
    type: Literal["validation"] = "validation"
    valid: Annotated[bool, Strict()]
    #: Open string: an unrecognised severity on `valid: false` blocks (R47).
    severity: str | None = None
    messages: tuple[ValidationMessage, ...] | None = None
    suggestions: tuple[Suggestion, ...] | None = None
    signature: Signature | None = None

    @field_validator("signature", mode="wrap")
    @classmethod
    def _ignore_malformed_signature(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Signature | None:
        """Reserved in G4, removed in G5: accept and ignore, never require (R30). A signature of the wrong
        shape is dropped, not a malformed result; when a key is configured the invoker checks the raw body
        before parsing (`signatures.check_result_signature`), so this never lets one pass."""
        try:
            signature: Signature | None = handler(value)
        except ValidationError:
            return None
        return signature


class MutationResult(_ResultBase):
    type: Literal["mutation"] = "mutation"
    modified: Annotated[bool, Strict()]
    payload: Any

    def to_wire(self) -> dict[str, Any]:
        """The flat body; `payload` is required, so a JSON `null` payload is kept (R18/R20)."""
        body = super().to_wire()
        body.setdefault("payload", None)
        return body


class SinkResult(_ResultBase):
    type: Literal["sink"] = "sink"
    recorded: Annotated[bool, Strict()] = True
    metrics: dict[str, float] | None = None


InterceptorResult = ValidationResult | MutationResult | SinkResult
RESULT_MODELS: dict[str, type[ValidationResult] | type[MutationResult] | type[SinkResult]] = {
    "validation": ValidationResult,
    "mutation": MutationResult,
    "sink": SinkResult,
}


def parse_result(raw: Any, *, interceptor: str, type: str, phase: Phase) -> InterceptorResult:
    """Parse a remote invoke result for a call to `interceptor` declared as `type`.

    Raises `MalformedResultError` on a non-object body, a mismatching echo field, or a body
    that does not fit the declared type's model (R58).
    """
    if not isinstance(raw, Mapping):
        raise MalformedResultError(interceptor, "result is not a JSON object")
    body = dict(raw)
    expected = {"interceptor": interceptor, "type": type, "phase": phase}
    for key, value in expected.items():
        present = body.setdefault(key, value)
        if present != value:
            raise MalformedResultError(interceptor, f"result echoes {key}={present!r}, expected {value!r}")
    model = RESULT_MODELS.get(type)
    if model is None:
        raise MalformedResultError(interceptor, f"unknown interceptor type {type!r}")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        location = ".".join(str(part) for part in error["loc"]) or "<root>"
        raise MalformedResultError(interceptor, f"invalid {type} result at {location}: {error['msg']}") from None


def message_severities(result: ValidationResult) -> list[str]:
    """Severities counted for the validation summary (§5.10)."""
    if result.messages:
        return [message.severity for message in result.messages]
    if result.severity is not None:
        return [result.severity]
    return ["error"] if not result.valid else []


def json_problem(value: Any, where: str) -> str | None:
    """Why `value` is not plain JSON (or None): a type JSON lacks, NaN or Infinity, a non-string key, or
    nesting past `MAX_JSON_DEPTH` (which a cycle always reaches).

    pydantic's JSON mode would quietly turn a set into a list and NaN into null, so the host checks
    first (R25). Tuples pass: they are JSON arrays. Exact types are tested first: this walks every
    modified payload the host sends.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        kind = type(item)
        if kind is str or kind is int or kind is bool or item is None:
            continue
        is_dict = kind is dict or (kind is not list and isinstance(item, dict))
        if is_dict or kind is list or isinstance(item, list | tuple):
            if depth > MAX_JSON_DEPTH:
                return f"{where} is nested more than {MAX_JSON_DEPTH} levels deep (or holds a cycle)"
            if not is_dict:
                for sub in item:
                    push((sub, depth + 1))
                continue
            for key, sub in item.items():
                if not isinstance(key, str):
                    return f"{where}{_path_to(value, item)} has a non-string key {key!r}"
                push((sub, depth + 1))
        elif isinstance(item, float):
            if not math.isfinite(item):
                return f"{where}{_path_to(value, item)} holds {item!r}, which JSON cannot carry"
        elif not isinstance(item, str | int):  # str and int subclasses (enums) serialise as their values
            return f"{where}{_path_to(value, item)} holds a {kind.__name__}, not a JSON value"
    return None


def same_json(left: Any, right: Any) -> bool:
    """JSON equality as RFC 8785 sees it: `1 == 1.0`, but `true != 1` and `"1" != 1` (Python's `==` says
    `True == 1`, so a mutator turning `1` into `true` would pass for unchanged). Walked without recursion."""
    stack = [(left, right)]
    pop, push = stack.pop, stack.append
    while stack:
        a, b = pop()
        if a is b:
            continue
        kind = type(a)
        if (kind is int or kind is float) and (type(b) is int or type(b) is float):
            if a != b:
                return False
        elif isinstance(a, dict) and isinstance(b, dict):
            if a.keys() != b.keys():
                return False
            for key, value in a.items():
                push((value, b[key]))
        elif isinstance(a, list | tuple) and isinstance(b, list | tuple):
            if len(a) != len(b):
                return False
            for pair in zip(a, b, strict=True):
                push(pair)
        elif kind is not type(b) or not bool(a == b):
            return False
    return True


def _path_to(root: Any, target: Any) -> str:
    """The path of `target` (by identity) below `root`, as `.key` / `[index]` steps; for messages only."""
    stack: list[tuple[Any, str]] = [(root, "")]
    while stack:
        node, path = stack.pop()
        if node is target:
            return path
        if isinstance(node, dict):
            stack.extend((sub, f"{path}.{key}") for key, sub in node.items())
        elif isinstance(node, list | tuple):
            stack.extend((sub, f"{path}[{index}]") for index, sub in enumerate(node))
    return ""


def result_json_problem(result: InterceptorResult, input_payload: Any = None) -> str | None:
    """Why a handler's result cannot go on the wire as the JSON it claims to be (or None).

    Only the values a handler fills freely are walked; a mutator's payload that *is* `input_payload`
    came off the wire and is skipped.
    """
    values: list[tuple[str, Any]] = [("info", result.info)]
    if isinstance(result, MutationResult) and result.payload is not input_payload:
        values.append(("payload", result.payload))
    elif isinstance(result, ValidationResult):
        values.extend((f"suggestions[{i}].value", s.value) for i, s in enumerate(result.suggestions or ()))
    elif isinstance(result, SinkResult):
        values.append(("metrics", result.metrics))
    for where, value in values:
        problem = json_problem(value, where)
        if problem is not None:
            return problem
    return None
