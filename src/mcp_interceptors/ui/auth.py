"""Who may look: the gateway's bearer tokens (static or JWT), checked by the verifier the caller hands in.

A script sends `Authorization: Bearer TOKEN`; a browser signs in once on `/login` and its token then rides in
an HttpOnly, SameSite=Strict cookie, checked again on every request (an expired JWT stops working). Host
headers are checked too (`allowed_hosts`), so a page elsewhere cannot read the view through DNS rebinding.
"""

from __future__ import annotations

import re
import time
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any, Final
from urllib.parse import quote, urlsplit

from mcp.server.auth.provider import TokenVerifier

Scope = MutableMapping[str, Any]
COOKIE: Final = "mcpi_ui_token"
#: Paths anyone may fetch: the sign-in page and the stylesheet and script it uses.
_OPEN: Final = ("/login", "/static/")
#: What may follow an allowed name in a Host header: nothing, or a port.
_PORT: Final = re.compile(r"(:[0-9]{1,5})?")


@dataclass(frozen=True)
class UiAuth:
    """The gateway's auth: a verifier (`gateway.auth.build_auth` makes one) and the scopes a token must have."""

    verifier: TokenVerifier
    required_scopes: Sequence[str] = ()

    async def accepts(self, token: str) -> bool:
        access = await self.verifier.verify_token(token)
        if access is None:
            return False
        if access.expires_at is not None and access.expires_at < time.time():
            return False
        return set(self.required_scopes) <= set(access.scopes)


def relative_path(scope: Scope) -> str:
    """The request's path below where the view is mounted (`/ui` in the gateway, `/` standing alone)."""
    path, root = str(scope.get("path") or "/"), str(scope.get("root_path") or "")
    return (path[len(root) :] if root and path.startswith(root) else path) or "/"


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


def token_of(scope: Scope) -> str | None:
    authorization = header(scope, b"authorization")
    if authorization is not None and authorization[:7].lower() == "bearer ":
        return authorization[7:].strip() or None
    cookie = header(scope, b"cookie")
    if cookie:
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(cookie)
        except Exception:  # a malformed Cookie header is no token
            return None
        morsel = jar.get(COOKIE)
        return morsel.value if morsel is not None and morsel.value else None
    return None


def same_origin(scope: Scope) -> bool:
    """A POST from a page of this view: no Origin header (not a browser), or one naming the Host asked."""
    origin = header(scope, b"origin")
    return origin is None or urlsplit(origin).netloc == (header(scope, b"host") or "")


def safe_next(value: str | None) -> str:
    """Where to go after signing in: a path of this view only (never another site)."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value


class AuthMiddleware:
    """Refuses requests without an accepted token: HTML pages redirect to `/login`, the rest get 401."""

    def __init__(self, app: Any, auth: UiAuth | None, allowed_hosts: Sequence[str] | None) -> None:
        self.app, self.auth = app, auth
        self.allowed_hosts = None if allowed_hosts is None else {h.lower() for h in allowed_hosts}

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.allowed_hosts is not None and not self._host_allowed(scope):
            await _plain(send, 421, "this view does not answer for that Host (allowed hosts: see ui.allowed_hosts)")
            return
        path = relative_path(scope)
        if self.auth is None or path.startswith(_OPEN):
            await self.app(scope, receive, send)
            return
        token = token_of(scope)
        if token is not None and await self.auth.accepts(token):
            await self.app(scope, receive, send)
            return
        if scope.get("method") == "GET" and not path.startswith(("/fragment/", "/events")):
            query = scope.get("query_string", b"").decode("latin-1")
            target = path + (f"?{query}" if query else "")
            location = f"{scope.get('root_path') or ''}/login?next={quote(target, safe='')}"
            await _plain(send, 303, "sign in first", [(b"location", location.encode())])
            return
        await _plain(send, 401, "a valid bearer token is needed", [(b"www-authenticate", b'Bearer realm="audit"')])

    def _host_allowed(self, scope: Scope) -> bool:
        """The Host header, with or without its port (digits only), is one of `allowed_hosts` (names, or
        `name:port`): `localhost:evil` is not `localhost`."""
        assert self.allowed_hosts is not None
        host = (header(scope, b"host") or "").lower()
        name = host.split("]", 1)[0] + "]" if host.startswith("[") else host.rsplit(":", 1)[0]
        port = host[len(name) :]
        return host in self.allowed_hosts or (name in self.allowed_hosts and _PORT.fullmatch(port) is not None)


async def _plain(send: Any, status: int, text: str, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"cache-control", b"no-store"), *headers],
        }
    )
    await send({"type": "http.response.body", "body": text.encode()})
