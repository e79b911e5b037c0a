"""The invoker side: list and invoke over an `mcp.Client`, and `Chain`, which plans and runs chains.

`Chain` (`chain.py`) collects entries from remote hosts (`add_server`, through `remote.RemoteSource`) and
in-process sources (`add_local`), caches plans (pure `planning`), and runs them with the `executor`.
`errors.chain_error` turns a blocked result into the requester-facing JSON-RPC error (spec §3, R70).
"""

from collections.abc import Sequence

from mcp_interceptors.invoker.chain import Chain
from mcp_interceptors.invoker.errors import chain_error, invalid_payload_error, payload_problem
from mcp_interceptors.invoker.pins import LocalHost, OverridesArg, RequiredInterceptor
from mcp_interceptors.invoker.remote import (
    DEFAULT_DISCOVERY_TIMEOUT_MS,
    DEFAULT_INVOKE_TIMEOUT_MS,
    HOST_TIMEOUT_GRACE_MS,
    Discovery,
    RemoteSource,
    UnavailableSource,
    discover,
    invocation_error,
    invoke_body,
    invoke_interceptor,
    list_interceptors,
    read_invoke_result,
)

__all__: Sequence[str] = [
    "DEFAULT_DISCOVERY_TIMEOUT_MS",
    "DEFAULT_INVOKE_TIMEOUT_MS",
    "HOST_TIMEOUT_GRACE_MS",
    "Chain",
    "Discovery",
    "LocalHost",
    "OverridesArg",
    "RemoteSource",
    "RequiredInterceptor",
    "UnavailableSource",
    "chain_error",
    "discover",
    "invalid_payload_error",
    "invocation_error",
    "invoke_body",
    "invoke_interceptor",
    "list_interceptors",
    "payload_problem",
    "read_invoke_result",
]
