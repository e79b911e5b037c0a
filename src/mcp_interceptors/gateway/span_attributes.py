"""The attributes of the gateway's request spans: the MCP semantic conventions' (`mcp.method.name`,
`gen_ai.tool.name`, ...); a chain's and an interceptor invocation's are `invoker/tracing.py`'s."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from mcp_interceptors.invoker.tracing import NS

#: Methods whose `params.name` is the span's target (MCP semantic conventions: `{method} {target}`).
_TARGETED: Final = frozenset({"tools/call", "prompts/get", "interceptor/invoke"})


def target_of(method: str, params: Mapping[str, Any] | None) -> str | None:
    name = params.get("name") if params is not None and method in _TARGETED else None
    return name if isinstance(name, str) else None


def request_span(method: str, params: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """The name of one request's span (`{method} {target}`) and its MCP semantic conventions' attributes."""
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
    return (method if target is None else f"{method} {target}"), attributes
