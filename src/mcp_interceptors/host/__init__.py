"""`InterceptorHost`: author interceptors with decorators and serve them as an mcp `Extension`.

One core (`core.HostCore.invoke`) follows the host processing order of spec §2.2; the wire handlers for
`interceptors/list` / `interceptor/invoke` (`host.py`) and in-process chains (`Chain.add_local`) both go
through it, so local and remote semantics are identical. `authoring.py` holds the decorators' options.
"""

from mcp_interceptors.host.authoring import PhaseSpec, build_descriptor, hooks_for
from mcp_interceptors.host.host import InterceptorHost, parse_invoke_params
from mcp_interceptors.host.invocation import Handler, Invocation, fast_copy

__all__ = [
    "Handler",
    "InterceptorHost",
    "Invocation",
    "PhaseSpec",
    "build_descriptor",
    "fast_copy",
    "hooks_for",
    "parse_invoke_params",
]
