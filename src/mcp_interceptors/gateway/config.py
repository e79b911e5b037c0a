"""The gateway's YAML configuration: pydantic models, `${ENV}` substitution, and precise errors.

Our own config forbids unknown keys, so a typo fails closed; every error names the file, the
field path and the fix. `config_json_schema()` backs `mcp-interceptors config-schema`.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

from mcp_interceptors.gateway.routing import SEPARATOR
from mcp_interceptors.planning import Overrides
from mcp_interceptors.protocol._base import INT32_MAX, INT32_MIN
from mcp_interceptors.protocol.errors import InterceptorsError
from mcp_interceptors.protocol.events import (
    CLIENT_FEATURE_EVENTS,
    PHASES,
    SERVER_FEATURE_EVENTS,
    Phase,
    events_match,
)

Point = Literal["receive", "send"]
_ENV = re.compile(r"\$(\$?)\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class ConfigError(InterceptorsError, ValueError):
    """A configuration problem: `file`, `path` (dotted field path) and the fix are in the message."""

    def __init__(self, file: str, path: str, problem: str, fix: str) -> None:
        super().__init__(f"{file}: {path or '<root>'}: {problem} (fix: {fix})", data={"file": file, "path": path})
        self.file, self.path, self.problem, self.fix = file, path, problem, fix


def is_loopback(host: str) -> bool:
    """Whether binding `host` serves this machine only: `localhost`, or an address in 127.0.0.0/8 or ::1."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def authority(host: str, port: int) -> str:
    """`host:port` as a URL writes it: an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TransportConfig(_Model):
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
    timeout_ms: Annotated[float, Field(gt=0)] = Field(60000, description="Per-request timeout towards it.")
    max_message_bytes: Annotated[int, Field(gt=0)] = Field(
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

    prefix: Annotated[str, Field(pattern=r"^$|" + _NAME)] | None = Field(
        None,
        description="Namespace for tools and prompts (letters, digits, '.', '_', '-'); defaults to the upstream's name;"
        " '' for none. Two upstreams"
        " whose prefixes could expose the same name (one prefix twice, or `a` and `a__b`) are refused.",
    )


class RequiredConfig(_Model):
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

    name: Annotated[str, Field(pattern=_NAME)]
    required: list[RequiredConfig] = Field(default_factory=list)
    public_key: str | None = Field(
        None,
        description=(
            "The host's Ed25519 public key (base64url of the 32 raw bytes, or a file holding it or a PEM key, "
            "relative to this file): its validation results must then be signed by it, or the invocation fails."
        ),
    )


class HostConfig(_Model):
    """An in-process `InterceptorHost`, named as `module:attribute`."""

    module: Annotated[str, Field(pattern=r"^[\w.]+:[\w.]+$")]
    name: Annotated[str, Field(pattern=_NAME)] | None = None


class GuardConfig(_Model):
    """A built-in guard by name, with its `config` object."""

    name: str
    config: dict[str, Any] = Field(default_factory=dict)


class HookConfig(_Model):
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


class OverrideConfig(_Model):
    """Invoker policy for one interceptor; hooks may only narrow what it advertises (not to no event at all)."""

    mode: Literal["active", "audit"] | None = None
    fail_open: bool | None = None
    priority: int | dict[Phase, int] | None = Field(
        None, description="A 32-bit integer, or `{request: int, response: int}` (either key optional)."
    )
    timeout_ms: Annotated[float, Field(gt=0, allow_inf_nan=False)] | None = None
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


class InterceptorsConfig(_Model):
    guards: list[GuardConfig] = Field(default_factory=list)
    hosts: list[HostConfig] = Field(default_factory=list)
    servers: list[InterceptorServerConfig] = Field(default_factory=list)
    overrides: dict[str, OverrideConfig] = Field(default_factory=dict)
    config: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Per-interceptor `config` objects sent with every invocation; each is checked at load"
        " against that interceptor's configSchema.",
    )


class ChainConfig(_Model):
    deadline_ms: Annotated[float, Field(gt=0)] | None = Field(10000, description="Whole-chain deadline.")
    points: list[Point] = Field(
        default_factory=lambda: list[Point](["send"]),
        min_length=1,
        description=(
            "Where each forwarded message is governed: `send` (mutate, then validate what is dispatched), "
            "`receive` (validate raw input, then mutate), or both, in that order."
        ),
    )
    severity_rule: Literal["g5", "py"] = "g5"
    deadline_always_blocks: bool = False
    enforce_compat: bool = True
    sinks: bool = False
    include_error_details: bool = Field(False, description="Copy interceptor messages into client errors.")

    @property
    def directions(self) -> tuple[Literal["receiving", "sending"], ...]:
        ordered = [point for point in ("receive", "send") if point in self.points]
        return tuple("receiving" if point == "receive" else "sending" for point in ordered)


class ScrubConfig(_Model):
    """[OURS] What the gateway redacts with the `secrets` and `pii` guards' scanners outside any event."""

    errors: bool = Field(
        True, description="Redact upstream JSON-RPC errors (message, data) and clients' error answers."
    )
    notifications: bool = Field(
        True, description="Redact relayed notifications (log lines, progress, updates) but their identifiers."
    )
    results: bool = Field(
        True,
        description="Redact what results no event covers: completion/complete values, the results of methods"
        " passed through, an upstream's `instructions`.",
    )


class JwtConfig(_Model):
    public_key_file: str | None = Field(
        None, description="PEM public key file, relative to this file; reread when it changes."
    )
    jwks_file: str | None = Field(
        None, description="JWKS (JSON) file, relative to this file; reread when it changes (key rotation)."
    )
    issuer: str | None = None
    audience: str | None = None
    algorithms: list[str] = Field(default_factory=lambda: ["RS256", "ES256", "EdDSA"])

    @model_validator(mode="after")
    def _one_key_source(self) -> JwtConfig:
        if (self.public_key_file is None) == (self.jwks_file is None):
            raise ValueError("give exactly one of `public_key_file` or `jwks_file`")
        return self


def _sendable_token(token: str) -> str:
    # A header value has no blank at either end and only visible ASCII (RFC 9110 §5.5), so such a token (a
    # secret file's trailing newline, say) could never be sent: every client got 401, and no log said why.
    if token != token.strip() or not all(" " <= char <= "~" for char in token):
        raise ValueError(
            "a blank at an end, a control or a non-ASCII character: no client can send this token in an "
            "Authorization header (a trailing newline from a secret file?)"
        )
    return token


class AuthConfig(_Model):
    tokens: list[Annotated[str, Field(min_length=1), AfterValidator(_sendable_token)]] = Field(
        default_factory=list,
        description="Static bearer tokens (use ${ENV} for secrets): visible ASCII, no blank at either end.",
    )
    jwt: JwtConfig | None = None
    required_scopes: list[str] = Field(default_factory=list)
    resource_server_url: str | None = None

    @model_validator(mode="after")
    def _a_token_source(self) -> AuthConfig:
        # Without one, auth is off: the scopes a reader of the file would expect required are never checked.
        given = [name for name in ("required_scopes", "resource_server_url") if getattr(self, name)]
        if given and not self.enabled:
            raise ValueError(
                f"{' and '.join(given)} without `tokens` or `jwt` would serve every request unauthenticated; "
                "add `tokens` or `jwt`"
            )
        return self

    @property
    def enabled(self) -> bool:
        return bool(self.tokens) or self.jwt is not None


class HttpConfig(_Model):
    path: Annotated[str, Field(pattern=r"^/")] = Field(
        "/mcp", description="Streamable HTTP endpoint, e.g. /mcp (not /sse or /messages/ while `sse` is on)."
    )
    sse: bool = Field(True, description="Also serve the legacy SSE endpoint at /sse.")
    max_body_bytes: Annotated[int, Field(gt=0)] = 4 * 1024 * 1024
    keep_alive_s: Annotated[int, Field(gt=0)] = Field(
        75,
        description=(
            "How long an idle client connection is kept open for its next request, in seconds. Longer than "
            "common clients' own idle expiry (httpx 5 s, Node 4 s): at uvicorn's 5 s, an httpx client could "
            "send its next request on a connection the gateway was closing that moment, and lose it."
        ),
    )
    session_idle_s: Annotated[float, Field(gt=0)] = Field(
        1800,
        description="Close a handshake-era session (and its upstream sessions) after this idle time "
        "(checked every quarter of it, at most every minute).",
    )
    max_sessions: Annotated[int, Field(gt=0)] = Field(
        100,
        description=(
            "How many handshake-era sessions (each with upstream sessions of its own: a process per stdio "
            "upstream) may be open at once: a request that would open one more gets -32603 "
            "(`data.reason: too_many_sessions`)."
        ),
    )
    max_requests_in_flight: Annotated[int, Field(gt=0)] = Field(
        1000,
        description=(
            "How many requests of one session the HTTP front (Streamable HTTP and `/sse`) serves at once: one "
            "more is answered with -32603 (`data.reason: too_many_requests_in_flight`) instead of being queued. "
            "A handshake-era session is its `Mcp-Session-Id` (or `/sse` stream); 2026-07-28 requests, which "
            "carry no session, count per principal, and those without a token per client address."
        ),
    )
    allowed_hosts: list[str] = Field(default_factory=list, description="Extra Host values (DNS rebinding).")
    allowed_origins: list[str] = Field(default_factory=list)
    metrics: bool = Field(
        False,
        description="Serve Prometheus metrics at GET /metrics on the HTTP front (same auth and Host checks as "
        "the MCP endpoint).",
    )


class StdioConfig(_Model):
    max_message_bytes: Annotated[int, Field(gt=0)] = Field(
        16 * 1024 * 1024,
        description=(
            "The longest line (one message) the stdio client may send: a longer one is answered with -32600 "
            "and the gateway closes the connection."
        ),
    )
    max_requests_in_flight: Annotated[int, Field(gt=0)] = Field(
        1000,
        description=(
            "How many of the stdio client's requests the gateway serves at once: one more is answered with "
            "-32603 (`data.reason: too_many_requests_in_flight`) instead of being queued."
        ),
    )
    drain_timeout_ms: Annotated[int, Field(ge=0)] = Field(
        10_000,
        description=(
            "When the stdio client closes its input, how long the requests it sent before may still take: each "
            "gets its answer, and what has not finished by then is answered with -32000. 0 stops at once. "
            "SIGTERM and SIGINT always stop at once."
        ),
    )


class AuditConfig(_Model):
    enabled: bool = False
    store: str = Field(".audit/audit.db", description="SQLite path, or a postgresql:// URL.")
    key_file: str | None = None
    receipts: bool = Field(False, description="Return record id and signature in result _meta.")
    writer: Literal["auto", "process", "in-process"] = Field(
        "auto",
        description="Where records are hashed, signed and stored: `process`, a writer process of the gateway's "
        "own (its event loop then only encodes each decision; worth it with a core to spare); `in-process`, the "
        "gateway's event loop; `auto` (default), `process` when the gateway may use two CPUs or more (its CPU "
        "affinity and cgroup quota), else `in-process`.",
    )


class MetricsConfig(_Model):
    listen: str | None = Field(
        None,
        description="HOST:PORT of a listener serving Prometheus metrics at GET /metrics, with any front (a "
        "stdio gateway's only way to expose them). Loopback only: it has no auth.",
        examples=["127.0.0.1:9464"],
    )

    @field_validator("listen")
    @classmethod
    def _loopback_address(cls, value: str | None) -> str | None:
        if value is not None:
            host, _ = split_listen(value)
            if not is_loopback(host):
                raise ValueError(
                    f"{host!r} is not a loopback address: the metrics listener has no auth; use 127.0.0.1, "
                    "or `http.metrics: true` on an HTTP front with `auth`"
                )
        return value

    @property
    def address(self) -> tuple[str, int] | None:
        return split_listen(self.listen) if self.listen is not None else None


def split_listen(value: str) -> tuple[str, int]:
    """`HOST:PORT` (an IPv6 host in brackets) as (host, port); raises `ValueError` naming the shape."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r} is not HOST:PORT, e.g. 127.0.0.1:9464")
    return host.strip("[]"), int(port)


def _require_upstreams(schema: dict[str, Any]) -> None:
    schema["required"] = ["upstreams"]  # a default keeps pydantic's error ours; the schema tells editors


class GatewayConfig(_Model):
    """The whole `gateway.yaml`."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_require_upstreams)

    name: str = "mcp-interceptors-gateway"
    upstreams: dict[Annotated[str, Field(pattern=_NAME)], UpstreamConfig] = Field(
        default_factory=dict,
        validate_default=True,  # a file without `upstreams:` is refused too
        json_schema_extra={"minProperties": 1, "additionalProperties": False},  # a name off the pattern, too
    )
    interceptors: InterceptorsConfig = Field(default_factory=InterceptorsConfig)
    chain: ChainConfig = Field(default_factory=ChainConfig)
    expose_execute_chain: bool = False
    advertised_equals_callable: bool = True
    auth: AuthConfig = Field(default_factory=AuthConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)
    stdio: StdioConfig = Field(default_factory=StdioConfig)
    audit: AuditConfig = Field(default_factory=AuditConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    scrub: ScrubConfig = Field(default_factory=ScrubConfig)
    #: The folder relative paths resolve against (the config file's); set by `load_config`, not by users.
    base_dir: SkipJsonSchema[str | None] = None
    #: Each value `${VAR}` substitution put in the file, with the VAR it came from (see `redact`).
    _substituted: dict[str, str] = PrivateAttr(default_factory=dict)

    def redact(self, text: str) -> str:
        """`text` with every value taken from the environment written back as the `${VAR}` it came from,
        so secrets (a token in an argument or a URL) stay out of `--check` output, errors and logs."""
        return redact_values(text, self._substituted)

    @field_validator("upstreams")
    @classmethod
    def _some_upstream(cls, value: dict[str, UpstreamConfig]) -> dict[str, UpstreamConfig]:
        if not value:
            raise ValueError("at least one upstream server is needed")
        return value

    @property
    def collects_metrics(self) -> bool:
        """Whether anything exposes metrics, so the gateway keeps them (otherwise it costs nothing)."""
        return self.http.metrics or self.metrics.listen is not None

    def prefix_for(self, upstream: str) -> str:
        prefix = self.upstreams[upstream].prefix
        if prefix is None:
            return upstream if len(self.upstreams) > 1 else ""
        return prefix


# --------------------------------------------------------------------------- loading


#: Shorter values are not written back by `redact_values`: they would garble the text around them.
_MIN_REDACTED_LENGTH = 4


def redact_values(text: str, substituted: Mapping[str, str]) -> str:
    """Write each substituted value (of at least 4 characters) in `text` back as its `${VAR}`, longest first."""
    for value in sorted(substituted, key=len, reverse=True):
        if len(value) >= _MIN_REDACTED_LENGTH:
            text = text.replace(value, f"${{{substituted[value]}}}")
    return text


def substitute_env(
    value: Any, env: Mapping[str, str], file: str, path: str = "", *, used: dict[str, str] | None = None
) -> Any:
    """Replace `${VAR}` and `${VAR:-default}` (the default if VAR is unset or empty, as in the shell) in
    every string; a missing VAR without a default is a `ConfigError`.
    `$${VAR}` stands for a literal `${VAR}` (a CEL expression or pattern may need one).
    `used` collects each value taken from `env`, with its VAR (defaults are written in the file)."""
    if isinstance(value, str):

        def replace(match: re.Match[str]) -> str:
            escaped, name, default = match.group(1), match.group(2), match.group(3)
            if escaped:
                return match.group(0)[1:]
            if default is not None and not env.get(name):  # `:-` as in the shell: unset or empty
                return default
            if name in env:
                if used is not None:
                    used[env[name]] = name
                return env[name]
            fix = f"export {name}=... or write ${{{name}:-default}}"
            raise ConfigError(file, path, f"environment variable {name} is not set", fix)

        return _ENV.sub(replace, value)
    if isinstance(value, dict):
        return {k: substitute_env(v, env, file, f"{path}.{k}" if path else str(k), used=used) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute_env(v, env, file, f"{path}[{i}]", used=used) for i, v in enumerate(value)]
    return value


def parse_config(
    raw: Any,
    *,
    file: str = "<config>",
    env: Mapping[str, str] | None = None,
    base_dir: str | None = None,
    substitute: bool = True,
) -> GatewayConfig:
    """Validate a loaded YAML document into a `GatewayConfig`, raising `ConfigError` on the first problem.

    Stdio servers without a `cwd` run in `base_dir` (the config file's folder), so relative paths
    in a config mean the same thing wherever the gateway is started. `substitute=False` takes every
    string as written (a command line's arguments, which the shell has already expanded).
    """
    if not isinstance(raw, dict):
        raise ConfigError(file, "", "the document must be a mapping", "start with keys like `upstreams:`")
    used: dict[str, str] = {}
    data = substitute_env(raw, os.environ if env is None else env, file, used=used) if substitute else raw
    if base_dir is not None:
        _default_cwd(data, base_dir)
        data.setdefault("base_dir", base_dir)
    try:
        config = GatewayConfig.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        # A misspelt key first: `upstream:` for `upstreams:` also leaves `upstreams` empty, which says less.
        error = next((error for error in errors if error["type"] == "extra_forbidden"), errors[0])
        message = _INSTANCE_OF.sub("", error["msg"].removeprefix("Value error, "))
        raise ConfigError(file, _field_path(error["loc"]), redact_values(message, used), _fix_for(error)) from None
    config._substituted.update(used)
    _check_http_path(config.http, file)
    _check_prefixes(config, file)
    _check_guards(config.interceptors, file)
    return config


def _check_guards(interceptors: InterceptorsConfig, file: str) -> None:
    """A guard listed twice ran twice, its interceptors under the same names, so the
    `interceptors.overrides` and `interceptors.config` keyed by those names applied to both at once."""
    first: dict[str, int] = {}
    for index, guard in enumerate(interceptors.guards):
        earlier = first.setdefault(guard.name, index)
        if earlier != index:
            raise ConfigError(
                file,
                f"interceptors.guards[{index}].name",
                f"guard {guard.name!r} is already listed as interceptors.guards[{earlier}]: its interceptors would"
                " run twice under the same names, and overrides and config keyed by those names would apply to both",
                "list each guard once, with all its settings in one `config`",
            )


def _check_prefixes(config: GatewayConfig, file: str) -> None:
    """Two upstreams whose `<prefix>__<name>` names can be the same (one prefix, or one `a` and the other
    `a__b`): refused at load, naming both, not only once both have connected and listed a clashing name.
    An empty prefix exposes names as they are: a clash there depends on the names, so it is found at start."""
    seen: dict[str, str] = {}  # prefix -> the upstream it is of
    for name in config.upstreams:
        prefix = config.prefix_for(name)
        if not prefix:
            continue
        for other_prefix, other in seen.items():
            pairs = sorted(((prefix, name), (other_prefix, other)), key=lambda pair: len(pair[0]))
            (short, short_owner), (long, long_owner) = pairs
            if not (long + SEPARATOR).startswith(short + SEPARATOR):
                continue
            own = "" if config.upstreams[name].prefix is not None else " (its name, the default)"
            if prefix == other_prefix:
                problem = f"{prefix!r}{own} is also the prefix of upstream {other!r}"
            else:
                rest = (long + SEPARATOR)[len(short + SEPARATOR) :]
                problem = (
                    f"{prefix!r}{own} overlaps the prefix {other_prefix!r} of upstream {other!r}: a tool "
                    f"{rest + 'x'!r} of {short_owner!r} and a tool 'x' of {long_owner!r} would both be "
                    f"{long + SEPARATOR + 'x'!r}"
                )
            error = ConfigError(
                file,
                f"upstreams.{name}.prefix",
                f"{problem}, so calls could not be routed",
                f"give upstream {other!r} or {name!r} another `prefix` (neither may start with the other's "
                f"followed by {SEPARATOR!r})",
            )
            error.data["upstreams"] = [other, name]
            raise error
        seen[prefix] = name


#: pydantic's "or instance of UpstreamConfig": a class name the file's author never wrote.
_INSTANCE_OF = re.compile(r" or instance of \w+")


def _field_path(loc: tuple[int | str, ...]) -> str:
    """pydantic's `loc` written as the rest of our errors write it: `interceptors.guards[0].name`, and a
    mapping's key that is refused as `upstreams.'my notes'` (pydantic appends `[key]`)."""
    path = ""
    for index, part in enumerate(loc):
        if loc[index + 1 : index + 2] == ("[key]",):
            path += f".{part!r}" if path else repr(part)
        elif part == "[key]":
            continue
        elif isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


def _check_http_path(http: HttpConfig, file: str) -> None:
    """`http.path` must not be one of the legacy SSE endpoint's paths: Streamable HTTP would answer there,
    and `/sse` (or `/messages/`) would be gone without a word."""
    path = http.path.rstrip("/") or "/"
    if http.metrics and path == "/metrics":
        raise ConfigError(
            file, "http.path", "/metrics is where `http.metrics` serves the metrics", "choose another path, e.g. /mcp"
        )
    if http.sse and (path == "/sse" or path == "/messages" or path.startswith("/messages/")):
        raise ConfigError(
            file,
            "http.path",
            f"{http.path} is a path of the legacy SSE endpoint (/sse and /messages/), which it would hide",
            "choose another path, e.g. /mcp, or set `http.sse: false`",
        )


def load_config(path: str | Path, *, env: Mapping[str, str] | None = None) -> GatewayConfig:
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(file, "", f"cannot read the file ({exc.strerror})", "check the path") from None
    except UnicodeDecodeError as exc:
        at_line = exc.object[: exc.start].count(b"\n") + 1
        bad = f"not UTF-8 text (byte {exc.object[exc.start]:#04x} on line {at_line})"
        raise ConfigError(file, "", bad, "save the file as UTF-8 (YAML or JSON)") from None
    try:
        raw = yaml.safe_load(text)
        repeated = _repeated_key(yaml.compose(text, Loader=yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1} column {mark.column + 1}" if mark is not None else "unknown position"
        problem = getattr(exc, "problem", None)  # what the parser expected or found there
        what = f": {' '.join(problem.split())}" if problem else ""
        raise ConfigError(file, "", f"invalid YAML at {where}{what}", "fix the YAML syntax") from None
    if repeated is not None:
        path, line = repeated
        raise ConfigError(file, path, f"given twice (the second at line {line})", "keep only one of them")
    return parse_config(raw if raw is not None else {}, file=file, env=env, base_dir=str(Path(path).resolve().parent))


def _repeated_key(node: yaml.Node | None, path: str = "", seen: set[int] | None = None) -> tuple[str, int] | None:
    """The field path and line of the first key given twice in one mapping (YAML keeps the last silently)."""
    seen = set() if seen is None else seen
    if node is None or id(node) in seen:  # an alias of a node already walked
        return None
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        keys: set[str] = set()
        for key_node, value_node in node.value:
            key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else None
            where = f"{path}.{key}" if path else str(key)
            if key is not None and key in keys:
                return where, key_node.start_mark.line + 1
            if key is not None:
                keys.add(key)
            if (found := _repeated_key(value_node, where, seen)) is not None:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            if (found := _repeated_key(item, f"{path}[{index}]", seen)) is not None:
                return found
    return None


def _default_cwd(data: dict[str, Any], base_dir: str) -> None:
    servers: list[Any] = list((data.get("upstreams") or {}).values()) if isinstance(data.get("upstreams"), dict) else []
    interceptors = data.get("interceptors")
    if isinstance(interceptors, dict) and isinstance(interceptors.get("servers"), list):
        servers.extend(interceptors["servers"])
    for server in servers:
        if isinstance(server, dict) and "command" in server and "cwd" not in server:
            server["cwd"] = base_dir
        elif isinstance(server, dict) and isinstance(server.get("cwd"), str):  # relative to this file, as all paths
            server["cwd"] = str(Path(base_dir) / Path(server["cwd"]).expanduser())  # an absolute one stays


def _fix_for(error: Mapping[str, Any]) -> str:
    kind = error.get("type", "")
    if kind == "extra_forbidden":
        return "remove the key or check its spelling against `mcp-interceptors config-schema`"
    if kind == "missing":
        return "add the key"
    if kind in ("literal_error", "enum"):
        return "use one of the allowed values"
    if error.get("loc", ())[-1:] == ("url",):
        return "give the server's http(s) URL, e.g. http://127.0.0.1:8003/mcp"
    if kind == "string_too_short":
        return "give a non-empty value (is an environment variable it names set to the empty string?)"
    if kind == "string_pattern_mismatch":
        if error.get("loc", ())[-1:] == ("path",):
            return "start the path with '/', e.g. /mcp"
        if error.get("loc", ())[-1:] == ("module",):
            return "name an InterceptorHost as module:attribute, e.g. my_hosts:host"
        return "use letters, digits, '.', '_' or '-'"
    return "see `mcp-interceptors config-schema`"


def config_json_schema() -> dict[str, Any]:
    """The JSON Schema of `gateway.yaml`."""
    schema = GatewayConfig.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "mcp-interceptors gateway configuration"
    return schema
