"""[OURS] The operator-level scrub: what no interceptor event carries (JSON-RPC errors, notifications, the
results of `completion/complete` and of methods passed through, an upstream's `instructions`), redacted with
the configured `secrets` and `pii` guards' own scanners and placeholders.

The spec intercepts neither errors nor notifications (§1.2), so this is no event and no chain: the gateway
(`session`, `upstream`) calls it where it relays those messages. Below it, `guards._scanning` does the work.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any
from weakref import WeakSet

from mcp import MCPError

if TYPE_CHECKING:
    from mcp_interceptors.gateway.config import GatewayConfig
    from mcp_interceptors.guards._scanning import TextScanner

RESOURCE_UPDATED_METHOD = "notifications/resources/updated"
#: Top-level notification params relayed verbatim: ids the client matches against its own (a progress token,
#: a request or elicitation id), never text an upstream wrote.
_IDENTIFIERS = ("progressToken", "requestId", "elicitationId")


@dataclass(frozen=True, slots=True)
class Scrubber:
    """The scanners (with their placeholders) of the chain's `secrets` and `pii` guards, and what to scrub."""

    scanners: tuple[tuple[TextScanner, str], ...]
    errors: bool = True
    notifications: bool = True
    results: bool = True
    #: Errors already scrubbed (or found clean): an error crossing several handlers is scanned once.
    _clean: WeakSet[MCPError] = field(default_factory=WeakSet, init=False, repr=False, compare=False)

    @classmethod
    def from_config(cls, config: GatewayConfig) -> Scrubber | None:
        """None when nothing is to be scrubbed: no `secrets` or `pii` guard, or `scrub` turned off."""
        scrub = config.scrub
        if not (scrub.errors or scrub.notifications or scrub.results):
            return None
        found: list[tuple[TextScanner, str]] = []
        for guard in config.interceptors.guards:
            override = config.interceptors.config.get(guard.name)
            if guard.name == "secrets":
                from mcp_interceptors.guards.secrets import scrub_scanner

                found.append(scrub_scanner(guard.config, override))
            elif guard.name == "pii":
                from mcp_interceptors.guards.pii import scrub_scanners

                found.extend(scrub_scanners(guard.config, override))
        if not found:
            return None
        # Only strings change: a number stays a number (the pii scanner reads integers as digits).
        scanners = tuple((replace(scanner, integers=False), placeholder) for scanner, placeholder in found)
        return cls(scanners, scrub.errors, scrub.notifications, scrub.results)

    def value(self, value: Any) -> Any:
        """`value` with every finding in its strings replaced; the same object when nothing was found."""
        # Imported here: a gateway without these guards never loads the scanners (~90 ms of imports).
        from mcp_interceptors.guards._scanning import redact_payload

        for scanner, placeholder in self.scanners:
            value, _, _ = redact_payload(value, scanner, placeholder)
        return value

    def error(self, exc: MCPError) -> MCPError:
        """`exc` with its `message` and `data` redacted (code, type and the shape of `data` kept); `exc`
        itself when there is nothing to redact or errors are not scrubbed."""
        if not self.errors or exc in self._clean:
            return exc
        message, data = self.value(exc.error.message), self.value(exc.error.data)
        scrubbed = exc
        if message is not exc.error.message or data is not exc.error.data:
            scrubbed = type(exc)(exc.error.code, message, data)
        self._clean.add(scrubbed)
        return scrubbed

    def notification(self, method: str, params: Mapping[str, Any] | None) -> Any:
        """A relayed notification's `params` with every string redacted but its identifiers, and but the
        `uri` of a resource update: the client reads the resource by it (a `resources/read` the chain governs),
        so a redacted one would name nothing."""
        if not self.notifications or params is None:
            return params
        kept = (*_IDENTIFIERS, "uri") if method == RESOURCE_UPDATED_METHOD else _IDENTIFIERS
        text = {key: value for key, value in params.items() if key not in kept}
        scrubbed = self.value(text)
        if scrubbed is text:
            return params
        return {**params, **scrubbed}

    def result(self, result: Any) -> Any:
        """What a result no event covers carries (`completion/complete`'s, a method's passed through, an
        upstream's `instructions`), its strings redacted."""
        return self.value(result) if self.results else result

    def progress_relay(self, relay: Any) -> Any:
        """A progress relay (`progress, total, message`) passing the message on scrubbed."""
        if not self.notifications:
            return relay

        async def scrubbed(progress: float, total: float | None, message: str | None) -> None:
            await relay(progress, total, message if message is None else self.value(message))

        return scrubbed
