"""The audit trail's web view in the gateway (`ui:`, docs/ui.md): mounted at `ui.path` on the HTTP front, or on
a listener of its own (a stdio gateway's, or wherever `ui.listen` says), behind the gateway's own auth.

The view itself is `mcp_interceptors.ui`; this module hands it the gateway's store, key file and token verifier.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio.abc
from mcp.server.auth.provider import TokenVerifier
from starlette.routing import Mount

from mcp_interceptors.gateway.auditing import audit_key_location, audit_store_location
from mcp_interceptors.gateway.auth import build_auth
from mcp_interceptors.gateway.config import GatewayConfig, authority
from mcp_interceptors.gateway.logs import announce


def _settings(config: GatewayConfig, verifier: TokenVerifier | None) -> Any:
    from mcp_interceptors.audit import DEFAULT_KEY_PATH, load_key
    from mcp_interceptors.ui import AuditReader, UiAuth, UiSettings

    key_file = audit_key_location(config) or DEFAULT_KEY_PATH.expanduser()
    trusted = load_key(key_file).trusted()  # the gateway's own key (it created it at start)
    reader = AuditReader(audit_store_location(config, create=False))
    auth = None if verifier is None else UiAuth(verifier, list(config.auth.required_scopes))
    return UiSettings(reader, trusted, f"the keys of {key_file}", auth=auth)


def ui_mount(config: GatewayConfig, verifier: TokenVerifier | None, allowed_hosts: Sequence[str]) -> Mount | None:
    """The view at `ui.path` for the HTTP front's routes, with its Host names (`name:*` entries too), or None
    when it is off or has a listener of its own."""
    if not config.ui.enabled or config.ui.listen is not None:
        return None
    from mcp_interceptors.ui import create_app

    names = [host.removesuffix(":*") for host in allowed_hosts]
    return Mount(config.ui.path, app=create_app(_settings(config, verifier), allowed_hosts=names))


def has_own_listener(config: GatewayConfig, http: bool) -> bool:
    return config.ui.enabled and (config.ui.listen is not None or not http)


async def serve_ui_listener(config: GatewayConfig, *, task_status: anyio.abc.TaskStatus[None]) -> None:
    """Serve the view on `ui.address` until cancelled (the gateway stops); started once it listens."""
    from mcp_interceptors.ui import allowed_hosts_for, create_app, serve_ui

    host, port = config.ui.address
    _, verifier = build_auth(config, host, port)
    settings = _settings(config, verifier)

    def ready() -> None:
        announce(f"audit web view on http://{authority(host, port)}/")
        task_status.started()

    try:
        app = create_app(settings, allowed_hosts=allowed_hosts_for(host, config.http.allowed_hosts))
        await serve_ui(app, host, port, on_ready=ready, own_signals=False)
    finally:
        settings.reader.close()
