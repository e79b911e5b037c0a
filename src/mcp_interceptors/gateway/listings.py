"""Listings: fetch, merge and page what the upstreams list, govern it, note what each session was shown,
and route a call to the owner of what it names (refusing what the session was not shown).

One upstream's listing passes through page by page under its prefix; several upstreams' are merged into
one page, each upstream's part governed on its own (so `context.server` names the owner of every item).
`routing` does the pure merging and matching; `reply` ends each governed listing.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableSequence
from typing import Any

import anyio
from mcp import MCPError

from mcp_interceptors.gateway.config import GatewayConfig
from mcp_interceptors.gateway.connections import Connections
from mcp_interceptors.gateway.governor import Governor
from mcp_interceptors.gateway.recording import CallRecord
from mcp_interceptors.gateway.reply import Replies
from mcp_interceptors.gateway.routing import (
    CALLS,
    LISTS,
    PREFIXED_LISTS,
    SEPARATOR,
    Catalog,
    Route,
    advertised_keys,
    build_catalog,
)
from mcp_interceptors.gateway.session import DownstreamSession
from mcp_interceptors.gateway.shape import recorded
from mcp_interceptors.gateway.upstream.connection import UpstreamConnection
from mcp_interceptors.gateway.upstream.errors import UpstreamUnavailableError, first_error
from mcp_interceptors.protocol.errors import INVALID_PARAMS, METHOD_NOT_FOUND

logger = logging.getLogger(__name__)

#: Bound on the pages of one listing the gateway reads itself, against an upstream that pages forever.
MAX_LISTING_PAGES = 1000
#: Capabilities an upstream needs for a list method to be worth asking.
_LIST_CAPABILITY = {
    "tools/list": "tools",
    "prompts/list": "prompts",
    "resources/list": "resources",
    "resources/templates/list": "resources",
}


def check_arguments(method: str, arguments: Any) -> None:
    """A call's `params.arguments`, when present, is an object; a prompt's values are strings (the schema's shapes:
    an upstream must never get what no client may send)."""
    if arguments is None or method not in ("tools/call", "prompts/get"):
        return
    if not isinstance(arguments, Mapping):
        raise MCPError(INVALID_PARAMS, f"{method}: params.arguments must be an object", {"field": "arguments"})
    if method == "prompts/get":
        for key, value in arguments.items():
            if not isinstance(value, str):
                field = f"arguments.{key}"
                raise MCPError(INVALID_PARAMS, f"prompts/get: params.{field} must be a string", {"field": field})


class Listings:
    """Serves listings and routes calls for every session; `startup` is the catalog listed at start."""

    def __init__(self, config: GatewayConfig, governor: Governor, connections: Connections, replies: Replies) -> None:
        self.config = config
        self.governor = governor
        self.connections = connections
        self.replies = replies
        self.prefixes = {name: config.prefix_for(name) for name in config.upstreams}
        self.startup: Catalog | None = None
        #: The prefixes of upstreams a reload removed, and their names (see `removed_error`).
        self.removed: dict[str, str] = {}

    async def list_at_start(self) -> None:
        """List every upstream once (raises `RoutingError` on a name two of them expose)."""
        probe = DownstreamSession(key="startup", era="2026-07-28")
        self.startup = await self.refresh_catalog(probe)

    # ------------------------------------------------------------------ a client's listing

    async def list(
        self, session: DownstreamSession, method: str, params: dict[str, Any] | None, request_id: Any
    ) -> dict[str, Any]:
        """A listing, governed per upstream; what it shows is noted as advertised to `session`."""
        governor = self.governor.hold()  # to its end, as a call (see `Forwarder.call`)
        try:
            return await self._list(governor, session, method, params, request_id)
        finally:
            governor.release()

    async def _list(
        self,
        governor: Governor,
        session: DownstreamSession,
        method: str,
        params: dict[str, Any] | None,
        request_id: Any,
    ) -> dict[str, Any]:
        record = self.replies.new_record(session.context(None, request_id))
        try:
            if (params or {}).get("cursor") is not None and (count := len(await self.connections.of(session))) > 1:
                # A merged listing is one page (no `nextCursor`): any cursor is one this gateway never gave.
                raise MCPError(
                    INVALID_PARAMS,
                    f"Invalid cursor: the listing merged from {count} upstreams has a single page",
                    {"field": "cursor"},
                )
            params = await governor.govern_request(method, params, record.context, record)
            conns = await self.connections.of(session)
            cursor = (params or {}).get("cursor")
            sent = {"method": method, "params": recorded(params)}
            await record.dispatched(executed=sent, intent=sent)
        except MCPError as exc:
            await self.replies.refused(record, method, exc, session, request_id)
        except anyio.get_cancelled_exc_class():
            await record.cancelled(method, session.ended_error())
            raise
        try:
            if len(conns) == 1:
                name, conn = next(iter(conns.items()))
                result = await conn.request(method, params)
                result = self._expose_single(session, method, name, result)
                listed = result
                result = await governor.govern_response(method, result, session.context(name, request_id), record)
                if result.get("cacheScope") == "public" and result != listed:
                    # The chain shaped this listing for this caller (its principal, say): not one to share.
                    result = {**result, "cacheScope": "private"}
            else:
                result = await self._merged(governor, session, method, request_id, record)
        except MCPError as exc:
            session.forget_shown(method)  # a listing that fails (a guard blocked it, say) shows nothing
            await self.replies.failed(record, method, exc)
        except anyio.get_cancelled_exc_class():
            await record.cancelled(method, session.ended_error())
            raise
        session.shown(method, cursor, result)
        return await self.replies.settled(result, record)

    def _expose_single(
        self, session: DownstreamSession, method: str, upstream: str, result: dict[str, Any]
    ) -> dict[str, Any]:
        """Add one page of a single upstream's listing to the catalog; an item listed again replaces its old
        entry, and the items of other pages stay (a client may list page 1 again after reading page 3)."""
        prefix = self.prefixes.get(upstream, "")
        items_key, key_name = LISTS[method]
        page = build_catalog({upstream: {method: list(result.get(items_key) or [])}}, {upstream: prefix})
        catalog = session.catalog = session.catalog or Catalog()
        catalog.routes.setdefault(method, {}).update(page.routes[method])
        fresh = page.routes[method].keys()
        kept = [item for item in catalog.items.get(method, []) if item.get(key_name) not in fresh]
        catalog.items[method] = kept + page.items[method]
        if page.templates:
            texts = {text for text, _, _ in page.templates}
            catalog.templates = [entry for entry in catalog.templates if entry[0] not in texts]
            catalog.templates.extend(page.templates)
        if prefix and method in ("tools/list", "prompts/list"):
            return {**result, items_key: page.items[method]}
        return result

    async def _merged(
        self, governor: Governor, session: DownstreamSession, method: str, request_id: Any, record: CallRecord
    ) -> dict[str, Any]:
        """Every page from every upstream, exposed under prefixes, each upstream's part governed on its own."""
        catalog = await self.refresh_catalog(session, methods=(method,))
        items_key, key = LISTS[method]
        routes = catalog.routes[method]
        governed: list[dict[str, Any]] = []
        for upstream in await self.connections.of(session):
            mine = [item for item in catalog.listing(method) if routes[item[key]].upstream == upstream]
            result = await governor.govern_response(
                method, {items_key: mine}, session.context(upstream, request_id), record.for_server(upstream)
            )
            governed.extend(item for item in result.get(items_key) or [] if isinstance(item, dict))
        return {items_key: governed}

    async def catalog_of(self, conns: Mapping[str, UpstreamConnection], prefixes: Mapping[str, str]) -> Catalog:
        """What `conns` list under `prefixes` (a reload's new upstream set; raises `RoutingError` on a collision)."""
        probe = DownstreamSession(key="reload", era="2026-07-28")
        return await self.refresh_catalog(probe, conns=conns, prefixes=prefixes)

    def replace_upstreams(self, config: GatewayConfig, catalog: Catalog, gone: Mapping[str, str]) -> None:
        """Serve `config`'s upstream set from now on (`catalog` is what it lists); `gone` maps the prefix of
        each upstream a reload removed to its name, so a call to one of its tools says so."""
        removed = {prefix: name for prefix, name in self.removed.items() if name not in config.upstreams}
        self.config, self.startup = config, catalog
        self.prefixes = {name: config.prefix_for(name) for name in config.upstreams}
        self.removed = {**removed, **{prefix: name for prefix, name in gone.items() if prefix}}

    def removed_error(self, upstream: str, method: str, key: str) -> MCPError:
        """What a call to an upstream a reload removed gets: an error naming it."""
        message = f"upstream {upstream!r} was removed from the gateway's config: {method} of {key!r} is refused"
        return MCPError(INVALID_PARAMS, message, {"upstream": upstream, "reason": "upstream removed", "event": method})

    async def serving(
        self,
        session: DownstreamSession,
        method: str,
        route: Route,
        held: MutableSequence[Governor | UpstreamConnection],
    ) -> UpstreamConnection:
        """The connection a call on `route` goes on, put in `held` (the call releases it when it ends, and a reload
        that retires it waits till then); a call whose upstream a reload removed since it was routed is refused."""
        conn = (await self.connections.of(session)).get(route.upstream)
        if conn is None:
            raise self.removed_error(route.upstream, method, route.name)
        conn.hold()  # no await since it was found: a reload cannot have retired it
        held.append(conn)
        return conn

    def _removed_owner(self, key: str) -> str | None:
        return next((name for prefix, name in self.removed.items() if key.startswith(prefix + SEPARATOR)), None)

    async def refresh_catalog(
        self,
        session: DownstreamSession,
        methods: tuple[str, ...] = tuple(LISTS),
        *,
        conns: Mapping[str, UpstreamConnection] | None = None,
        prefixes: Mapping[str, str] | None = None,
    ) -> Catalog:
        """Fetch every page of `methods` from every upstream (the session's, or `conns`) and merge them under their
        prefixes."""
        if conns is None:
            conns = await self.connections.of(session)
        # With several upstreams, one that is down is left out (the others keep serving); it announces
        # `list_changed` when it is back. Only when every one is down does the listing fail.
        down = {name for name, conn in conns.items() if not conn.up} if len(conns) > 1 else set()
        if down == set(conns):
            down = set()  # nothing to list without them: wait for a reconnect, then fail naming one
        listings: dict[str, dict[str, list[dict[str, Any]]]] = {name: {} for name in conns if name not in down}

        async def fetch(name: str, conn: UpstreamConnection, method: str) -> None:
            try:
                listings[name][method] = await fetch_all_pages(conn, method)
            except UpstreamUnavailableError:
                if len(conns) == 1:
                    raise
                down.add(name)

        try:
            async with anyio.create_task_group() as tg:
                for name in listings:
                    for method in methods:
                        tg.start_soon(fetch, name, conns[name], method)
        except* MCPError as group:  # an upstream failing: its own error (naming it), not a group
            raise first_error(group) from None
        if down:
            if down == set(conns):
                raise conns[min(down, key=list(conns).index)].unavailable()
            for name in sorted(down):
                conns[name].left_out = True
                logger.warning("upstream %r is unavailable: listed without it (%s)", name, ", ".join(methods))
            listings = {name: found for name, found in listings.items() if name not in down}
        fresh = build_catalog(listings, self.prefixes if prefixes is None else prefixes)
        catalog = session.catalog = session.catalog or Catalog()
        for method in methods:
            catalog.items[method] = fresh.items[method]
            catalog.routes[method] = fresh.routes[method]
        if "resources/templates/list" in methods:
            catalog.templates = fresh.templates
        return catalog

    # ------------------------------------------------------------------ the advertised set

    async def advertised(self, session: DownstreamSession, list_method: str) -> dict[str, set[str]]:
        """What `session` would be shown: the listing after the response chain, computed on demand.

        Returns the keys shown per listing (`list_method`'s, and resource templates' with resources) as
        they are now, which a `list_changed` arriving later does not take back from the caller."""
        methods = (list_method, "resources/templates/list") if list_method == "resources/list" else (list_method,)
        shown: dict[str, set[str]] = {}
        for method in methods:
            keys = session.advertised.get(method)
            if keys is None:  # else listed by the client already (maybe several pages): keep that
                try:
                    keys = await self._list_every_page(session, method)
                except MCPError as exc:
                    if exc.code != METHOD_NOT_FOUND:
                        raise
                    keys = session.advertised[method] = set()
            shown[method] = keys
        return shown

    async def _list_every_page(self, session: DownstreamSession, method: str) -> set[str]:
        """Every page of a listing, each governed as if the client had asked for it: a call may name an item
        of any page, and a client need not list before it calls."""
        keys: set[str] = set()
        cursor: str | None = None
        for _ in range(MAX_LISTING_PAGES):
            result = await self.list(session, method, None if cursor is None else {"cursor": cursor}, None)
            keys |= advertised_keys(method, result)
            cursor = result.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                break
        return keys

    # ------------------------------------------------------------------ routing a call

    async def route(
        self, session: DownstreamSession, method: str, params: Mapping[str, Any] | None, *, check: bool = False
    ) -> Route:
        """Where the call goes; with `check`, refuse anything `session` was not advertised."""
        if method == "completion/complete":
            return await self._route_completion(session, params)
        list_method, key_name = CALLS[method]
        key = (params or {}).get(key_name)
        if not isinstance(key, str):
            raise MCPError(INVALID_PARAMS, f"{method}: params.{key_name} must be a string", {"field": key_name})
        check_arguments(method, (params or {}).get("arguments"))
        enforce = check and self.config.advertised_equals_callable
        # What this session was shown, held here: a `list_changed` while the catalog is fetched below
        # drops `session.advertised`, and must not make an item just shown (and still listed) uncallable.
        shown = await self.advertised(session, list_method) if enforce else {}
        needed = (list_method, "resources/templates/list") if list_method == "resources/list" else (list_method,)
        missing = tuple(m for m in needed if session.catalog is None or m not in session.catalog.routes)
        if missing:
            await self.refresh_catalog(session, missing)
        assert session.catalog is not None
        route = session.catalog.route(method, key)
        if route is None and await self._owner_back(session, list_method, key):
            session.invalidate(list_method)  # listed while it restarted: list again, with its items
            return await self.route(session, method, params, check=check)
        if route is None and list_method in PREFIXED_LISTS and (gone := self._removed_owner(key)) is not None:
            raise self.removed_error(gone, method, key)
        if route is None or (enforce and not session.was_advertised(shown, list_method, key)):
            kind = {"tools/list": "tool", "prompts/list": "prompt"}.get(list_method, "resource")
            data = {"reason": "not advertised to this session", key_name: key, "event": method}
            if kind == "resource":  # resource-not-found as a server sends it: clients recognise `{uri}` alone
                data = {key_name: key}
            raise MCPError(INVALID_PARAMS, f"Unknown {kind}: {key}", data)
        return route

    async def _owner_back(self, session: DownstreamSession, list_method: str, key: str) -> bool:
        """For a tool or prompt not in the listing, under the prefix of an upstream that is down: whether
        that upstream is back after a request's wait for it (a restart). If it does not come back, or never
        connected, the call gets its error naming it rather than "Unknown tool"."""
        if list_method not in PREFIXED_LISTS:
            return False
        conns = session.upstreams or self.connections.shared
        for name, prefix in self.prefixes.items():
            conn = conns.get(name)
            if not prefix or not key.startswith(prefix + SEPARATOR) or conn is None or conn.up:
                continue
            if conn.info is None or not await conn.wait_up():  # never connected: not worth a wait
                raise conn.unavailable()
            return True
        return False

    async def _route_completion(self, session: DownstreamSession, params: Mapping[str, Any] | None) -> Route:
        """A `ref/prompt` goes to the prompt's owner; a `ref/resource` (a resource's URI or a template's own
        text) to the resource's or template's owner; either refused as that call would be if not advertised."""
        ref = (params or {}).get("ref")
        kind = ref.get("type") if isinstance(ref, Mapping) else None
        if kind not in ("ref/prompt", "ref/resource"):
            raise MCPError(
                INVALID_PARAMS,
                "completion/complete: params.ref.type must be ref/prompt or ref/resource",
                {"field": "ref.type"},
            )
        assert isinstance(ref, Mapping)
        field, value = ("name", ref.get("name")) if kind == "ref/prompt" else ("uri", ref.get("uri"))
        if not isinstance(value, str):
            raise MCPError(
                INVALID_PARAMS, f"completion/complete: params.ref.{field} must be a string", {"field": f"ref.{field}"}
            )
        if kind == "ref/prompt":
            return await self.route(session, "prompts/get", {"name": value}, check=True)
        return await self.route(session, "resources/read", {"uri": value}, check=True)

    def server_of(self, session: DownstreamSession, event: str, phase: str, payload: Any) -> str | None:
        """The upstream the gateway's legs would attribute `payload` to, as far as it can tell without
        asking: a call's owner by the catalog, else the only upstream (a listing request has none)."""
        if phase == "request" and event in CALLS:
            params = payload.get("params") if isinstance(payload, dict) and "method" in payload else payload
            key = params.get(CALLS[event][1]) if isinstance(params, dict) else None
            catalog = session.catalog or self.startup
            route = catalog.route(event, key) if catalog is not None and isinstance(key, str) else None
            if route is not None:
                return route.upstream
        if len(self.config.upstreams) != 1 or (phase == "request" and event in LISTS):
            return None
        return next(iter(self.config.upstreams))


async def fetch_all_pages(conn: UpstreamConnection, method: str) -> list[dict[str, Any]]:
    """Every item of a paginated list; an upstream without the capability contributes nothing."""
    capability = _LIST_CAPABILITY.get(method)
    if conn.info is not None and capability and capability not in conn.info.capabilities:
        return []
    items_key, _ = LISTS[method]
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    conn.hold()  # a reload that takes it out of service lets the listing finish
    try:
        for _ in range(MAX_LISTING_PAGES):
            try:
                page = await conn.request(method, {"cursor": cursor} if cursor else None)
            except MCPError as exc:
                if exc.code == METHOD_NOT_FOUND:
                    return items
                raise
            items.extend(item for item in page.get(items_key) or [] if isinstance(item, dict))
            cursor = page.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                break
    finally:
        conn.release()
    return items
