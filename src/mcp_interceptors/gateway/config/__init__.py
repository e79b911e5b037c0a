"""The gateway's YAML configuration: pydantic models, `${ENV}` substitution, and precise errors.

Our own config forbids unknown keys, so a typo fails closed; every error names the file, the
field path and the fix. `config_json_schema()` backs `mcp-interceptors config-schema`.

| module | job |
|---|---|
| `base` | `ConfigError`, the strict base model, bounded number types, address helpers |
| `reading` | YAML text to plain data within bounds (nesting, aliases, integer length) |
| `servers` | upstreams, interceptor servers and hosts, guards, overrides |
| `settings` | chain, scrub, auth, HTTP and stdio fronts, audit, metrics |
| `document` | `GatewayConfig`, the whole file |
| `client_configs` | a desktop client's `mcpServers` / `servers` file as upstreams |
| `loading` | reading a file, `${ENV}` substitution, validation, error messages |
"""

from mcp_interceptors.gateway.config.base import (
    NAME_PATTERN,
    ConfigError,
    authority,
    is_loopback,
    redact_values,
    split_listen,
)
from mcp_interceptors.gateway.config.document import GatewayConfig
from mcp_interceptors.gateway.config.loading import (
    ConfigDocument,
    config_from,
    config_json_schema,
    load_config,
    parse_config,
    read_config_document,
    substitute_env,
)
from mcp_interceptors.gateway.config.servers import (
    GuardConfig,
    HookConfig,
    HostConfig,
    InterceptorsConfig,
    InterceptorServerConfig,
    OverrideConfig,
    RequiredConfig,
    TransportConfig,
    UpstreamConfig,
)
from mcp_interceptors.gateway.config.settings import (
    AuditConfig,
    AuthConfig,
    ChainConfig,
    HttpConfig,
    JwtConfig,
    MetricsConfig,
    Point,
    ScrubConfig,
    StateConfig,
    StdioConfig,
    StreamsConfig,
    TelemetryConfig,
)

__all__ = [
    "NAME_PATTERN",
    "AuditConfig",
    "AuthConfig",
    "ChainConfig",
    "ConfigDocument",
    "ConfigError",
    "GatewayConfig",
    "GuardConfig",
    "HookConfig",
    "HostConfig",
    "HttpConfig",
    "InterceptorServerConfig",
    "InterceptorsConfig",
    "JwtConfig",
    "MetricsConfig",
    "OverrideConfig",
    "Point",
    "RequiredConfig",
    "ScrubConfig",
    "StateConfig",
    "StdioConfig",
    "StreamsConfig",
    "TelemetryConfig",
    "TransportConfig",
    "UpstreamConfig",
    "authority",
    "config_from",
    "config_json_schema",
    "is_loopback",
    "load_config",
    "parse_config",
    "read_config_document",
    "redact_values",
    "split_listen",
    "substitute_env",
]
