"""What a `Chain` is given besides its hosts' listings: local hosts, pinned (`required`) interceptors that fail
closed when their host cannot provide them (R66), and overrides keyed by interceptor name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from mcp import MCPError

from mcp_interceptors.executor import Call
from mcp_interceptors.planning import (
    Overrides,
    check_overrides,
)
from mcp_interceptors.protocol.descriptors import (
    HookEntry,
    InterceptorDescriptor,
)
from mcp_interceptors.protocol.errors import (
    InterceptorsError,
    WideningOverrideError,
)
from mcp_interceptors.protocol.results import InterceptorResult


class LocalHost(Protocol):
    """What `Chain.add_local` needs: descriptors to plan with, and in-process invocation."""

    name: str

    @property
    def descriptors(self) -> list[InterceptorDescriptor]: ...

    async def invoke(self, call: Call) -> InterceptorResult: ...


@dataclass(frozen=True, slots=True)
class RequiredInterceptor:
    """An interceptor local policy requires: if its host cannot provide it, the events it guards fail."""

    name: str
    type: Literal["validation", "mutation"]
    hooks: tuple[HookEntry, ...]
    mode: Literal["active", "audit"] = "active"
    fail_open: bool = False

    def placeholder(self) -> InterceptorDescriptor:
        return InterceptorDescriptor(
            name=self.name, type=self.type, hooks=self.hooks, mode=self.mode, fail_open=self.fail_open
        )


OverridesArg = Mapping[str, Overrides | Mapping[str, Any]] | None


def unmet_pin(pin: RequiredInterceptor, descriptor: InterceptorDescriptor) -> str | None:
    """Why a listed descriptor does not provide what `pin` requires (another type, hooks that no longer
    cover the pinned events and phases), or None: a host must not unpin an interceptor by renaming its hooks."""
    if descriptor.type != pin.type:
        return f"advertised as a {descriptor.type} interceptor, pinned as a {pin.type} one"
    try:
        check_overrides(descriptor, Overrides(hooks=pin.hooks))
    except WideningOverrideError:
        advertised = [entry.to_wire() for entry in descriptor.hooks]
        return f"its advertised hooks {advertised} do not cover the pinned {[e.to_wire() for e in pin.hooks]}"
    return None


def discovery_failure(host_name: str, exc: Exception) -> dict[str, Any]:
    """`DiscoveryError.data` for a failed `interceptors/list`: the host, and the error it gave (its code)."""
    if isinstance(exc, InterceptorsError):
        return {"reason": str(exc), **exc.data, "host": host_name}
    if isinstance(exc, MCPError):
        return {"host": host_name, "reason": exc.error.message, "code": exc.error.code}
    return {"host": host_name, "reason": f"{type(exc).__name__}: {exc}"}


def resolve_overrides(overrides: OverridesArg, known: set[str], host: str) -> dict[str, Overrides]:
    resolved: dict[str, Overrides] = {}
    for interceptor, value in (overrides or {}).items():
        if interceptor not in known:
            raise ValueError(f"override names {interceptor!r}, which host {host!r} does not advertise")
        resolved[interceptor] = value if isinstance(value, Overrides) else Overrides.from_mapping(value)
    return resolved
