"""The web view as a Starlette app: recent calls with live updates, filters, charts, and one call's detail.

Pages are rendered on the server by Jinja2 with autoescaping (every string from the trail is text, never
markup) under a Content-Security-Policy that runs only our own script. Store reads run in worker threads,
so a page never stalls the event loop of a gateway it is mounted in. Read-only: nothing here writes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs, urlencode

import anyio
import jinja2
from markupsafe import escape
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from mcp_interceptors.audit.records import AuditError
from mcp_interceptors.audit.signing import PublicKey
from mcp_interceptors.ui import charts
from mcp_interceptors.ui.auth import COOKIE, AuthMiddleware, UiAuth, safe_next, same_origin
from mcp_interceptors.ui.calls import VERDICTS, CallView, Filters, names_seen
from mcp_interceptors.ui.checks import check_call
from mcp_interceptors.ui.pages import Limits, chart_calls, one_call, recent_calls
from mcp_interceptors.ui.reader import AuditReader

HERE: Final = Path(__file__).parent
_HEADERS: Final = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}
_MAX_FORM: Final = 16_384
#: What a call id or record id may hold in a detail page's path (the gateway's are hex, and `-` in record ids).
_KEY_CHARS: Final = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_.:")


@dataclass(frozen=True)
class UiSettings:
    """What the view reads and whom it trusts. `trust` describes the trust anchors for the page."""

    reader: AuditReader
    trusted: Mapping[str, PublicKey] | None
    trust: str
    auth: UiAuth | None = None
    limits: Limits = field(default_factory=Limits)
    #: How often the live stream checks for new records, in seconds.
    poll_s: float = 0.5


def create_app(settings: UiSettings, *, allowed_hosts: Sequence[str] | None = None) -> Starlette:
    """The view's ASGI app; mount it anywhere (`/ui` in the gateway). `allowed_hosts` (names, or `name:port`)
    checks the Host header; None leaves that to whoever mounts it."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True, undefined=jinja2.StrictUndefined
    )
    env.filters["ms"] = _ms
    env.filters["moment"] = _moment
    view = _View(settings, env)
    routes = [
        Route("/", view.calls_page),
        Route("/fragment/calls", view.calls_fragment),
        Route("/fragment/charts", view.charts_fragment),
        Route("/events", view.events),
        Route("/calls/{key}", view.call_page),
        Route("/login", view.login, methods=["GET", "POST"]),
        Route("/logout", view.logout, methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes)
    app.add_middleware(_SecurityHeaders)
    app.add_middleware(AuthMiddleware, auth=settings.auth, allowed_hosts=allowed_hosts)
    return app


class _View:
    def __init__(self, settings: UiSettings, env: jinja2.Environment) -> None:
        self.settings, self.env, self.reader = settings, env, settings.reader

    def render(self, request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        base = str(request.scope.get("root_path") or "").rstrip("/")
        page = self.env.get_template(template).render(
            base=base, store=self.reader.description, signed_in=self.settings.auth is not None, **context
        )
        return HTMLResponse(page, status_code=status)

    async def read(self, fn: Any, *args: Any) -> Any:
        """Run a store read in a worker thread (never on the event loop of a gateway the view is mounted in)."""
        return await anyio.to_thread.run_sync(fn, *args)

    def _listing(self, request: Request) -> tuple[Filters, int | None]:
        before = request.query_params.get("before", "")
        return Filters.from_query(request.query_params), int(before) if before.isdigit() else None

    def _page_context(self, filters: Filters, before: int | None) -> dict[str, Any]:
        page = recent_calls(self.reader, filters, before, self.settings.limits)
        query = filters.query()
        older = None if page.older is None else urlencode({**query, "before": page.older})
        return {"page": page, "filters": filters, "older": older, "query": urlencode(query), "before": before}

    async def calls_page(self, request: Request) -> Response:
        filters, before = self._listing(request)

        def gather() -> dict[str, Any]:
            context = self._page_context(filters, before)
            window = chart_calls(self.reader, self.settings.limits)
            upstreams, guards, targets = names_seen(window)
            names = {"upstreams": upstreams, "guards": guards, "targets": targets}
            return {**context, **_charts(window), **names, "head": self.reader.head()}

        try:
            context = await self.read(gather)
        except AuditError as exc:
            return self.render(request, "error.html", 503, problem=str(exc))
        return self.render(request, "calls.html", verdicts=VERDICTS, live=before is None, **context)

    async def calls_fragment(self, request: Request) -> Response:
        filters, before = self._listing(request)
        try:
            context = await self.read(self._page_context, filters, before)
        except AuditError as exc:
            return HTMLResponse(f"<p class=problem>{escape(str(exc))}</p>", status_code=503)
        return self.render(request, "_calls.html", **context)

    async def charts_fragment(self, request: Request) -> Response:
        try:
            window = await self.read(chart_calls, self.reader, self.settings.limits)
        except AuditError as exc:
            return HTMLResponse(f"<p class=problem>{escape(str(exc))}</p>", status_code=503)
        return self.render(request, "_charts.html", **_charts(window))

    async def events(self, request: Request) -> Response:
        """`head` events, each the store's newest position, sent when it changes (checked every `poll_s`)."""

        async def heads() -> AsyncIterator[dict[str, str]]:
            last = -1
            while True:
                try:
                    head = await anyio.to_thread.run_sync(self.reader.head)
                except AuditError as exc:
                    yield {"event": "problem", "data": str(exc)}
                    head = last
                if head != last:
                    last = head
                    yield {"event": "head", "data": str(head)}
                await anyio.sleep(self.settings.poll_s)

        return EventSourceResponse(heads(), ping=15, headers={"cache-control": "no-store"})

    async def call_page(self, request: Request) -> Response:
        key = str(request.path_params["key"])
        if not key or len(key) > 200 or not set(key) <= _KEY_CHARS:
            return self.render(request, "error.html", 404, problem="not a call id or a record id")

        def gather() -> tuple[CallView, Any] | None:
            found = one_call(self.reader, key)
            if found is None:
                return None
            call, rows = found
            return call, check_call(self.reader, rows, self.settings.trusted)

        try:
            found = await self.read(gather)
        except AuditError as exc:
            return self.render(request, "error.html", 503, problem=str(exc))
        if found is None:
            return self.render(request, "error.html", 404, problem=f"no call or record {key} in this store")
        call, check = found
        return self.render(request, "call.html", call=call, check=check, trust=self.settings.trust)

    async def login(self, request: Request) -> Response:
        auth = self.settings.auth
        base = str(request.scope.get("root_path") or "").rstrip("/")
        target = safe_next(request.query_params.get("next"))
        if auth is None:
            return RedirectResponse(base + target, status_code=303)
        if request.method == "GET":
            return self.render(request, "login.html", next=target, refused=False)
        if not same_origin(request.scope):
            return Response("cross-origin sign-in refused", status_code=403)
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > _MAX_FORM:
                return Response("form too large", status_code=413)
        form = parse_qs(body.decode(errors="replace"))
        token = (form.get("token") or [""])[0].strip()
        target = safe_next((form.get("next") or ["/"])[0])
        if not token or not await auth.accepts(token):
            return self.render(request, "login.html", 401, next=target, refused=True)
        response = RedirectResponse(base + target, status_code=303)
        secure = request.url.scheme == "https"
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict", secure=secure, path=base or "/")
        return response

    async def logout(self, request: Request) -> Response:
        base = str(request.scope.get("root_path") or "").rstrip("/")
        if not same_origin(request.scope):
            return Response("cross-origin sign-out refused", status_code=403)
        response = RedirectResponse(f"{base}/login", status_code=303)
        response.delete_cookie(COOKIE, path=base or "/", httponly=True, samesite="strict")
        return response


def _charts(window: list[CallView]) -> dict[str, Any]:
    return {
        "charts": [charts.upstream_chart(window), charts.guard_chart(window)],
        "guard_counts": charts.guard_counts(window),
        "window": len(window),
    }


def _ms(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.1f} ms" if value < 1000 else f"{value / 1000:.2f} s"


def _moment(value: str) -> str:
    """`2026-12-02T12:28:29.495731Z` as `2026-12-02 12:28:29.495`."""
    return value.replace("T", " ")[:23] if len(value) >= 23 else value


class _SecurityHeaders:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                extra = [(k.encode(), v.encode()) for k, v in _HEADERS.items() if k.encode() not in present]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)
