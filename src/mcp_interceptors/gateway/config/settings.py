"""How the gateway runs: the chain, scrubbing, auth, the HTTP and stdio fronts, audit, metrics and tracing."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from mcp_interceptors.gateway.config.base import (
    MAX_DURATION_MS,
    Bytes,
    Count,
    Milliseconds,
    Model,
    is_loopback,
    split_listen,
)

Point = Literal["receive", "send"]
_WEEK_S = 7 * 86_400


class ChainConfig(Model):
    deadline_ms: Milliseconds | None = Field(10000, description="Whole-chain deadline.")
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


class ScrubConfig(Model):
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


class JwtConfig(Model):
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


class AuthConfig(Model):
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


class HttpConfig(Model):
    path: Annotated[str, Field(pattern=r"^/")] = Field(
        "/mcp", description="Streamable HTTP endpoint, e.g. /mcp (not /sse or /messages/ while `sse` is on)."
    )
    sse: bool = Field(True, description="Also serve the legacy SSE endpoint at /sse.")
    max_body_bytes: Bytes = 4 * 1024 * 1024
    keep_alive_s: Annotated[int, Field(gt=0, le=MAX_DURATION_MS // 1000)] = Field(
        75,
        description=(
            "How long an idle client connection is kept open for its next request, in seconds. Longer than "
            "common clients' own idle expiry (httpx 5 s, Node 4 s): at uvicorn's 5 s, an httpx client could "
            "send its next request on a connection the gateway was closing that moment, and lose it."
        ),
    )
    session_idle_s: Annotated[float, Field(gt=0, le=_WEEK_S, allow_inf_nan=False)] = Field(
        1800,
        description="Close a handshake-era session (and its upstream sessions) after this idle time "
        "(checked every quarter of it, at most every minute).",
    )
    max_sessions: Count = Field(
        100,
        description=(
            "How many handshake-era sessions (each with upstream sessions of its own: a process per stdio "
            "upstream) and `/sse` streams may be open at once, counted from their first request (an "
            "`initialize` alone holds one until it idles out): one more gets HTTP 503 with -32603 "
            "(`data.reason: too_many_sessions`)."
        ),
    )
    max_sessions_per_principal: Count | None = Field(
        None,
        description=(
            "How many of those sessions one principal (a token's user or client) may hold, so that one cannot "
            "lock the others out: past it, -32603 (`data.setting` names this). Unset: a quarter of "
            "`max_sessions`, at least 1. Without auth every client shares `max_sessions` alone."
        ),
    )
    header_timeout_s: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = Field(
        10,
        description=(
            "How long a client may take to send a request's headers, from its connection or the request's "
            "first byte: then the connection is closed, before any auth check (slow clients hold no socket)."
        ),
    )
    body_timeout_s: Annotated[float, Field(gt=0, le=3600, allow_inf_nan=False)] = Field(
        30,
        description=(
            "How long a client may take to send a request's body once its headers are read: then the "
            "connection is closed."
        ),
    )
    max_requests_in_flight: Count = Field(
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

    @property
    def session_share(self) -> int:
        """The sessions one principal may hold: `max_sessions_per_principal`, else a quarter of `max_sessions`."""
        if self.max_sessions_per_principal is not None:
            return min(self.max_sessions_per_principal, self.max_sessions)
        return max(1, self.max_sessions // 4)


class StdioConfig(Model):
    max_message_bytes: Bytes = Field(
        16 * 1024 * 1024,
        description=(
            "The longest line (one message) the stdio client may send: a longer one is answered with -32600 "
            "and the gateway closes the connection."
        ),
    )
    max_requests_in_flight: Count = Field(
        1000,
        description=(
            "How many of the stdio client's requests the gateway serves at once: one more is answered with "
            "-32603 (`data.reason: too_many_requests_in_flight`) instead of being queued."
        ),
    )
    drain_timeout_ms: Annotated[int, Field(ge=0, le=MAX_DURATION_MS)] = Field(
        10_000,
        description=(
            "When the stdio client closes its input, how long the requests it sent before may still take: each "
            "gets its answer, and what has not finished by then is answered with -32000. 0 stops at once. "
            "SIGTERM and SIGINT always stop at once."
        ),
    )


class AuditConfig(Model):
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


class MetricsConfig(Model):
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


class UiConfig(Model):
    """The audit trail's web view (docs/ui.md)."""

    enabled: bool = Field(False, description="Serve the live web view of the audit trail; needs `audit.enabled`.")
    path: Annotated[str, Field(pattern=r"^/[A-Za-z0-9._~/-]*[A-Za-z0-9._~-]$")] = Field(
        "/ui", description="Where an HTTP gateway (--http) serves the view, on its own port (unless `listen` is set)."
    )
    listen: str | None = Field(
        None,
        description="HOST:PORT of a listener of its own: where a stdio gateway serves the view (default "
        "127.0.0.1:8765), or an HTTP gateway instead of `path`. An address that is not loopback needs `auth`.",
        examples=["127.0.0.1:8765"],
    )

    @field_validator("listen")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None:
            split_listen(value)
        return value

    @property
    def address(self) -> tuple[str, int]:
        """Where a listener of its own serves the view."""
        return split_listen(self.listen) if self.listen is not None else ("127.0.0.1", 8765)


class StateConfig(Model):
    """What guards remember across calls, and where (docs/deploy.md): in the process, or in a Redis the
    gateway's replicas share."""

    redis_url: str | None = Field(
        None,
        description="redis:// (rediss://, unix://) URL of the Redis the replicas share; unset: in the process.",
        examples=["redis://redis:6379/0"],
    )
    key_prefix: str = Field("mcpi:", description="Prefix of every key the gateway writes in Redis.")
    max_connections: Annotated[int, Field(ge=1, le=10_000)] = Field(
        16, description="Connections each replica holds to Redis at most; a call waits for a free one."
    )
    timeout_seconds: Annotated[float, Field(gt=0, le=60)] = Field(
        1.0,
        description="How long a call waits for a connection, then for Redis's answer; past it the guard's "
        "invocation fails with `state_unavailable` (closed, unless the guard is `fail_open`).",
    )

    request_state_keys: list[str] = Field(
        default_factory=list,
        description="Keys (use ${ENV}) the `requestState` of 2026-07-28 `input_required` rounds is sealed with "
        "(HMAC-SHA256): the first seals, every one opens, so a key can be rotated in. The same on every replica; "
        "unset: a key drawn per process, and a retry must come back to the replica that sealed it. Each key is "
        "32 characters or more.",
    )
    request_state_ttl_seconds: Annotated[float, Field(gt=0, le=_WEEK_S)] = Field(
        3600.0, description="How long a sealed `requestState` is accepted: a retry later calls again."
    )

    @field_validator("request_state_keys")
    @classmethod
    def _long_keys(cls, value: list[str]) -> list[str]:
        for index, key in enumerate(value):
            if len(key.encode("utf-8")) < 32:  # checked after ${ENV} substitution, unlike a schema's minLength
                raise ValueError(f"key [{index}] is {len(key)} characters: use 32 or more (a random one from a vault)")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"{value!r} is not a redis:// (or rediss://, unix://) URL")
        return value


class StreamsConfig(Model):
    """Resumable SSE streams of handshake-era sessions (docs/deploy.md#resumable-streams)."""

    resumable: bool = Field(
        False,
        description="Give each SSE event an id and keep the events, so a client whose stream dropped gets what it "
        "missed with `Last-Event-ID`. Off: no ids, and `Last-Event-ID` is ignored.",
    )
    store: Literal["sqlite", "redis"] | None = Field(
        None,
        description="Where the events are kept: `sqlite` in the process, `redis` in `state.redis_url` (any replica "
        "can replay them). Unset: `redis` when `state.redis_url` is set, else `sqlite`.",
    )
    sqlite_path: str | None = Field(
        None, description="The SQLite file of `store: sqlite` (relative to the config file); unset: in memory."
    )
    max_events_per_stream: Count = Field(
        1000, description="Events kept per stream (a call's, or the session's GET stream); the oldest go first."
    )
    max_events_per_session: Count = Field(10_000, description="Events kept per session, all its streams together.")
    max_age_seconds: Annotated[float, Field(gt=0, le=_WEEK_S, allow_inf_nan=False)] = Field(
        600.0, description="How long an event is kept. A resume from an event no longer kept gets HTTP 400."
    )


class TelemetryConfig(Model):
    """OpenTelemetry tracing: present (and `enabled`), every governed call is traced (docs/telemetry.md)."""

    enabled: bool = Field(True, description="Trace calls; `false` keeps the section but turns tracing off.")
    exporter: Literal["otlp", "console", "none"] = Field(
        "otlp",
        description="Where spans go: `otlp` (OTLP/HTTP protobuf, the `telemetry` extra), `console` (stderr), or "
        "`none` (spans are made, so trace ids reach records, logs and upstreams, and dropped).",
    )
    endpoint: str | None = Field(
        None,
        description="The OTLP/HTTP base URL (`/v1/traces` is added); default: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, "
        "`OTEL_EXPORTER_OTLP_ENDPOINT`, else http://localhost:4318.",
        examples=["http://127.0.0.1:4318"],
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="HTTP headers of each export (use ${ENV} for secrets); default: `OTEL_EXPORTER_OTLP_HEADERS`.",
    )
    service_name: str | None = Field(
        None,
        description="The `service.name` of the spans; default: `OTEL_SERVICE_NAME`, else mcp-interceptors-gateway.",
    )
    sample_ratio: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = Field(
        None,
        description="The share of new traces kept (a client's sampled flag decides for its own); default: "
        "`OTEL_TRACES_SAMPLER`, else all.",
    )
    propagate: bool = Field(
        True, description="Send the trace context (`traceparent`, `tracestate`) to upstreams and interceptor servers."
    )
    max_queue_size: Annotated[int, Field(ge=1, le=1_000_000)] = Field(
        2048, description="Spans waiting for export; past it new spans are dropped, never a call delayed."
    )
    export_timeout_ms: Annotated[int, Field(ge=1, le=MAX_DURATION_MS)] = Field(
        2000,
        description="How long one export may take, retries included (in a thread of its own, off the event loop); "
        "at shutdown, how long all queued spans together may take to export, the rest being dropped.",
    )
