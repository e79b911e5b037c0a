"""The whole `gateway.yaml` as one model: `GatewayConfig`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr, ValidationInfo, field_validator
from pydantic.json_schema import SkipJsonSchema

from mcp_interceptors.gateway.config.base import NAME_PATTERN, Model, is_loopback, redact_values
from mcp_interceptors.gateway.config.servers import InterceptorsConfig, UpstreamConfig
from mcp_interceptors.gateway.config.settings import (
    AuditConfig,
    AuthConfig,
    ChainConfig,
    HttpConfig,
    MetricsConfig,
    ScrubConfig,
    StateConfig,
    StdioConfig,
    StreamsConfig,
    TelemetryConfig,
    UiConfig,
)


def _require_upstreams(schema: dict[str, Any]) -> None:
    schema["required"] = ["upstreams"]  # a default keeps pydantic's error ours; the schema tells editors


class GatewayConfig(Model):
    """The whole `gateway.yaml`."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_require_upstreams)

    name: str = "mcp-interceptors-gateway"
    upstreams: dict[Annotated[str, Field(pattern=NAME_PATTERN)], UpstreamConfig] = Field(
        default_factory=dict,
        validate_default=True,  # a file without `upstreams:` is refused too
        json_schema_extra={"minProperties": 1, "additionalProperties": False},  # a name off the pattern, too
    )
    interceptors: InterceptorsConfig = Field(default_factory=InterceptorsConfig)
    chain: ChainConfig = Field(default_factory=ChainConfig)
    expose_execute_chain: bool = False
    client_interceptor_methods: Literal["scoped", "shared", "off"] = Field(
        "scoped",
        description=(
            "What clients' `interceptors/list`, `interceptor/invoke` and `interceptor/executeChain` run against. "
            "`scoped`: built-in guards of their own (the gateway's guard state is never touched; interceptors "
            "of `interceptors.hosts` and remote servers refuse them). `shared`: the gateway's own instances "
            "(trusted clients only: a client can change what the guards learned). `off`: not served (-32601)."
        ),
    )
    advertised_equals_callable: bool = True
    auth: AuthConfig = Field(default_factory=AuthConfig)
    http: HttpConfig = Field(default_factory=HttpConfig)
    stdio: StdioConfig = Field(default_factory=StdioConfig)
    audit: AuditConfig = Field(default_factory=AuditConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    scrub: ScrubConfig = Field(default_factory=ScrubConfig)
    ui: UiConfig = Field(default_factory=UiConfig)
    state: StateConfig = Field(default_factory=StateConfig)
    streams: StreamsConfig = Field(default_factory=StreamsConfig)
    telemetry: TelemetryConfig | None = Field(
        None, description="OpenTelemetry tracing (off without it, unless `OTEL_*` variables ask for it)."
    )
    #: The folder relative paths resolve against (the config file's); set by `load_config`, not by users.
    base_dir: SkipJsonSchema[str | None] = None
    #: Each value `${VAR}` substitution put in the file, with the VAR it came from (see `redact`).
    _substituted: dict[str, str] = PrivateAttr(default_factory=dict)

    def redact(self, text: str) -> str:
        """`text` with every value taken from the environment written back as the `${VAR}` it came from,
        so secrets (a token in an argument or a URL) stay out of `--check` output, errors and logs."""
        return redact_values(text, self._substituted)

    def with_policy_of(self, other: GatewayConfig) -> GatewayConfig:
        """This config with `other`'s `interceptors` and `chain` sections: what a config reload puts in force."""
        merged = self.model_copy(update={"interceptors": other.interceptors, "chain": other.chain})
        merged._substituted = {**self._substituted, **other._substituted}
        return merged

    @field_validator("upstreams")
    @classmethod
    def _some_upstream(cls, value: dict[str, UpstreamConfig]) -> dict[str, UpstreamConfig]:
        if not value:
            raise ValueError("at least one upstream server is needed")
        return value

    @field_validator("ui")
    @classmethod
    def _ui_reads_an_audit_store(cls, value: UiConfig, info: ValidationInfo) -> UiConfig:
        audit, auth, http = (info.data.get(name) for name in ("audit", "auth", "http"))
        if not value.enabled:
            return value
        if isinstance(audit, AuditConfig) and not audit.enabled:
            raise ValueError("the web view reads the audit trail: set `audit.enabled: true` too")
        if isinstance(auth, AuthConfig) and not auth.enabled and not is_loopback(value.address[0]):
            raise ValueError(f"{value.listen!r} is not a loopback address: serving the view there needs `auth`")
        if (
            isinstance(http, HttpConfig)
            and value.listen is None
            and value.path in (http.path, "/sse", "/metrics", "/healthz")
        ):
            raise ValueError(f"`ui.path` {value.path!r} is taken by the HTTP front; choose another (default /ui)")
        return value

    @field_validator("streams")
    @classmethod
    def _redis_streams_need_redis(cls, value: StreamsConfig, info: ValidationInfo) -> StreamsConfig:
        state = info.data.get("state")
        if value.store == "redis" and isinstance(state, StateConfig) and state.redis_url is None:
            raise ValueError("`store: redis` keeps the events in `state.redis_url`: set it too")
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
