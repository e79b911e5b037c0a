"""The era's handshake with an upstream (`initialize`, or `server/discover`) and what the gateway presents there.

`auto` tries 2026-07-28 first, `legacy-first` the handshake era, falling back to the other; the gateway
presents the client it speaks for (its identity and capabilities, never tasks), or its own. A 2026-07-28
request carries that presentation in its `_meta` envelope (`envelope`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from mcp import MCPError
from mcp.shared.dispatcher import CallOptions
from mcp.shared.inbound import MCP_METHOD_HEADER, MCP_PROTOCOL_VERSION_HEADER
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    LOG_LEVEL_META_KEY,
    PROTOCOL_VERSION_META_KEY,
    SERVER_INFO_META_KEY,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION, LATEST_MODERN_VERSION

from mcp_interceptors.gateway.tasks import without_tasks
from mcp_interceptors.gateway.upstream.transports import Wire

logger = logging.getLogger(__name__)

Era = Literal["legacy", "2026-07-28"]
#: `legacy-first` is `auto` for a handshake-era client: `initialize` first, then `server/discover`.
EraPreference = Literal["auto", "legacy-first", "legacy", "2026-07-28"]

#: The 2026-07-28 per-request envelope keys of `_meta`.
ENVELOPE_KEYS = frozenset(
    {PROTOCOL_VERSION_META_KEY, CLIENT_INFO_META_KEY, CLIENT_CAPABILITIES_META_KEY, LOG_LEVEL_META_KEY}
)
GATEWAY_CLIENT_INFO = {"name": "mcp-interceptors-gateway", "version": "0.1.0"}
#: What the gateway presents when it has no downstream client to speak for (an HTTP gateway's shared
#: connections, a stdio client that said nothing first): every client feature it can relay, so a server
#: offers all it would offer some client; a request the client cannot serve gets that client's own error.
DEFAULT_CLIENT_CAPABILITIES: dict[str, Any] = {
    "roots": {"listChanged": True},
    "sampling": {"context": {}, "tools": {}},
    "elicitation": {"form": {}, "url": {}},
}


@dataclass
class UpstreamInfo:
    """What the handshake told us about the upstream."""

    era: Era
    protocol_version: str
    server_info: dict[str, Any] | None = None
    capabilities: dict[str, Any] = field(default_factory=dict)
    instructions: str | None = None


class EraRefusedError(Exception):
    """The upstream refused the era tried first and fixed the connection to it: reconnect in the other."""


@dataclass
class Handshake:
    """One upstream's handshake: the era it prefers (`auto` settles on the era that answered) and what it
    is told about the client (`client_params`, the `initialize` params of the client spoken for)."""

    preference: EraPreference
    timeout_s: float
    is_http: bool
    #: How logs name the upstream: `upstream 'name'`.
    label: str

    async def run(self, wire: Wire, client_params: Mapping[str, Any], log_level: str | None) -> UpstreamInfo:
        """Shake hands on `wire`; raises `EraRefusedError` when a fresh connection must try the other era."""
        preference = self.preference
        if preference == "legacy":
            return await self._initialize(wire, client_params)
        if preference == "2026-07-28":
            return await self._discover(wire, client_params, log_level)
        # `auto` tries 2026-07-28 first, `legacy-first` the handshake era; a refusal sets the other.
        legacy_first = preference == "legacy-first"
        other: EraPreference = "2026-07-28" if legacy_first else "legacy"
        try:
            if legacy_first:
                return await self._initialize(wire, client_params)
            return await self._discover(wire, client_params, log_level)
        except MCPError as exc:
            logger.debug("%s: handshake failed (%s); trying the %s era", self.label, exc.message, other)
            self.preference = other
            if self.is_http:
                raise EraRefusedError from None  # a fresh HTTP transport costs nothing
        try:
            # Most SDKs answer the other era's unknown method and go on: a stdio server is not started twice.
            if legacy_first:
                return await self._discover(wire, client_params, log_level)
            return await self._initialize(wire, client_params)
        except MCPError:
            # Some servers fix a connection's era with its first message: start over on a fresh one.
            raise EraRefusedError from None

    async def _discover(self, wire: Wire, client_params: Mapping[str, Any], log_level: str | None) -> UpstreamInfo:
        params = {"_meta": envelope(None, client_params, log_level)}
        opts: CallOptions = {"timeout": self.timeout_s}
        if self.is_http:
            opts["headers"] = {MCP_PROTOCOL_VERSION_HEADER: LATEST_MODERN_VERSION, MCP_METHOD_HEADER: "server/discover"}
        result = await wire.send_raw_request("server/discover", params, opts)
        versions = result.get("supportedVersions") or []
        if LATEST_MODERN_VERSION not in versions:
            raise MCPError(-32022, f"upstream supports {versions}, not {LATEST_MODERN_VERSION}")
        meta = result.get("_meta") or {}
        return UpstreamInfo(
            era="2026-07-28",
            protocol_version=LATEST_MODERN_VERSION,
            server_info=meta.get(SERVER_INFO_META_KEY),
            capabilities=dict(result.get("capabilities") or {}),
            instructions=result.get("instructions"),
        )

    async def _initialize(self, wire: Wire, client_params: Mapping[str, Any]) -> UpstreamInfo:
        params = {
            "protocolVersion": client_params.get("protocolVersion", LATEST_HANDSHAKE_VERSION),
            "capabilities": client_capabilities(client_params.get("capabilities")),
            "clientInfo": client_params.get("clientInfo", GATEWAY_CLIENT_INFO),
        }
        if params["protocolVersion"] not in HANDSHAKE_PROTOCOL_VERSIONS:
            params["protocolVersion"] = LATEST_HANDSHAKE_VERSION
        opts: CallOptions = {"timeout": self.timeout_s, "cancel_on_abandon": False}
        result = await wire.send_raw_request("initialize", params, opts)
        await wire.notify("notifications/initialized", None)
        return UpstreamInfo(
            era="legacy",
            protocol_version=str(result.get("protocolVersion") or params["protocolVersion"]),
            server_info=result.get("serverInfo"),
            capabilities=dict(result.get("capabilities") or {}),
            instructions=result.get("instructions"),
        )


def envelope(
    client_meta: Mapping[str, Any] | None, client_params: Mapping[str, Any], log_level: str | None
) -> dict[str, Any]:
    """The 2026-07-28 `_meta` envelope: the downstream client's if it sent one, else the one presented."""
    meta = dict(client_meta or {})
    if log_level is not None:
        meta.setdefault(LOG_LEVEL_META_KEY, log_level)
    meta.setdefault(PROTOCOL_VERSION_META_KEY, LATEST_MODERN_VERSION)
    meta.setdefault(CLIENT_INFO_META_KEY, client_params.get("clientInfo", GATEWAY_CLIENT_INFO))
    sent = meta.get(CLIENT_CAPABILITIES_META_KEY, client_params.get("capabilities"))
    # A 2026-07-28 client's own declaration of the tasks extension stays: the gateway governs its tasks.
    meta[CLIENT_CAPABILITIES_META_KEY] = client_capabilities(sent, keep_extension=CLIENT_CAPABILITIES_META_KEY in meta)
    return meta


def client_capabilities(sent: Any, *, keep_extension: bool = False) -> Any:
    """The client capabilities presented upstream (the gateway's if the client sent none), never with
    handshake-era tasks: an upstream must not send task-augmented requests, which the gateway refuses
    (gateway/tasks.py). `keep_extension` keeps a 2026-07-28 client's `io.modelcontextprotocol/tasks`."""
    if sent is None:
        return without_tasks(DEFAULT_CLIENT_CAPABILITIES)
    if not isinstance(sent, Mapping):
        return sent  # malformed: the upstream answers it
    return without_tasks(sent, keep_extension=keep_extension)


def body_for_era(params: Mapping[str, Any] | None, era: Era, envelope_of: Any) -> dict[str, Any]:
    """A request's params in the connection's era: with its envelope (`envelope_of(client_meta)`), or without
    a 2026-07-28 client's, which a handshake-era upstream would refuse."""
    body = dict(params) if params is not None else {}
    if era == "2026-07-28":
        body["_meta"] = envelope_of(body.get("_meta"))
    elif isinstance(meta := body.get("_meta"), Mapping) and any(key in meta for key in ENVELOPE_KEYS):
        kept = {key: value for key, value in meta.items() if key not in ENVELOPE_KEYS}
        if kept:
            body["_meta"] = kept
        else:
            del body["_meta"]
    return body


def listen_flags(capabilities: Mapping[str, Any]) -> dict[str, bool]:
    """What a 2026-07-28 `subscriptions/listen` asks for: the list changes the upstream says it announces."""
    features = (("toolsListChanged", "tools"), ("promptsListChanged", "prompts"), ("resourcesListChanged", "resources"))
    return {flag: True for flag, feature in features if (capabilities.get(feature) or {}).get("listChanged")}


#: Requests whose effect a handshake-era upstream keeps for the session (see `SessionState`).
SESSION_STATE_METHODS = frozenset({"resources/subscribe", "resources/unsubscribe", "logging/setLevel"})


class SessionState:
    """What a handshake-era upstream was told that a restart makes it forget, sent again after the handshake of
    a reconnection: its resource subscriptions (uri -> the params sent) and its last `logging/setLevel` params."""

    def __init__(self) -> None:
        self._subscriptions: dict[str, dict[str, Any]] = {}
        self._log_level_params: dict[str, Any] | None = None

    def remember(self, method: str, params: Mapping[str, Any] | None) -> None:
        """Keep what the upstream accepted of `SESSION_STATE_METHODS`."""
        if params is None:
            return
        if method == "resources/subscribe":
            self._subscriptions[str(params.get("uri"))] = dict(params)
        elif method == "resources/unsubscribe":
            self._subscriptions.pop(str(params.get("uri")), None)
        elif method == "logging/setLevel":
            self._log_level_params = dict(params)

    def to_restore(self) -> list[tuple[str, dict[str, Any]]]:
        restore = [("resources/subscribe", params) for params in self._subscriptions.values()]
        if self._log_level_params is not None:
            restore.append(("logging/setLevel", self._log_level_params))
        return restore

    def forget(self, method: str, params: Mapping[str, Any]) -> None:
        """Drop what the restarted upstream refused."""
        if method == "resources/subscribe":
            self._subscriptions.pop(str(params.get("uri")), None)
        else:
            self._log_level_params = None
