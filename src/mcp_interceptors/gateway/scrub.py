"""[OURS] The operator-level scrub: what no interceptor event carries (JSON-RPC errors, log lines, progress
messages), redacted with the configured `secrets` and `pii` guards' own scanners and placeholders.

The spec intercepts neither errors nor notifications (§1.2), so this is no event and no chain: the gateway
(`session`, `upstream`) calls it where it relays those messages. Below it, `guards._scanning` does the work.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from mcp import MCPError

if TYPE_CHECKING:
    from mcp_interceptors.gateway.config import GatewayConfig
    from mcp_interceptors.guards._scanning import TextScanner

#: Notifications whose text is scrubbed: log lines (all of `params`) and progress (its `message`).
LOG_METHOD = "notifications/message"
PROGRESS_METHOD = "notifications/progress"


@dataclass(frozen=True, slots=True)
class Scrubber:
    """The scanners (with their placeholders) of the chain's `secrets` and `pii` guards, and what to scrub."""

    scanners: tuple[tuple[TextScanner, str], ...]
    errors: bool = True
    notifications: bool = True

    @classmethod
    def from_config(cls, config: GatewayConfig) -> Scrubber | None:
        """None when nothing is to be scrubbed: no `secrets` or `pii` guard, or `scrub` turned off."""
        if not (config.scrub.errors or config.scrub.notifications):
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
        return cls(scanners, config.scrub.errors, config.scrub.notifications)

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
        if not self.errors:
            return exc
        message, data = self.value(exc.error.message), self.value(exc.error.data)
        if message is exc.error.message and data is exc.error.data:
            return exc
        return type(exc)(exc.error.code, message, data)

    def notification(self, method: str, params: Mapping[str, Any] | None) -> Any:
        """A log line's `params` redacted (its `data` and `logger`), or a progress notification's `message`."""
        if not self.notifications or params is None:
            return params
        if method == LOG_METHOD:
            return self.value(params)
        if method == PROGRESS_METHOD and isinstance(params.get("message"), str):
            message = self.value(params["message"])
            return params if message is params["message"] else {**params, "message": message}
        return params

    def progress_relay(self, relay: Any) -> Any:
        """A progress relay (`progress, total, message`) passing the message on scrubbed."""
        if not self.notifications:
            return relay

        async def scrubbed(progress: float, total: float | None, message: str | None) -> None:
            await relay(progress, total, message if message is None else self.value(message))

        return scrubbed
