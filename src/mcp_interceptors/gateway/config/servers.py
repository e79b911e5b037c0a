"""Who the gateway talks to: upstream MCP servers, interceptor servers and hosts, guards, and overrides."""

from __future__ import annotations

import datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator, model_validator

from mcp_interceptors.gateway.config.base import NAME_PATTERN, Bytes, Milliseconds, Model
from mcp_interceptors.planning import Overrides
from mcp_interceptors.protocol._base import INT32_MAX, INT32_MIN
from mcp_interceptors.protocol.events import (
    CLIENT_FEATURE_EVENTS,
    PHASES,
    SERVER_FEATURE_EVENTS,
    Phase,
    events_match,
)


class TransportConfig(Model):
    """Where a server runs: a stdio `command` (with args, env, cwd), or an HTTP `url`."""

    command: Annotated[str, Field(min_length=1)] | None = Field(None, description="Executable for a stdio server.")
    # before the settings of either transport, which `_of_its_transport` checks against these two
    url: str | None = Field(None, description="Streamable HTTP (or legacy SSE) endpoint.")
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for the stdio server.")
    cwd: str | None = Field(
        None, description="Working folder of a stdio server, relative to this file; defaults to this file's folder."
    )
    transport: Literal["streamable-http", "sse"] = "streamable-http"
    headers: dict[str, str] = Field(default_factory=dict)
    bearer_token: str | None = Field(None, description="Sent as `Authorization: Bearer ...`.")
    timeout_ms: Milliseconds = Field(60000, description="Per-request timeout towards it.")
    max_message_bytes: Bytes = Field(
        64 * 1024 * 1024,
        description=(
            "The longest message the server may send. Stdio: a longer line closes the connection, what it was "
            "answering fails naming it, and it is restarted. Streamable HTTP: a longer JSON answer or SSE event "
            "fails that request (an upstream's call: -32603 naming it). Legacy SSE: a longer event ends the "
            "event stream: what it was answering fails (an upstream's calls: -32000 naming it), and it "
            "reconnects. An interceptor server's failed invocations are routed by mode and `fail_open`."
        ),
    )
    era: Literal["auto", "legacy", "2026-07-28"] = Field(
        "auto",
        description=(
            "Protocol era to speak: `auto` tries `server/discover` (2026-07-28) and falls back to `initialize` "
            "(a stdio gateway whose client made an `initialize` tries that first); `legacy` goes straight to "
            "`initialize`."
        ),
    )

    @field_validator("era", mode="before")
    @classmethod
    def _era_as_written(cls, value: Any) -> Any:
        """YAML reads an unquoted `era: 2026-07-28` as a date: take it as the era it names."""
        return value.isoformat() if isinstance(value, datetime.date) else value

    @field_validator("url")
    @classmethod
    def _reachable_url(cls, url: str | None) -> str | None:
        """A URL the gateway can connect to: http(s), a host, and a port (if any) between 1 and 65535."""
        if url is None:
            return url
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"`url` must be an http(s) URL, got {url!r}")
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"`url` {url!r} is not a valid URL ({exc})") from None
        if not parts.hostname:
            raise ValueError(f"`url` {url!r} names no host, e.g. http://127.0.0.1:8003/mcp")
        if port == 0:
            raise ValueError(f"`url` {url!r}: the port must be between 1 and 65535")
        return url

    @field_validator("args", "env", "cwd", "headers", "bearer_token", "transport")
    @classmethod
    def _of_its_transport(cls, value: Any, info: ValidationInfo) -> Any:
        """Settings of the other transport would be ignored without a word: refuse them, at their field."""
        stdio_only = info.field_name in ("args", "env", "cwd")
        if info.data.get("url" if stdio_only else "command") is not None:
            owner = "a stdio `command`" if stdio_only else "a `url` (HTTP) server"
            used = "a `url`" if stdio_only else "a `command`"
            raise ValueError(f"`{info.field_name}` only applies to {owner}, and this server has {used}; remove it")
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> TransportConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of `command` (stdio) or `url` (HTTP)")
        return self

    @property
    def kind(self) -> Literal["stdio", "streamable-http", "sse"]:
        return "stdio" if self.command is not None else self.transport


class UpstreamConfig(TransportConfig):
    """An MCP server the gateway fronts. Tools and prompts appear as `<prefix>__<name>`."""

    prefix: Annotated[str, Field(pattern=r"^$|" + NAME_PATTERN)] | None = Field(
        None,
        description="Namespace for tools and prompts (letters, digits, '.', '_', '-'); defaults to the upstream's name;"
        " '' for none. Two upstreams"
        " whose prefixes could expose the same name (one prefix twice, or `a` and `a__b`) are refused.",
    )


class RequiredConfig(Model):
    """An interceptor local policy requires: if its host is unavailable, the events it guards fail closed."""

    name: str
    type: Literal["validation", "mutation"]
    events: Annotated[list[str], Field(min_length=1)]
    phase: Literal["request", "response", "both"] = "request"
    mode: Literal["active", "audit"] = "active"
    fail_open: bool = False

    @field_validator("events")
    @classmethod
    def _governed_events(cls, value: list[str]) -> list[str]:
        """A pin on an event the gateway never governs (a typo such as `tools/cal`) would guard nothing:
        the events it was meant for would go through while its host is down."""
        governed = (*SERVER_FEATURE_EVENTS, *CLIENT_FEATURE_EVENTS)
        unknown = [event for event in value if not any(events_match([event], known) for known in governed)]
        if unknown:
            raise ValueError(
                f"{', '.join(map(repr, unknown))} is no event the gateway governs; use one of: {', '.join(governed)}"
                " (or `*`)"
            )
        return value


class InterceptorServerConfig(TransportConfig):
    """A remote interceptor host, discovered with `interceptors/list`."""

    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    required: list[RequiredConfig] = Field(default_factory=list)
    public_key: str | None = Field(
        None,
        description=(
            "The host's Ed25519 public key (base64url of the 32 raw bytes, or a file holding it or a PEM key, "
            "relative to this file): its validation results must then be signed by it, or the invocation fails."
        ),
    )


class HostConfig(Model):
    """An in-process `InterceptorHost`, named as `module:attribute`."""

    module: Annotated[str, Field(pattern=r"^[\w.]+:[\w.]+$")]
    name: Annotated[str, Field(pattern=NAME_PATTERN)] | None = None


class GuardConfig(Model):
    """A built-in guard by name, with its `config` object."""

    name: str
    config: dict[str, Any] = Field(default_factory=dict)


class HookConfig(Model):
    events: list[str]
    phase: Literal["request", "response", "both"]

    @field_validator("events")
    @classmethod
    def _some_event(cls, value: list[str]) -> list[str]:
        """A hook with no event narrows its interceptor to nothing on that phase: it would never run there,
        and the policy it stood for would be off without a word."""
        if not value:
            raise ValueError(
                "an empty `events` list narrows the interceptor to no event: it would never run on this phase;"
                " list the events it should run on (to observe without blocking, use `mode: audit`)"
            )
        return value


class OverrideConfig(Model):
    """Invoker policy for one interceptor; hooks may only narrow what it advertises (not to no event at all)."""

    mode: Literal["active", "audit"] | None = None
    fail_open: bool | None = None
    priority: int | dict[Phase, int] | None = Field(
        None, description="A 32-bit integer, or `{request: int, response: int}` (either key optional)."
    )
    timeout_ms: Milliseconds | None = None
    hooks: list[HookConfig] | None = None

    @field_validator("hooks")
    @classmethod
    def _some_hook(cls, value: list[HookConfig] | None) -> list[HookConfig] | None:
        """`hooks: []` narrows the interceptor to nothing: it would never run, without a word."""
        if value is not None and not value:
            raise ValueError(
                "an empty `hooks` list narrows the interceptor to no event: it would never run; list the events"
                " and phases it should run on, or leave `hooks` out (to observe without blocking, use `mode: audit`)"
            )
        return value

    @field_validator("priority", mode="before")
    @classmethod
    def _int32_or_per_phase(cls, value: Any) -> Any:
        """Said here, at `...priority`: pydantic would name a branch of the union (`priority.int`), and a
        value outside int32 (or `true`) would pass until the chain is built, without file or field."""

        def int32(item: Any) -> bool:
            return isinstance(item, int) and not isinstance(item, bool) and INT32_MIN <= item <= INT32_MAX

        if value is None or int32(value):
            return value
        if isinstance(value, dict) and all(key in PHASES and int32(item) for key, item in value.items()):
            return value
        raise ValueError(
            f"{value!r} is no priority: give an integer from {INT32_MIN} to {INT32_MAX}, or a mapping of "
            "`request` and/or `response` to one, e.g. {request: -100, response: 100}"
        )

    def to_overrides(self) -> Overrides:
        raw = {
            "mode": self.mode,
            "failOpen": self.fail_open,
            "priorityHint": self.priority,
            "timeoutMs": self.timeout_ms,
            "hooks": [hook.model_dump() for hook in self.hooks] if self.hooks is not None else None,
        }
        return Overrides.from_mapping({key: value for key, value in raw.items() if value is not None})


class InterceptorsConfig(Model):
    guards: list[GuardConfig] = Field(default_factory=list)
    hosts: list[HostConfig] = Field(default_factory=list)
    servers: list[InterceptorServerConfig] = Field(default_factory=list)
    overrides: dict[str, OverrideConfig] = Field(default_factory=dict)
    config: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Per-interceptor `config` objects sent with every invocation; each is checked at load"
        " against that interceptor's configSchema.",
    )
