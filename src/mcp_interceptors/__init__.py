"""mcp-interceptors: the SDK and gateway for the MCP Interceptors extension (SEP-2624).

The public surface: author interceptors (`InterceptorHost`), call them (`list_interceptors`,
`invoke_interceptor`), run chains (`Chain`, `InterceptingClient`), and the wire models.

Names load on first use (PEP 562): `import mcp_interceptors` imports neither `mcp` nor a submodule, so
the CLI and tools that only need one corner of the package start fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and IDEs read; at run time `__getattr__` imports each on first use
    from mcp_interceptors.client import InterceptingClient
    from mcp_interceptors.executor import Call, ChainResult, Source
    from mcp_interceptors.host import InterceptorHost, Invocation
    from mcp_interceptors.invoker import (
        Chain,
        Discovery,
        RemoteSource,
        RequiredInterceptor,
        chain_error,
        discover,
        invoke_interceptor,
        list_interceptors,
    )
    from mcp_interceptors.planning import Overrides, Plan, direction_for
    from mcp_interceptors.protocol.chain import (
        AbortedAt,
        ChainExecutionParams,
        ChainExecutionResult,
        InvocationFailure,
        ValidationSummary,
    )
    from mcp_interceptors.protocol.descriptors import (
        Compat,
        HookEntry,
        InterceptorDescriptor,
        PhasePriority,
        parse_descriptors,
        resolve_priority,
    )
    from mcp_interceptors.protocol.errors import (
        ChainParamsError,
        DiscoveryError,
        HookMismatchError,
        HostConnectionError,
        InterceptorExecutionError,
        InterceptorNotFoundError,
        InterceptorsError,
        InterceptorTimeoutError,
        InvalidParamsError,
        MalformedResultError,
        WideningOverrideError,
    )
    from mcp_interceptors.protocol.escalation import Escalation, escalate, escalation_of
    from mcp_interceptors.protocol.events import EXTENSION_ID
    from mcp_interceptors.protocol.invoke import InvocationContext, InvokeParams, Principal
    from mcp_interceptors.protocol.results import (
        MutationResult,
        SinkResult,
        Suggestion,
        ValidationMessage,
        ValidationResult,
        parse_result,
    )

__version__ = "0.1.0"

#: module -> the public names it defines
_HOMES: dict[str, tuple[str, ...]] = {
    "mcp_interceptors.client": ("InterceptingClient",),
    "mcp_interceptors.executor": ("Call", "ChainResult", "Source"),
    "mcp_interceptors.host": ("InterceptorHost", "Invocation"),
    "mcp_interceptors.invoker": (
        "Chain",
        "Discovery",
        "RemoteSource",
        "RequiredInterceptor",
        "chain_error",
        "discover",
        "invoke_interceptor",
        "list_interceptors",
    ),
    "mcp_interceptors.planning": ("Overrides", "Plan", "direction_for"),
    "mcp_interceptors.protocol.chain": (
        "AbortedAt",
        "ChainExecutionParams",
        "ChainExecutionResult",
        "InvocationFailure",
        "ValidationSummary",
    ),
    "mcp_interceptors.protocol.descriptors": (
        "Compat",
        "HookEntry",
        "InterceptorDescriptor",
        "PhasePriority",
        "parse_descriptors",
        "resolve_priority",
    ),
    "mcp_interceptors.protocol.errors": (
        "ChainParamsError",
        "DiscoveryError",
        "HookMismatchError",
        "HostConnectionError",
        "InterceptorExecutionError",
        "InterceptorNotFoundError",
        "InterceptorsError",
        "InterceptorTimeoutError",
        "InvalidParamsError",
        "MalformedResultError",
        "WideningOverrideError",
    ),
    "mcp_interceptors.protocol.escalation": ("Escalation", "escalate", "escalation_of"),
    "mcp_interceptors.protocol.events": ("EXTENSION_ID",),
    "mcp_interceptors.protocol.invoke": ("InvocationContext", "InvokeParams", "Principal"),
    "mcp_interceptors.protocol.results": (
        "MutationResult",
        "SinkResult",
        "Suggestion",
        "ValidationMessage",
        "ValidationResult",
        "parse_result",
    ),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}
#: the subpackages `import mcp_interceptors` used to load, still reachable as attributes of the package
_SUBMODULES = frozenset({"client", "executor", "host", "invoker", "planning", "protocol"})

__all__ = [
    "EXTENSION_ID",
    "AbortedAt",
    "Call",
    "Chain",
    "ChainExecutionParams",
    "ChainExecutionResult",
    "ChainParamsError",
    "ChainResult",
    "Compat",
    "Discovery",
    "DiscoveryError",
    "Escalation",
    "HookEntry",
    "HookMismatchError",
    "HostConnectionError",
    "InterceptingClient",
    "InterceptorDescriptor",
    "InterceptorExecutionError",
    "InterceptorHost",
    "InterceptorNotFoundError",
    "InterceptorTimeoutError",
    "InterceptorsError",
    "InvalidParamsError",
    "Invocation",
    "InvocationContext",
    "InvocationFailure",
    "InvokeParams",
    "MalformedResultError",
    "MutationResult",
    "Overrides",
    "PhasePriority",
    "Plan",
    "Principal",
    "RemoteSource",
    "RequiredInterceptor",
    "SinkResult",
    "Source",
    "Suggestion",
    "ValidationMessage",
    "ValidationResult",
    "ValidationSummary",
    "WideningOverrideError",
    "__version__",
    "chain_error",
    "direction_for",
    "discover",
    "escalate",
    "escalation_of",
    "invoke_interceptor",
    "list_interceptors",
    "parse_descriptors",
    "parse_result",
    "resolve_priority",
]


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use, and keep the name here so the next lookup is plain."""
    module = _HOME_OF.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
