"""One invocation inside a host: the `Invocation` a handler receives, the config checked against its schema,
and the handler's return turned into the stamped result of its declared type (spec §2.2, past the handler).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from pydantic import ValidationError

from mcp_interceptors.protocol._base import filled_model
from mcp_interceptors.protocol.descriptors import (
    InterceptorDescriptor,
    InterceptorType,
)
from mcp_interceptors.protocol.errors import (
    InterceptorExecutionError,
    InterceptorsError,
    InvalidParamsError,
)
from mcp_interceptors.protocol.events import (
    Phase,
    is_pattern,
)
from mcp_interceptors.protocol.invoke import (
    InvocationContext,
)
from mcp_interceptors.protocol.results import (
    KNOWN_SEVERITIES,
    InterceptorResult,
    MutationResult,
    SinkResult,
    ValidationMessage,
    ValidationResult,
    result_json_problem,
    same_json,
)

#: Values a config may hold and still be remembered as valid (`_config_key`); larger ones are checked every time.
_CONFIG_KEY_VALUES = 10_000


Handler = Callable[["Invocation"], Any]
F = TypeVar("F", bound=Handler)


@dataclass(frozen=True, init=False)
class Invocation:
    """What a handler receives. `payload` is the handler's own copy; `config` is `{}` when omitted.

    Frozen; `__init__` fills `__dict__` in one step (one is built per invocation, see `Call`).
    """

    name: str
    event: str
    phase: Phase
    payload: Any
    config: Mapping[str, Any]
    context: InvocationContext | None

    def __init__(
        self,
        name: str,
        event: str,
        phase: Phase,
        payload: Any,
        config: Mapping[str, Any],
        context: InvocationContext | None,
    ) -> None:
        set_invocation_fields(
            self,
            {"name": name, "event": event, "phase": phase, "payload": payload, "config": config, "context": context},
        )

    @property
    def session_id(self) -> str | None:
        return self.context.session_id if self.context is not None else None


#: Fills an `Invocation`'s `__dict__` (the slot's descriptor: faster than `object.__setattr__` finding it,
#: `bench/chain_overhead.py`).
set_invocation_fields = Invocation.__dict__["__dict__"].__set__
new_object = object.__new__


@dataclass(frozen=True, slots=True)
class Registered:
    descriptor: InterceptorDescriptor
    #: The descriptor's name and type, read on every invocation (a pydantic model's attributes cost more:
    #: `bench/chain_overhead.py`).
    name: str
    type: InterceptorType
    handler: Handler
    is_async: bool
    config_validator: Draft202012Validator | None
    #: An async handler that never suspends (see `_may_suspend`): a chain may run it without a cancel scope.
    still: bool
    #: By phase, its result's fields with our stamps that never change (`WireModel.template`).
    stamps: Mapping[str, dict[str, Any]]


def check_concrete_event(name: str, event: str) -> None:
    """An invoke names one lifecycle event; `*` or `tools/*` would otherwise match a `*` hook and run."""
    if event and not is_pattern(event):
        return
    reason = "must be one concrete event name, not " + ("a wildcard or pattern" if event else "empty")
    raise InvalidParamsError(
        f"Invalid interceptor/invoke params: event: {reason}",
        data={"field": "event", "reason": reason, "interceptor": name},
    )


def validate_config(name: str, validator: Draft202012Validator, config: Mapping[str, Any]) -> None:
    error = best_match(validator.iter_errors(config))
    if error is None:
        return
    path = "config" + "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    raise InvalidParamsError(
        f"config for {name!r} violates its configSchema at {path}: {error.message}",
        data={"name": name, "interceptor": name, "field": path, "reason": error.message},
    )


def config_key(config: Mapping[str, Any]) -> bytes | None:
    """A key equal for two configs only when jsonschema must judge them alike, or None (check it every time).

    Only plain JSON of exact types gets one: to jsonschema a tuple is not an array nor a bool an integer,
    while orjson writes a tuple as a list and NaN as null, and a subclass could validate differently.
    A config past `_CONFIG_KEY_VALUES` values (or holding a cycle) gets none either.
    """
    stack: list[Any] = [config]
    budget = _CONFIG_KEY_VALUES
    while stack:
        budget -= 1
        if budget < 0:
            return None
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            if any(type(key) is not str for key in item):
                return None
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind is float:
            if not math.isfinite(item):
                return None
        elif not (kind is str or kind is int or kind is bool or item is None):
            return None
    try:
        return orjson.dumps(config, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError):  # nested past orjson's depth limit
        return None


def _normalise(
    registered: Registered, value: Any, original_payload: Any, phase: Phase, duration_ms: float
) -> InterceptorResult:
    """Turn a handler's return into the stamped result of its declared type, or fail with -32603.

    A new payload is filled in from the interceptor's stamps (as `_run` fills a validator's bool and a
    mutator's None): they are ours and the value's type was just checked, so validating them again would
    only cost time.
    """
    descriptor = registered.descriptor
    name = descriptor.name
    if descriptor.type == "validation":
        result = _as_validation(name, value, {"interceptor": name, "phase": phase, "duration_ms": duration_ms})
        _check_severities(name, result)
        return result
    if descriptor.type == "mutation":
        if not isinstance(value, _RESULT_TYPES):  # None (unchanged) or the new payload
            modified = value is not None and value != original_payload
            if type(modified) is bool:  # else an exotic payload's comparison: let the model judge it
                # Python's == says `True == 1`: an equal-looking payload is checked as JSON (R20)
                fields = registered.stamps[phase].copy()
                fields["duration_ms"] = duration_ms
                fields["modified"] = modified or (value is not None and not same_json(value, original_payload))
                fields["payload"] = original_payload if value is None else value
                return filled_model(
                    MutationResult, fields, {"interceptor", "phase", "duration_ms", "modified", "payload"}
                )
        return _as_mutation(name, value, original_payload, phase, duration_ms)
    stamp = {"interceptor": name, "phase": phase, "duration_ms": duration_ms}
    if value is None or isinstance(value, bool):
        return SinkResult(recorded=value is not False, **stamp)
    if isinstance(value, SinkResult):
        return value.model_copy(update=stamp)
    raise InterceptorExecutionError(name, f"sink returned {type(value).__name__}, expected SinkResult, bool or None")


_RESULT_TYPES = (ValidationResult, MutationResult, SinkResult)
_TYPE_NOUNS = {"validation": "validator", "mutation": "mutator", "sink": "sink"}


def result_of(registered: Registered, outcome: Any, given: Any, phase: Phase, duration_ms: float) -> InterceptorResult:
    """The stamped result of a handler that returned `outcome` for the payload `given` (§2.2, past the handler)."""
    # The common returns, a validator's bool and a mutator's None (unchanged), are filled in from the
    # interceptor's stamps: they are ours and the value's type was just checked.
    if type(outcome) is bool and registered.type == "validation":
        fields = registered.stamps[phase].copy()
        fields["duration_ms"] = duration_ms
        fields["valid"] = outcome
        fields["severity"] = None if outcome else "error"
        return filled_model(ValidationResult, fields, {"interceptor", "phase", "duration_ms", "valid", "severity"})
    if outcome is None and registered.type == "mutation":
        fields = registered.stamps[phase].copy()
        fields["duration_ms"] = duration_ms
        fields["modified"] = False
        fields["payload"] = given
        return filled_model(MutationResult, fields, {"interceptor", "phase", "duration_ms", "modified", "payload"})
    try:
        result = _normalise(registered, outcome, given, phase, duration_ms)
    except InterceptorsError:
        raise
    except (TypeError, ValueError) as exc:  # pydantic's ValidationError too: the handler's return, not the params
        raise _malformed_return(registered.descriptor, exc) from None
    if outcome is None or type(outcome) is bool:  # the result holds only our stamps and the input payload
        return result
    # In-process as over a transport: a datetime, set or NaN in a new payload fails the invocation (R25).
    problem = result_json_problem(result, given)
    if problem is not None:
        raise InterceptorExecutionError(registered.name, f"result is not JSON-serialisable: {problem}")
    return result


def _malformed_return(descriptor: InterceptorDescriptor, exc: TypeError | ValueError) -> InterceptorExecutionError:
    """-32603 naming the interceptor for a return its result cannot be built from, such as `(False, 5)` or
    messages without `message`: the handler's fault, not the invoker's params (-32602)."""
    if isinstance(exc, ValidationError):
        error = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in error["loc"])
        problem = f"{where}: {error['msg']}" if where else str(error["msg"])
    else:
        problem = f"{type(exc).__name__}: {exc}"
    noun = _TYPE_NOUNS.get(descriptor.type, "interceptor")
    return InterceptorExecutionError(descriptor.name, f"{noun} returned an invalid result: {problem}")


def _as_validation(name: str, value: Any, stamp: dict[str, Any]) -> ValidationResult:
    if isinstance(value, ValidationResult):
        return value.model_copy(update=stamp)
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], bool):
        valid, messages = value
        severity = "info" if valid else "error"
        items = [messages] if isinstance(messages, str | ValidationMessage) else list(messages or [])
        parsed = tuple(
            ValidationMessage(message=m, severity=severity)
            if isinstance(m, str)
            else ValidationMessage.model_validate(m)
            for m in items
        )
        return ValidationResult(valid=valid, severity=None if valid else "error", messages=parsed or None, **stamp)
    if isinstance(value, Mapping) and "valid" in value:
        try:
            return ValidationResult.model_validate(value).model_copy(update=stamp)
        except ValidationError as exc:
            raise InterceptorExecutionError(
                name, f"validator returned an invalid result: {exc.errors()[0]['msg']}"
            ) from None
    raise InterceptorExecutionError(
        name, f"validator returned {type(value).__name__}, expected ValidationResult, bool or (bool, messages)"
    )


def _check_severities(name: str, result: ValidationResult) -> None:
    """A host sends only the spec's severities; an invoker would read another as blocking (R47), so a
    handler's `critical` or `fatal` is a malformed result here, not a verdict."""
    severities = [result.severity] if result.severity is not None else []
    severities += [message.severity for message in result.messages or ()]
    for severity in severities:
        if severity not in KNOWN_SEVERITIES:
            raise InterceptorExecutionError(
                name, f"validator returned severity {severity!r}, expected one of 'info', 'warn', 'error'"
            )


def _as_mutation(name: str, value: Any, original_payload: Any, phase: Phase, duration_ms: float) -> MutationResult:
    stamp = {"interceptor": name, "phase": phase, "duration_ms": duration_ms}
    if isinstance(value, MutationResult):
        if not value.modified and not same_json(value.payload, original_payload):
            raise InterceptorExecutionError(name, "mutator returned modified=false with a changed payload")
        return value.model_copy(update=stamp)
    if isinstance(value, ValidationResult | SinkResult):
        raise InterceptorExecutionError(name, f"mutator returned a {value.type} result, expected a mutation result")
    return MutationResult(modified=not same_json(value, original_payload), payload=value, **stamp)


def fast_copy(payload: Any) -> Any:
    """Deep-copy a JSON payload; orjson's round trip is several times faster than `copy.deepcopy`
    (`bench/chain_overhead.py`, the 10 KB payload)."""
    try:
        return orjson.loads(orjson.dumps(payload))
    except (TypeError, orjson.JSONEncodeError):
        return copy.deepcopy(payload)
