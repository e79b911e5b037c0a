"""Flat invoke results (spec §2.3), error classification (§3) and the aggregate result shape (§2.4)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from mcp_interceptors.protocol.chain import AbortedAt, ChainExecutionParams, ChainExecutionResult, ValidationSummary
from mcp_interceptors.protocol.errors import (
    INTERNAL_ERROR,
    TIMEOUT_G4,
    HookMismatchError,
    InterceptorExecutionError,
    InterceptorNotFoundError,
    InterceptorTimeoutError,
    MalformedResultError,
    is_timeout_error,
)
from mcp_interceptors.protocol.invoke import InvocationContext, InvokeParams
from mcp_interceptors.protocol.results import (
    MutationResult,
    SinkResult,
    ValidationMessage,
    ValidationResult,
    json_problem,
    message_severities,
    parse_result,
)

json_st = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)
phase_st = st.sampled_from(["request", "response"])
message_st = st.builds(
    ValidationMessage,
    message=st.text(max_size=10),
    severity=st.sampled_from(["info", "warn", "error"]),
    path=st.none() | st.just("$.params.name"),
)
validation_st = st.builds(
    ValidationResult,
    interceptor=st.text(min_size=1, max_size=8),
    phase=phase_st,
    valid=st.booleans(),
    severity=st.none() | st.sampled_from(["info", "warn", "error", "critical"]),
    messages=st.none() | st.lists(message_st, min_size=1, max_size=3).map(tuple),
    duration_ms=st.none() | st.floats(0, 1e6),
    info=st.none() | st.dictionaries(st.text(max_size=5), json_st, max_size=2),
)
mutation_st = st.builds(
    MutationResult,
    interceptor=st.text(min_size=1, max_size=8),
    phase=phase_st,
    modified=st.booleans(),
    payload=json_st,
    duration_ms=st.none() | st.floats(0, 1e6),
)


# --------------------------------------------------------------------------- R17-R20: result bodies


def test_r17_validation_result_is_flat_with_echo_fields() -> None:
    result = ValidationResult(interceptor="v", phase="request", valid=False, severity="error", duration_ms=1.5)
    assert result.to_wire() == {
        "interceptor": "v",
        "type": "validation",
        "phase": "request",
        "durationMs": 1.5,
        "valid": False,
        "severity": "error",
    }


def test_r18_mutation_result_is_flat_with_modified_and_payload() -> None:
    result = MutationResult(interceptor="m", phase="response", modified=True, payload={"a": None})
    assert result.to_wire() == {
        "interceptor": "m",
        "type": "mutation",
        "phase": "response",
        "modified": True,
        "payload": {"a": None},
    }


def test_r20_mutation_result_keeps_a_null_payload_on_the_wire() -> None:
    # regression: `exclude_none` dropped the required `payload` when it was JSON null
    body = MutationResult(interceptor="m", phase="request", modified=False, payload=None).to_wire()
    assert body["payload"] is None
    assert parse_result(body, interceptor="m", type="mutation", phase="request").payload is None


def test_r19_missing_echo_fields_are_filled_from_the_call() -> None:
    parsed = parse_result({"valid": True}, interceptor="v", type="validation", phase="response")
    assert (parsed.interceptor, parsed.type, parsed.phase) == ("v", "validation", "response")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"interceptor": "other", "valid": True}, "result echoes interceptor='other', expected 'v'"),
        ({"type": "mutation", "valid": True}, "result echoes type='mutation', expected 'validation'"),
        ({"phase": "response", "valid": True}, "result echoes phase='response', expected 'request'"),
        ({"valid": "yes"}, "invalid validation result at valid: Input should be a valid boolean"),
        ({"severity": "error"}, "invalid validation result at valid: Field required"),
        ([True], "result is not a JSON object"),
    ],
)
def test_r58_mismatching_echo_or_wrong_shape_is_malformed(body: Any, reason: str) -> None:
    with pytest.raises(MalformedResultError) as caught:
        parse_result(body, interceptor="v", type="validation", phase="request")
    assert caught.value.code == INTERNAL_ERROR
    assert caught.value.data == {"interceptor": "v", "reason": reason}


def test_r58_mutation_result_needs_strict_modified_and_a_payload() -> None:
    for body in ({"modified": 1, "payload": {}}, {"modified": True}):
        with pytest.raises(MalformedResultError):
            parse_result(body, interceptor="m", type="mutation", phase="request")


def test_r30_unknown_result_fields_are_ignored_and_signature_accepted() -> None:
    body = {
        "valid": True,
        "futureField": 1,
        "signature": {"algorithm": "ed25519", "publicKey": "pk", "value": "sig"},
        "messages": [{"message": "m", "severity": "info", "code": 7}],
    }
    parsed = parse_result(body, interceptor="v", type="validation", phase="request")
    assert isinstance(parsed, ValidationResult)
    assert parsed.messages == (ValidationMessage(message="m", severity="info"),)
    assert "futureField" not in parsed.to_wire()


def test_r47_unrecognised_severity_is_kept_as_a_string() -> None:
    parsed = parse_result({"valid": False, "severity": "critical"}, interceptor="v", type="validation", phase="request")
    assert isinstance(parsed, ValidationResult)
    assert parsed.severity == "critical"


def test_r31_unknown_result_type_is_malformed_not_a_crash() -> None:
    with pytest.raises(MalformedResultError) as caught:
        parse_result({"observed": True}, interceptor="o", type="observability", phase="request")
    assert caught.value.data["reason"] == "unknown interceptor type 'observability'"


def test_sink_result_shape() -> None:
    parsed = parse_result({"recorded": True, "metrics": {"n": 2}}, interceptor="s", type="sink", phase="request")
    assert parsed == SinkResult(interceptor="s", phase="request", recorded=True, metrics={"n": 2.0})


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (ValidationResult(valid=False), ["error"]),
        (ValidationResult(valid=True), []),
        (ValidationResult(valid=False, severity="warn"), ["warn"]),
        (
            ValidationResult(
                valid=False,
                severity="error",
                messages=(ValidationMessage(message="a", severity="info"), ValidationMessage(message="b")),
            ),
            ["info", "error"],
        ),
    ],
)
def test_r67_validation_summary_counts(result: ValidationResult, expected: list[str]) -> None:
    assert message_severities(result) == expected


@given(validation_st)
def test_r29_property_validation_result_round_trip(result: ValidationResult) -> None:
    wire = result.to_wire()
    assert parse_result(wire, interceptor=str(result.interceptor), type="validation", phase=result.phase) == result  # type: ignore[arg-type]


@given(mutation_st)
def test_r29_property_mutation_result_round_trip(result: MutationResult) -> None:
    wire = result.to_wire()
    assert "payload" in wire
    assert parse_result(wire, interceptor=str(result.interceptor), type="mutation", phase=result.phase) == result  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("model", "values"),
    [
        (
            ValidationResult,
            {"interceptor": "v", "phase": "request", "duration_ms": 0.5, "valid": True, "severity": None},
        ),
        (
            ValidationResult,
            {"interceptor": "v", "phase": "response", "duration_ms": 1.0, "valid": False, "severity": "error"},
        ),
        (
            MutationResult,
            {"interceptor": "m", "phase": "request", "duration_ms": 0.1, "modified": True, "payload": {"a": [1]}},
        ),
        (
            MutationResult,
            {"interceptor": "m", "phase": "request", "duration_ms": 0.1, "modified": False, "payload": None},
        ),
        (SinkResult, {"interceptor": "s", "phase": "response", "duration_ms": 2.0, "recorded": False}),
    ],
)
def test_trusted_result_is_the_validated_result(model: Any, values: dict[str, Any]) -> None:
    """`trusted` skips validation only: value, field order, fields set, wire body and copies all match."""
    trusted, validated = model.trusted(values), model(**values)
    assert trusted == validated
    assert repr(trusted) == repr(validated)
    assert trusted.model_fields_set == validated.model_fields_set
    assert trusted.to_wire() == validated.to_wire()
    assert trusted.model_copy(update={"mode": "audit"}) == validated.model_copy(update={"mode": "audit"})
    with pytest.raises(ValidationError):
        trusted.interceptor = "other"  # still frozen


# --------------------------------------------------------------------------- errors (§3)


@pytest.mark.parametrize(
    ("code", "data", "timeout"),
    [
        (TIMEOUT_G4, None, True),
        (TIMEOUT_G4, {"interceptor": "x"}, True),
        (INTERNAL_ERROR, {"reason": "timeout", "interceptor": "x", "extra": [1]}, True),
        (INTERNAL_ERROR, {"reason": "boom"}, False),
        (INTERNAL_ERROR, "timeout", False),
        (-32602, {"reason": "timeout"}, False),
        (-32001, None, False),
    ],
)
def test_r26_invoker_classifies_g4_and_g5_timeouts(code: int, data: Any, timeout: bool) -> None:
    assert is_timeout_error(code, data) is timeout


def test_r26_timeout_error_codes_and_data() -> None:
    g4 = InterceptorTimeoutError("slow", 200, "request")
    assert (g4.code, g4.data) == (
        TIMEOUT_G4,
        {"interceptor": "slow", "reason": "timeout", "timeoutMs": 200, "phase": "request"},
    )
    g5 = InterceptorTimeoutError("slow", 200, "request", style="g5")
    assert (g5.code, g5.data) == (INTERNAL_ERROR, g4.data)


def test_r21_r22_r24_error_data_shapes() -> None:
    assert InterceptorNotFoundError("x").data == {"name": "x", "interceptor": "x"}
    mismatch = HookMismatchError("x", "tools/call", "response", [{"events": ["*"], "phase": "request"}])
    assert (mismatch.code, mismatch.data) == (
        -32602,
        {
            "name": "x",
            "interceptor": "x",
            "event": "tools/call",
            "phase": "response",
            "advertisedHooks": [{"events": ["*"], "phase": "request"}],
        },
    )
    crash = InterceptorExecutionError("x", "ValueError: no")
    assert (crash.code, crash.message, crash.data) == (
        -32603,
        "Interceptor execution failed",
        {"interceptor": "x", "reason": "ValueError: no"},
    )


# --------------------------------------------------------------------------- invoke params and context


def test_invoke_params_round_trip_keeps_null_payload_and_omits_absent_optionals() -> None:
    params = InvokeParams(name="n", event="tools/call", phase="request", payload=None)
    assert params.to_wire() == {"name": "n", "event": "tools/call", "phase": "request", "payload": None}
    assert InvokeParams.model_validate(params.to_wire()) == params
    timed = InvokeParams.model_validate({"name": "n", "event": "e", "phase": "response", "payload": 1, "timeoutMs": 5})
    assert timed.to_wire()["timeoutMs"] == 5


def test_context_timestamp_is_stamped_and_unknown_fields_kept() -> None:
    ctx = InvocationContext.model_validate({"traceId": "t", "interceptorState": {"x": 1}})
    stamped = ctx.stamped()
    assert stamped.timestamp is not None and stamped.timestamp.endswith("Z")
    assert stamped.stamped() is stamped
    assert stamped.to_wire()["traceId"] == "t"


# --------------------------------------------------------------------------- R67: aggregate shape


@pytest.mark.parametrize("timeout", [True, "50", float("inf"), float("nan"), 0, -5])
def test_r60_chain_execution_params_timeout_is_a_finite_positive_json_number(timeout: Any) -> None:
    """As for `interceptor/invoke`: `true` was a 1 ms chain deadline, `"50"` 50 ms and `1e400` none at all."""
    base = {"event": "tools/call", "phase": "request", "payload": {}}
    with pytest.raises(ValidationError) as caught:
        ChainExecutionParams.model_validate({**base, "timeoutMs": timeout})
    assert caught.value.errors()[0]["loc"] == ("timeoutMs",)
    assert ChainExecutionParams.model_validate({**base, "timeoutMs": 50}).timeout_ms == 50


def test_r67_chain_execution_result_fields() -> None:
    ok = ChainExecutionResult(
        status="success", event="tools/call", phase="request", final_payload={"a": 1}, total_duration_ms=2.0
    )
    assert ok.to_wire() == {
        "status": "success",
        "event": "tools/call",
        "phase": "request",
        "results": [],
        "finalPayload": {"a": 1},
        "validationSummary": {"errors": 0, "warnings": 0, "infos": 0},
        "totalDurationMs": 2.0,
        "failures": [],
    }
    blocked = ChainExecutionResult(
        status="validation_failed",
        event="tools/call",
        phase="request",
        final_payload={"leak": True},
        validation_summary=ValidationSummary(errors=1),
        aborted_at=AbortedAt(interceptor="v", reason="validation failed (error)", type="validation"),
    )
    wire = blocked.to_wire()
    assert "finalPayload" not in wire
    assert wire["abortedAt"] == {"interceptor": "v", "reason": "validation failed (error)", "type": "validation"}
    assert wire["validationSummary"] == {"errors": 1, "warnings": 0, "infos": 0}


def test_r67_aborted_at_type_is_closed() -> None:
    with pytest.raises(ValidationError):
        AbortedAt.model_validate({"interceptor": "x", "reason": "r", "type": "sink"})


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"a": value}
    return value


_CYCLE: list[Any] = []
_CYCLE.append(_CYCLE)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"a": [1, 2.5, True, None, "s"], "b": (1, 2)}, None),  # tuples are JSON arrays
        (_nested(254), None),
        (_nested(255), "p is nested more than 254 levels deep (or holds a cycle)"),
        (_CYCLE, "p is nested more than 254 levels deep (or holds a cycle)"),
        ({"a": [{"b": {1, 2}}]}, "p.a[0].b holds a set, not a JSON value"),
        ({"a": float("nan")}, "p.a holds nan, which JSON cannot carry"),
        ([float("-inf")], "p[0] holds -inf, which JSON cannot carry"),
        ({"a": {1: "x"}}, "p.a has a non-string key 1"),
        (b"x", "p holds a bytes, not a JSON value"),
        (object(), "p holds a object, not a JSON value"),
    ],
)
def test_r25_json_problem_names_what_json_cannot_carry(value: Any, problem: str | None) -> None:
    assert json_problem(value, "p") == problem


@pytest.mark.parametrize("signature", ["not-an-object", 7, [], {"algorithm": "ed25519"}, {"value": None}])
def test_r30_malformed_signature_is_ignored_not_a_malformed_result(signature: Any) -> None:
    body = {"valid": False, "severity": "error", "signature": signature}
    parsed = parse_result(body, interceptor="v", type="validation", phase="request")
    assert isinstance(parsed, ValidationResult)
    assert (parsed.valid, parsed.severity, parsed.signature) == (False, "error", None)
