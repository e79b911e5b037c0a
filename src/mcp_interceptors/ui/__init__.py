"""A live, read-only web view of the audit trail: every call's verdict, filters, charts, and each record's
signature and chain status from `audit verify`'s own checks.

`create_app(UiSettings(AuditReader(store), trusted, ...))` is an ASGI app the gateway mounts at `/ui` and
`mcp-interceptors ui` serves on its own (`serve_ui`). Auth comes in as a `UiAuth` (the gateway's verifier).
"""

from mcp_interceptors.ui.app import UiSettings, create_app
from mcp_interceptors.ui.auth import UiAuth
from mcp_interceptors.ui.pages import Limits
from mcp_interceptors.ui.reader import AuditReader
from mcp_interceptors.ui.serve import allowed_hosts_for, serve_ui

__all__ = ["AuditReader", "Limits", "UiAuth", "UiSettings", "allowed_hosts_for", "create_app", "serve_ui"]
