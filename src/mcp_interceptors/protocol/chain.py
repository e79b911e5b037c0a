"""SDK-only aggregate shapes (spec §2.4): `ChainExecutionParams` and `ChainExecutionResult`.

Never sent to a host as an invoke (R69); the gateway may serve them under the opt-in
`interceptor/executeChain` method.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, Strict

from mcp_interceptors.protocol._base import WireModel
from mcp_interceptors.protocol.events import Direction, Phase
from mcp_interceptors.protocol.invoke import InvocationContext

ChainStatus = Literal["success", "validation_failed", "mutation_failed", "timeout"]
AbortType = Literal["validation", "mutation", "timeout"]


class ChainExecutionParams(WireModel):
    event: Annotated[str, Field(min_length=1)]
    phase: Phase
    payload: Any
    interceptors: tuple[str, ...] | None = None
    config: dict[str, dict[str, Any]] | None = None
    #: A JSON number only, as for `interceptor/invoke`: lax parsing read `true` as 1 ms, `"50"` as 50
    #: and an overflowing `1e400` as no deadline.
    timeout_ms: Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)] | None = None
    context: InvocationContext | None = None
    direction: Direction | None = None


class ValidationSummary(WireModel):
    errors: int = 0
    warnings: int = 0
    infos: int = 0

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


class AbortedAt(WireModel):
    interceptor: str
    reason: str
    type: AbortType

    def to_wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


class InvocationFailure(WireModel):
    """SDK-only record of a failed invocation, kept out of `results` (§5.10)."""

    interceptor: str
    phase: Phase
    code: int
    reason: str
    timeout: bool = False
    mode: Literal["active", "audit"] = "active"
    fail_open: bool = False


class ChainExecutionResult(WireModel):
    """The aggregate outcome (R67). `finalPayload` is present only on success."""

    status: ChainStatus
    event: str
    phase: Phase
    results: tuple[dict[str, Any], ...] = ()
    final_payload: Any = None
    validation_summary: ValidationSummary = ValidationSummary()
    total_duration_ms: float = 0.0
    aborted_at: AbortedAt | None = None
    failures: tuple[InvocationFailure, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        body = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        body["validationSummary"] = self.validation_summary.to_wire()
        body["results"] = list(self.results)
        if self.status == "success":
            body["finalPayload"] = self.final_payload
        else:
            body.pop("finalPayload", None)  # never leak a tentative payload from a blocked run (R55)
        return body
