"""The attributes of the gateway's spans: the MCP semantic conventions' for a request (`mcp.method.name`,
`gen_ai.tool.name`, ...) and ours for an interceptor invocation (`mcp_interceptors.interceptor.*`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from mcp_interceptors.protocol.results import MutationResult, ValidationResult

#: Where our own attributes live (the MCP semantic conventions name the rest).
NS: Final = "mcp_interceptors."
#: Methods whose `params.name` is the span's target (MCP semantic conventions: `{method} {target}`).
_TARGETED: Final = frozenset({"tools/call", "prompts/get", "interceptor/invoke"})


def target_of(method: str, params: Mapping[str, Any] | None) -> str | None:
    name = params.get("name") if params is not None and method in _TARGETED else None
    return name if isinstance(name, str) else None


def request_attributes(method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
    """The MCP semantic conventions' attributes of one request."""
    attributes: dict[str, Any] = {"mcp.method.name": method}
    target = target_of(method, params)
    if method == "tools/call":
        attributes["gen_ai.operation.name"] = "execute_tool"
        if target is not None:
            attributes["gen_ai.tool.name"] = target
    elif method == "prompts/get" and target is not None:
        attributes["gen_ai.prompt.name"] = target
    elif method == "interceptor/invoke" and target is not None:
        attributes[NS + "interceptor.name"] = target
    uri = params.get("uri") if params is not None else None
    if isinstance(uri, str) and method.startswith("resources/"):
        attributes["mcp.resource.uri"] = uri
    return attributes


def span_name(method: str, params: Mapping[str, Any] | None) -> str:
    target = target_of(method, params)
    return method if target is None else f"{method} {target}"


def interceptor_attributes(name: str, kind: str, mode: str, outcome: Any) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        NS + "interceptor.name": name,
        NS + "interceptor.type": kind,
        NS + "interceptor.mode": mode,
    }
    if isinstance(outcome, ValidationResult):
        blocks = not outcome.valid and mode == "active" and outcome.severity == "error"
        status = "valid" if outcome.valid else ("blocked" if blocks else "invalid")
        if outcome.severity is not None:
            attributes[NS + "interceptor.severity"] = outcome.severity
    elif isinstance(outcome, MutationResult):
        status = "modified" if outcome.modified else "unmodified"
    elif hasattr(outcome, "fail_open"):  # an invocation failure
        status = "timeout" if outcome.timeout else "failed"
        attributes[NS + "interceptor.fail_open"] = bool(outcome.fail_open)
        attributes["error.type"] = str(outcome.code)
    else:
        status = "ran"
    attributes[NS + "interceptor.status"] = status
    duration = getattr(outcome, "duration_ms", None)
    if isinstance(duration, int | float):
        attributes[NS + "interceptor.duration_ms"] = float(duration)
    return attributes


def reason_of(outcome: Any) -> str:
    messages: Sequence[Any] = getattr(outcome, "messages", None) or ()
    if messages:
        first = messages[0]
        return first.message if first.path is None else f"{first.message} at {first.path}"
    return str(getattr(outcome, "reason", "") or "")
