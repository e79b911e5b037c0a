"""The Host and Origin allow-lists, where `name:*` means `name` with any port: one to five digits.

mcp's DNS-rebinding check matches `name:*` as a prefix (`localhost:evil` and `127.0.0.1:8000@evil.com`
pass it), so `StrictHosts` sits in front of every route of the HTTP front and refuses, as mcp would
(421 for a Host, 403 for an Origin), any value that is on neither list under this stricter reading.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from starlette.responses import Response

from mcp_interceptors.gateway.approvals.callbacks import CALLBACK_PREFIX

logger = logging.getLogger(__name__)

_PORT = re.compile(r"[0-9]{1,5}")


def is_allowed(value: str, allowed: Sequence[str]) -> bool:
    """Whether `value` (a Host or an Origin) is listed exactly, or is a `name:*` entry's name with a port."""
    for entry in allowed:
        if value == entry:
            return True
        if entry.endswith(":*"):
            base = entry[:-1]
            if value.startswith(base) and _PORT.fullmatch(value[len(base) :]):
                return True
    return False


class StrictHosts:
    """ASGI: an HTTP request whose Host or Origin is allowed only by mcp's prefix reading is refused here."""

    def __init__(self, app: Any, hosts: Sequence[str], origins: Sequence[str]) -> None:
        self.app = app
        self.hosts = list(hosts)
        self.origins = list(origins)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        # A readiness probe comes by address (`Host: 10.0.0.7:8080`); `/healthz` reads nothing but counts. An
        # approval callback comes by the receiver's name for the gateway, and its HMAC signature is its check.
        if scope.get("type") == "http" and not _exempt(scope):
            headers = dict(scope.get("headers") or ())
            host = headers.get(b"host", b"").decode("latin-1")
            origin = headers.get(b"origin")
            refused: Response | None = None
            if host and not is_allowed(host, self.hosts):
                logger.warning("Invalid Host header: %s", host[:200])
                refused = Response("Invalid Host header", status_code=421)
            elif origin and not is_allowed(origin.decode("latin-1"), self.origins):
                logger.warning("Invalid Origin header: %s", origin[:200].decode("latin-1"))
                refused = Response("Invalid Origin header", status_code=403)
            if refused is not None:
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _exempt(scope: Any) -> bool:
    path, method = str(scope.get("path", "")), scope.get("method")
    return (path == "/healthz" and method == "GET") or (path.startswith(CALLBACK_PREFIX) and method == "POST")
