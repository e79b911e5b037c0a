"""Escalation: a validator's verdict that asks a person to approve what it would otherwise block (ours, additive).

The verdict is an ordinary `ValidationResult` with `valid: false` and severity `error`; the question rides in
its `info`, the result's free-form field (§2.3), under a namespaced key. An invoker that does not know the key
blocks the operation (fail closed); one that does may ask a person, and let it through on their yes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, Strict, ValidationError

from mcp_interceptors.protocol._base import WireModel
from mcp_interceptors.protocol.results import ValidationMessage, ValidationResult

#: The key of `info` a verdict's escalation is under (reverse-DNS, like the receipt's `_meta` key).
ESCALATION_INFO_KEY = "io.github.mcp-interceptors/escalation"
#: How long an approval is remembered: this call only, the rest of the session, or the principal's calls for
#: `rememberMs`.
RememberScope = Literal["call", "session", "principal"]
#: A form elicitation's schema asking nothing: the person accepts or declines.
NO_FIELDS: dict[str, Any] = {"type": "object", "properties": {}}
DEFAULT_ESCALATION_TIMEOUT_MS = 120_000


class Escalation(WireModel):
    """A validator's request that a person approve the operation it would otherwise block.

    `message` is what the person is shown, `requestedSchema` what they are asked (a form elicitation's flat
    object schema), `timeoutMs` how long the invoker waits for the answer. `key` names the question (the
    guard's rule, say): an approval is remembered for `remember` under it.
    """

    message: Annotated[str, Strict(), Field(min_length=1, max_length=4000)]
    requested_schema: dict[str, Any] = Field(default_factory=lambda: dict(NO_FIELDS))
    timeout_ms: Annotated[float, Strict(), Field(gt=0, le=86_400_000, allow_inf_nan=False)] = (
        DEFAULT_ESCALATION_TIMEOUT_MS
    )
    key: Annotated[str, Strict(), Field(min_length=1, max_length=512)] | None = None
    remember: RememberScope = "call"
    remember_ms: Annotated[float, Strict(), Field(gt=0, le=31 * 86_400_000, allow_inf_nan=False)] | None = None

    def to_wire(self) -> dict[str, Any]:
        """Every field but absent optionals: the schema and timeout are shown even at their defaults, whole
        milliseconds as integers."""
        body = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        for key in ("timeoutMs", "rememberMs"):
            if isinstance(body.get(key), float) and body[key].is_integer():
                body[key] = int(body[key])
        return body


def escalate(
    message: str,
    *,
    requested_schema: Mapping[str, Any] | None = None,
    timeout_ms: float = DEFAULT_ESCALATION_TIMEOUT_MS,
    key: str | None = None,
    remember: RememberScope = "call",
    remember_ms: float | None = None,
    info: Mapping[str, Any] | None = None,
) -> ValidationResult:
    """A verdict asking a person to approve: `valid: false`, severity `error`, the escalation in `info`."""
    escalation = Escalation(
        message=message,
        requested_schema=dict(requested_schema) if requested_schema is not None else dict(NO_FIELDS),
        timeout_ms=timeout_ms,
        key=key,
        remember=remember,
        remember_ms=remember_ms,
    )
    detail = ValidationMessage(message=f"approval required: {message}", severity="error")
    return ValidationResult(
        valid=False,
        severity="error",
        messages=(detail,),
        info={**(info or {}), ESCALATION_INFO_KEY: escalation.to_wire()},
    )


def escalation_of(result: ValidationResult) -> Escalation | None:
    """The escalation a verdict carries, or None. Only a `valid: false` verdict can carry one (an approval
    lifts a block, nothing else); a malformed one is none, so the verdict blocks as written."""
    raw = (result.info or {}).get(ESCALATION_INFO_KEY) if not result.valid else None
    if raw is None:
        return None
    try:
        return Escalation.model_validate(raw)
    except ValidationError:
        return None
