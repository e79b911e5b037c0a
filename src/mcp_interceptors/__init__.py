"""mcp-interceptors: the SDK and gateway for the MCP Interceptors extension (SEP-2624).

The public surface: author interceptors (`InterceptorHost`), call them (`list_interceptors`,
`invoke_interceptor`), run chains (`Chain`, `InterceptingClient`), and the wire models.
"""

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
