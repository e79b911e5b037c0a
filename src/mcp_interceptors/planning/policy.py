"""PURE: who runs an event's passes in which order (§5.1), and the invoker's policy for one interceptor (§5.2 step 3).

`Overrides` is local policy, never sent on the wire: it fails closed on a typo, and may only narrow an
interceptor's advertised hooks (R62). `policy_for` resolves override, author default and spec default.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp_interceptors.protocol._base import INT32_MAX, INT32_MIN
from mcp_interceptors.protocol.descriptors import (
    HookEntry,
    InterceptorDescriptor,
    Mode,
    PhasePriority,
    PriorityHint,
    resolve_priority,
    unknown_priority_keys,
)
from mcp_interceptors.protocol.errors import WideningOverrideError
from mcp_interceptors.protocol.events import Direction, Phase, Role, initiator_for, pattern_covers
from mcp_interceptors.protocol.invoke import is_timeout_ms


def direction_for(role: Role, event: str, phase: Phase) -> Direction:
    """The pass order for an invoker in `role` at `(event, phase)`, from who initiates the event (R40).

    A client sends requests of client-initiated events and receives their responses; the roles
    swap for server-initiated events (sampling, elicitation, roots). Custom events and
    `llm/completion` are initiated by the invoker itself, whatever its role.
    """
    initiator = initiator_for(event)
    sends_request = initiator == "invoker" or initiator == role
    if phase == "request":
        return "sending" if sends_request else "receiving"
    return "receiving" if sends_request else "sending"


# --------------------------------------------------------------------------- policy (§5.2 step 3)


@dataclass(frozen=True, slots=True)
class Overrides:
    """Invoker-local policy for one interceptor (PR #24); never sent on the wire."""

    mode: Mode | None = None
    fail_open: bool | None = None
    priority: PriorityHint | None = None
    timeout_ms: float | None = None
    hooks: tuple[HookEntry, ...] | None = None

    def __post_init__(self) -> None:
        # Local policy fails closed on a typo: a misspelt mode must not silently make an interceptor audit-only.
        if self.mode not in (None, "active", "audit"):
            raise ValueError(f"override mode must be 'active' or 'audit', got {self.mode!r}")
        if self.fail_open is not None and not isinstance(self.fail_open, bool):
            raise ValueError(f"override failOpen must be true or false, got {self.fail_open!r}")
        timeout = self.timeout_ms
        if timeout is not None and not is_timeout_ms(timeout):
            raise ValueError(f"override timeoutMs must be a finite number of milliseconds > 0, got {timeout!r}")
        priority = self.priority
        if priority is not None and (
            isinstance(priority, bool)
            or not isinstance(priority, int | PhasePriority)
            or (isinstance(priority, int) and not INT32_MIN <= priority <= INT32_MAX)
        ):
            raise ValueError(f"override priority must be a 32-bit integer or {{request?, response?}}, got {priority!r}")

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> Overrides:
        """Build from a camelCase or snake_case mapping; `phase: both` in hooks is accepted as sugar.

        Unknown keys and ill-typed values raise `ValueError` naming them (local config fails closed).
        """
        unknown = sorted(set(raw) - _OVERRIDE_KEYS)
        if unknown:
            raise ValueError(f"unknown override key(s) {unknown}; use {sorted(_OVERRIDE_KEYS)}")
        hooks_raw = raw.get("hooks")
        hooks = None
        if hooks_raw is not None:
            probe = InterceptorDescriptor.model_validate({"name": "-", "type": "validation", "hooks": hooks_raw})
            hooks = probe.hooks
        priority = raw.get("priority", raw.get("priorityHint", raw.get("priority_hint")))
        if isinstance(priority, Mapping):
            unknown_keys = unknown_priority_keys(priority)
            if unknown_keys:
                raise ValueError(f"override priority keys must be 'request' and/or 'response', got {unknown_keys}")
            probe = InterceptorDescriptor.model_validate(
                {"name": "-", "type": "mutation", "hooks": [], "priorityHint": dict(priority)}
            )
            priority = probe.priority_hint
        mode = raw.get("mode")
        return cls(
            mode="active" if mode == "enforce" else mode,
            fail_open=raw.get("failOpen", raw.get("fail_open")),
            priority=priority,
            timeout_ms=raw.get("timeoutMs", raw.get("timeout_ms")),
            hooks=hooks,
        )


_OVERRIDE_KEYS = frozenset(
    {"mode", "failOpen", "fail_open", "priority", "priorityHint", "priority_hint", "timeoutMs", "timeout_ms", "hooks"}
)


def check_overrides(descriptor: InterceptorDescriptor, overrides: Overrides | None) -> None:
    """Reject a hook override that widens what the interceptor advertised (R62)."""
    if overrides is None or overrides.hooks is None:
        return
    for entry in overrides.hooks:
        declared = [d for d in descriptor.hooks if d.phase == entry.phase]
        for event in entry.events:
            if not any(pattern_covers(pattern, event) for d in declared for pattern in d.events):
                raise WideningOverrideError(
                    f"Override for {descriptor.name!r} adds ({event}, {entry.phase}), which it does not advertise; "
                    "hook overrides may only narrow the advertised hooks",
                    data={"interceptor": descriptor.name, "event": event, "phase": entry.phase},
                )


@dataclass(frozen=True, slots=True)
class Policy:
    """Effective policy for one interceptor at one phase: override, else author default, else spec default."""

    mode: Mode
    fail_open: bool
    priority: int
    timeout_ms: float | None


def policy_for(descriptor: InterceptorDescriptor, overrides: Overrides | None, phase: Phase) -> Policy:
    o = overrides or Overrides()
    return Policy(
        mode=o.mode if o.mode is not None else descriptor.mode,
        fail_open=o.fail_open if o.fail_open is not None else descriptor.fail_open,
        priority=resolve_priority(descriptor.priority_hint, phase, o.priority),
        timeout_ms=o.timeout_ms,
    )
