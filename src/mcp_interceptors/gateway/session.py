"""One downstream session: its upstream sessions, its era, what it was advertised, and its legs.

Handshake-era clients get their own upstream sessions, opened once on first use and reused;
2026-07-28 requests are self-contained and share the gateway's connections. Every governed
message goes receive -> request chain -> route -> forward -> response chain -> reply.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NoReturn, Protocol, get_args

import anyio
from mcp import MCPError
from mcp.shared.inbound import mcp_param_headers, x_mcp_header_map
from mcp_types import CONNECTION_CLOSED, SERVER_INFO_META_KEY, LoggingLevel
from mcp_types.methods import CACHEABLE_METHODS

from mcp_interceptors.gateway.auth import current_principal
from mcp_interceptors.gateway.bridge import BridgedCall
from mcp_interceptors.gateway.legs import GOVERNED_EVENTS, BlockedError
from mcp_interceptors.gateway.metrics import Outcome
from mcp_interceptors.gateway.recording import RECEIPT_META_KEY, CallRecord, Leg, OpenInput, receipt_meta
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
from mcp_interceptors.gateway.tasks import task_refusal
from mcp_interceptors.gateway.upstream.connection import UpstreamConnection
from mcp_interceptors.gateway.upstream.errors import UpstreamTimeoutError, UpstreamUnavailableError, first_error
from mcp_interceptors.gateway.upstream.handshake import ENVELOPE_KEYS
from mcp_interceptors.protocol.errors import InterceptorsError
from mcp_interceptors.protocol.invoke import InvocationContext, Principal, now_iso

if TYPE_CHECKING:
    from mcp_interceptors.gateway.server import Gateway

logger = logging.getLogger(__name__)

Era = Literal["legacy", "2026-07-28"]
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INVALID_REQUEST = -32600
LOG_LEVELS: tuple[str, ...] = get_args(LoggingLevel)
#: Bound on `input_required` round trips bridged for one handshake-era call (as mcp's client does).
MAX_INPUT_ROUNDS = 10
#: Bound on the pages of one listing the gateway reads itself, against an upstream that pages forever.
MAX_LISTING_PAGES = 1000
#: The one handshake-era session of a stdio gateway (a transport with no session ids). Guards see it as the
#: gateway's `stdio_session_id`, drawn per process: gateways sharing guard state (a rate limit's Redis) each
#: serve a client of their own, whose counts must not add up.
STDIO_SESSION_KEY = "default"
#: Capabilities an upstream needs for a list method to be worth asking.
_LIST_CAPABILITY = {
    "tools/list": "tools",
    "prompts/list": "prompts",
    "resources/list": "resources",
    "resources/templates/list": "resources",
}


class Downstream(Protocol):
    """The client side of one in-flight request: how to reach the client from the gateway."""

    async def request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]: ...

    async def notify(self, method: str, params: dict[str, Any] | None) -> None: ...

    async def progress(self, progress: float, total: float | None, message: str | None) -> None: ...

    async def notify_related(self, method: str, params: dict[str, Any] | None) -> None:
        """A notification about this request, on its own stream (logging, say)."""
        ...


@dataclass
class DownstreamSession:
    """Per-client state. `key` is the transport's session id (or one fixed key for stdio)."""

    gateway: Gateway
    key: str
    era: Era
    principal: Principal | None = None
    client_params: dict[str, Any] | None = None
    upstreams: dict[str, UpstreamConnection] = field(default_factory=dict)
    #: The upstream sessions being opened for it (not yet in `upstreams`): ending the session closes them too.
    opening: list[UpstreamConnection] = field(default_factory=list)
    #: Closed by the gateway (`Gateway.close_session`): it opens no upstream session any more.
    ended: bool = False
    catalog: Catalog | None = None
    advertised: dict[str, set[str]] = field(default_factory=dict)
    #: What each page of a paginated listing showed, by the cursor it was asked with (None: the first page):
    #: listing a page again replaces that page's items, never those of the other pages.
    shown_pages: dict[str, dict[str | None, set[str]]] = field(default_factory=dict)
    inflight: list[Downstream] = field(default_factory=list)
    standalone: Downstream | None = None
    last_used: float = 0.0
    #: Why the client ended the session with calls in flight (`end_calls`): those calls, and any after, answer it.
    end_reason: str | None = None
    _opening: anyio.Lock = field(default_factory=anyio.Lock)
    _call_scopes: set[anyio.CancelScope] = field(default_factory=set)

    # ------------------------------------------------------------------ upstream sessions

    async def connections(self) -> dict[str, UpstreamConnection]:
        """This session's upstream connections; legacy sessions open their own on first use."""
        if self.upstreams:
            return self.upstreams
        if self.era != "legacy":
            self.upstreams = dict(self.gateway.shared)
            return self.upstreams
        async with self._opening:
            if not self.upstreams:
                self.upstreams = await self.gateway.open_session_upstreams(self)
        return self.upstreams

    def context(self, upstream: str | None, request_id: Any = None) -> InvocationContext:
        # Every value is ours and of its field's type already: built without validation, one per message.
        return InvocationContext.trusted(
            {
                # The request's own token: a session outlives tokens, and a later one may carry other claims.
                "principal": current_principal() or self.principal,
                "session_id": self.gateway.stdio_session_id if self.key == STDIO_SESSION_KEY else self.key,
                "server": upstream,
                "trace_id": None if request_id is None else str(request_id),
                "timestamp": now_iso(),  # stamped once here rather than copied per chain
            }
        )

    def invalidate(self, list_method: str | None = None) -> None:
        """Forget listings (and what was advertised) after a `list_changed`."""
        self.catalog = None
        if list_method is None:
            self.advertised.clear()
            self.shown_pages.clear()
        else:
            self.advertised.pop(list_method, None)
            self.shown_pages.pop(list_method, None)

    # ------------------------------------------------------------------ requests from the client

    def end_calls(self, why: str) -> bool:
        """The client is ending the session: every request in flight is cancelled (an upstream request with
        `notifications/cancelled`) and answered -32000 with `why`, as is any that comes after. Whether there
        was any in flight."""
        self.end_reason = why
        for scope in self._call_scopes:
            scope.cancel()
        return bool(self._call_scopes)

    def _ended_error(self) -> MCPError | None:
        """What a request of a session `end_calls` ended is answered (None: the session goes on)."""
        if self.end_reason is None:
            return None
        message = f"{self.end_reason}: this request was cancelled"
        return MCPError(CONNECTION_CLOSED, message, {"reason": "session_ended"})

    async def handle(
        self, method: str, params: dict[str, Any] | None, downstream: Downstream, request_id: Any
    ) -> dict[str, Any]:
        """Serve one forwarded request; raises `MCPError` for the client."""
        if self.era != "legacy":  # only a handshake-era client ends its session's calls (`end_calls`)
            return await self._measured(method, params, downstream, request_id)
        if self.end_reason is None:
            with anyio.CancelScope() as scope:
                self._call_scopes.add(scope)
                try:
                    return await self._measured(method, params, downstream, request_id)
                finally:
                    self._call_scopes.discard(scope)
        ended = self._ended_error()
        assert ended is not None, "a call's scope ends it without an answer only when `end_calls` cancels it"
        raise ended

    async def _measured(
        self, method: str, params: dict[str, Any] | None, downstream: Downstream, request_id: Any
    ) -> dict[str, Any]:
        metrics = self.gateway.metrics
        if metrics is None:
            return await self._handle(method, params, downstream, request_id)
        outcome: Outcome = "error"
        try:
            result = await self._handle(method, params, downstream, request_id)
            outcome = "ok"
            return result
        except BlockedError:
            outcome = "blocked"
            raise
        except anyio.get_cancelled_exc_class():
            outcome = "cancelled"  # the client cancelled it (or the gateway is stopping): no error was answered
            raise
        finally:
            upstream = self.gateway.server_of(self, method, "request", params)
            if upstream is None and method in LISTS and len(self.gateway.config.upstreams) == 1:
                upstream = next(iter(self.gateway.config.upstreams))  # a listing of the only upstream
            metrics.request_done(upstream, method, outcome)

    async def _handle(
        self, method: str, params: dict[str, Any] | None, downstream: Downstream, request_id: Any
    ) -> dict[str, Any]:
        if (refused := task_refusal(method, params)) is not None:
            if method in LISTS or method in CALLS or method == "completion/complete":
                await self._refused(None, method, refused, request_id)  # a governed call: the trail says why not
            raise refused  # before any chain or upstream: a task's result would bypass both
        self.inflight.append(downstream)
        if self.standalone is None:
            self.standalone = downstream
        try:
            if method in LISTS:
                result = await self._list(method, params, request_id)
            elif method in CALLS or method == "completion/complete":
                result = await self._call(method, params, downstream, request_id)
            elif method == "logging/setLevel":
                result = await self._broadcast(method, params)
            else:
                result = await self._passthrough(method, params, downstream)
        except MCPError as exc:
            # Calls and listings raise theirs scrubbed already (and the scrubber knows them: not scanned again);
            # the rest (an upstream's error to a method passed through, to `logging/setLevel`) are scrubbed here.
            _reraise(exc, self.scrub_error(exc))
        finally:
            self.inflight.remove(downstream)
        if self.era == "2026-07-28":
            return shape_modern(method, result, lambda: self.gateway.server.server_info_stamp)
        return shape_handshake(result)

    async def _list(self, method: str, params: dict[str, Any] | None, request_id: Any) -> dict[str, Any]:
        """A listing, governed per upstream (so `context.server` names the owner of every item)."""
        governor = self.gateway.governor
        record = self.gateway.new_record(self.context(None, request_id))
        try:
            if (params or {}).get("cursor") is not None and (count := len(await self.connections())) > 1:
                # A merged listing is one page (no `nextCursor`): any cursor is one this gateway never gave.
                raise MCPError(
                    INVALID_PARAMS,
                    f"Invalid cursor: the listing merged from {count} upstreams has a single page",
                    {"field": "cursor"},
                )
            params = await governor.govern_request(method, params, record.context, record)
            conns = await self.connections()
            cursor = (params or {}).get("cursor")
            sent = {"method": method, "params": _recorded(params)}
            await record.dispatched(executed=sent, intent=sent)
        except MCPError as exc:
            await self._refused(record, method, exc, request_id)
        except anyio.get_cancelled_exc_class():
            await record.cancelled(method, self._ended_error())
            raise
        try:
            if len(conns) == 1:
                name, conn = next(iter(conns.items()))
                result = await conn.request(method, params)
                result = self._expose_single(method, name, result)
                listed = result
                result = await governor.govern_response(method, result, self.context(name, request_id), record)
                if result.get("cacheScope") == "public" and result != listed:
                    # The chain shaped this listing for this caller (its principal, say): not one to share.
                    result = {**result, "cacheScope": "private"}
            else:
                result = await self._merged_listing(method, request_id, record)
        except MCPError as exc:
            # A listing that fails (a guard blocked it, say) shows nothing: nothing listed before stays callable.
            self.advertised.pop(method, None)
            self.shown_pages.pop(method, None)
            await self._failed(record, method, exc)
        except anyio.get_cancelled_exc_class():
            await record.cancelled(method, self._ended_error())
            raise
        pages = self.shown_pages.setdefault(method, {})
        pages[cursor] = advertised_keys(method, result)
        self.advertised[method] = set().union(*pages.values())
        return await self._settled(result, record)

    async def _settled(self, result: dict[str, Any], record: CallRecord) -> dict[str, Any]:
        """Wait for the call's records to be durable; an opted-in client gets its receipt in `_meta`."""
        if not record.enabled:
            return result
        receipts = await record.settle()
        meta = receipt_meta(receipts) if self.gateway.config.audit.receipts else None
        if meta is None:
            return result
        return {**result, "_meta": {**(result.get("_meta") or {}), RECEIPT_META_KEY: meta}}

    def _expose_single(self, method: str, upstream: str, result: dict[str, Any]) -> dict[str, Any]:
        """Add one page of a single upstream's listing to the catalog; an item listed again replaces its old
        entry, and the items of other pages stay (a client may list page 1 again after reading page 3)."""
        prefix = self.gateway.prefixes.get(upstream, "")
        items_key, key_name = LISTS[method]
        page = build_catalog({upstream: {method: list(result.get(items_key) or [])}}, {upstream: prefix})
        self.catalog = self.catalog or Catalog()
        self.catalog.routes.setdefault(method, {}).update(page.routes[method])
        fresh = page.routes[method].keys()
        kept = [item for item in self.catalog.items.get(method, []) if item.get(key_name) not in fresh]
        self.catalog.items[method] = kept + page.items[method]
        if page.templates:
            texts = {text for text, _, _ in page.templates}
            self.catalog.templates = [entry for entry in self.catalog.templates if entry[0] not in texts]
            self.catalog.templates.extend(page.templates)
        if prefix and method in ("tools/list", "prompts/list"):
            return {**result, items_key: page.items[method]}
        return result

    async def _merged_listing(self, method: str, request_id: Any, record: CallRecord) -> dict[str, Any]:
        """Every page from every upstream, exposed under prefixes, each upstream's part governed on its own."""
        catalog = await self.refresh_catalog(methods=(method,))
        items_key, key = LISTS[method]
        routes = catalog.routes[method]
        governed: list[dict[str, Any]] = []
        for upstream in await self.connections():
            mine = [item for item in catalog.listing(method) if routes[item[key]].upstream == upstream]
            result = await self.gateway.governor.govern_response(
                method, {items_key: mine}, self.context(upstream, request_id), record.for_server(upstream)
            )
            governed.extend(item for item in result.get(items_key) or [] if isinstance(item, dict))
        return {items_key: governed}

    async def refresh_catalog(self, methods: tuple[str, ...] = tuple(LISTS)) -> Catalog:
        """Fetch every page of `methods` from every upstream and merge them under their prefixes."""
        conns = await self.connections()
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
        fresh = build_catalog(listings, self.gateway.prefixes)
        if self.catalog is None:
            self.catalog = Catalog()
        for method in methods:
            self.catalog.items[method] = fresh.items[method]
            self.catalog.routes[method] = fresh.routes[method]
        if "resources/templates/list" in methods:
            self.catalog.templates = fresh.templates
        return self.catalog

    async def _call(
        self, method: str, params: dict[str, Any] | None, downstream: Downstream, request_id: Any
    ) -> dict[str, Any]:
        governor = self.gateway.governor
        list_method = CALLS[method][0] if method in CALLS else "prompts/list"
        record: CallRecord | None = None
        try:
            if self.gateway.config.advertised_equals_callable and list_method not in self.advertised:
                # What this session is shown comes first: guards learn from listings (schemas, pins).
                await self.compute_advertised(list_method)
            route = await self._route(method, params)
            context = self.context(route.upstream, request_id)
            record = self.gateway.new_record(context)
            try:
                await self._govern_input_responses(params, context, record)
            except (MCPError, InterceptorsError) as exc:
                self._abandon_bridged((params or {}).get("requestState"), exc)  # the answer is refused: so is the call
                raise
            client_params = params  # as sent: what a bridged call's retries must repeat (see `_forward`)
            params = await governor.govern_request(method, params, context, record)
            route = await self._route(method, params, check=True)  # policy runs on the final payload
            conns = await self.connections()
            upstream_params = _renamed(method, params, route)
            conn = conns[route.upstream]
            relay = _relay(downstream, params)
            if record.enabled:  # built only when there is a trail
                # What goes upstream is the approved payload, renamed for the upstream: intent and executed alike.
                sent = {"method": method, "params": _recorded(upstream_params)}
                await record.dispatched(executed=sent, intent=sent)
        except MCPError as exc:
            await self._refused(record, method, exc, request_id)
        except anyio.get_cancelled_exc_class():
            if record is not None:  # cancelled while its request chain ran, or after: closed before dispatch
                await record.cancelled(method, self._ended_error())
            raise
        try:
            headers = self._param_headers(conn, method, (params or {}).get("name"), upstream_params.get("arguments"))
            result = await self._forward(
                conn, method, upstream_params, context, downstream, relay, record, headers, client_params=client_params
            )
        except MCPError as exc:
            await self._failed(record, method, exc)
        except anyio.get_cancelled_exc_class():
            await record.cancelled(method, self._ended_error())  # the client gave up on the call: the trail says so
            raise
        return await self._settled(result, record)

    async def _refused(self, record: CallRecord | None, method: str, exc: MCPError, request_id: Any) -> NoReturn:
        """Record a governed request the gateway refused before dispatching it (unknown, not advertised,
        malformed, a task, an upstream it needed being down), unless a chain's verdict recorded it already,
        and raise it, scrubbed (`scrub.errors`: a listing fetched to route a call may have failed upstream)."""
        scrubbed = self.scrub_error(exc)
        if record is None and self.gateway.audit_writer is not None:
            record = self.gateway.new_record(self.context(None, request_id))
        if record is not None:
            upstream_failed = isinstance(exc, (UpstreamUnavailableError, UpstreamTimeoutError))
            await record.refused(method, scrubbed, upstream_failed=upstream_failed)
        _reraise(exc, scrubbed)

    async def _failed(self, record: CallRecord, method: str, exc: MCPError) -> NoReturn:
        """Record a call's error and raise it, scrubbed (`scrub.errors`) for the trail and the client alike."""
        scrubbed = self.scrub_error(exc)
        await record.failed(method, scrubbed.code, scrubbed.message)
        await record.settle()
        _reraise(exc, scrubbed)

    def scrub_error(self, exc: MCPError) -> MCPError:
        scrubber = self.gateway.scrubber
        return exc if scrubber is None else scrubber.error(exc)

    def scrub_result(self, result: dict[str, Any]) -> dict[str, Any]:
        scrubber = self.gateway.scrubber
        if scrubber is None:
            return result
        scrubbed: dict[str, Any] = scrubber.result(result)
        return scrubbed

    async def _forward(
        self,
        conn: UpstreamConnection,
        method: str,
        upstream_params: dict[str, Any],
        context: InvocationContext,
        downstream: Downstream,
        relay: Callable[..., Awaitable[None]] | None,
        record: CallRecord,
        headers: dict[str, str],
        *,
        client_params: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        """Send the call and govern what comes back, including `input_required` rounds."""
        governor = self.gateway.governor
        if self.era == "2026-07-28" and conn.era == "legacy":
            # What a retry of this call must repeat: the client's request, as sent, but for its answers.
            asked = {"method": method, "params": _without_meta(_without_answers(client_params))}
            result = await self._bridged_call(conn, method, upstream_params, downstream, relay, asked)
        else:
            result = await conn.request(
                method, upstream_params, on_progress=relay, headers=headers, on_notify=downstream.notify_related
            )
        for _ in range(MAX_INPUT_ROUNDS):
            if result.get("resultType") != "input_required":
                if method == "completion/complete":  # no event: no guard sees the values (D18)
                    result = self.scrub_result(result)
                return await governor.govern_response(method, result, context, record)
            try:
                governed = await self._govern_input_requests(result, context, record)
            except (MCPError, InterceptorsError) as exc:
                self._abandon_bridged(result.get("requestState"), exc)  # a question is refused: so is the call
                raise
            if self.era != "legacy":
                await record.answered(Leg(method, "response", None, result), governed)
                return governed  # a 2026-07-28 client answers and retries itself
            # Bridge: a handshake-era client gets the embedded requests as ordinary server requests.
            state = result.get("requestState")
            answers = await self._ask_client(governed.get("inputRequests") or {}, state, downstream, context, record)
            retry = {**upstream_params, "inputResponses": answers, "requestState": state}
            result = await conn.request(method, retry, on_progress=relay, headers=headers)
        raise MCPError(-32603, f"{method}: upstream asked for input more than {MAX_INPUT_ROUNDS} times")

    async def _bridged_call(
        self,
        conn: UpstreamConnection,
        method: str,
        params: dict[str, Any],
        downstream: Downstream,
        relay: Callable[..., Awaitable[None]] | None,
        asked: dict[str, Any],
    ) -> dict[str, Any]:
        """A 2026-07-28 client on a handshake-era upstream: its requests to the client become input requests.

        The request now waiting (the first, then each retry) gets the upstream's progress and log lines;
        if it is cancelled, so is the upstream call.
        """
        bridges = self.gateway.bridges
        token = params.get("requestState")  # an explicit null counts as absent, as in mcp's servers
        bridged = bridges.find(token, self.key)
        if token is not None and bridged is None:
            # A retry of a call that is over (answered, abandoned or from before a restart), or a token
            # this gateway never minted: refused as a direct server would, never run again.
            raise MCPError(
                INVALID_PARAMS,
                "Invalid or expired requestState",
                {"reason": "invalid_request_state", "field": "requestState"},
            )
        if bridged is None:
            body = _without_answers(params)

            async def call(bridged: BridgedCall) -> dict[str, Any]:
                return await conn.request(method, body, on_progress=bridged.progress, on_notify=bridged.notify)

            bridged = bridges.start(self.gateway.task_group, self.key, conn.name, call)
            bridged.request = asked
        elif bridged.request != asked:
            # A retry is the same request plus answers: another tool or other arguments would be governed
            # (and recorded) as sent while the call its token names went on.
            raise MCPError(
                INVALID_PARAMS,
                "requestState was issued for another request (a retry must repeat the request's method and params)",
                {"reason": "request_state_mismatch", "field": "requestState"},
            )
        if bridged.waiting:
            bridged.resume_refused()
        bridged.on_progress, bridged.on_notify = relay, downstream.notify_related
        answers = params.get("inputResponses")
        try:
            return await bridged.resume(answers if isinstance(answers, dict) else {})
        except anyio.get_cancelled_exc_class():
            bridged.scope.cancel()  # the client gave up on the call: so does the upstream
            raise
        finally:
            bridged.on_progress = bridged.on_notify = None

    def _abandon_bridged(self, token: Any, exc: MCPError | InterceptorsError) -> None:
        """End the bridged call `token` names, if any: its client was refused, so the upstream is too."""
        bridged = self.gateway.bridges.find(token, self.key) if self.era == "2026-07-28" else None
        if bridged is not None:
            bridged.abandon(exc if isinstance(exc, MCPError) else MCPError(exc.code, exc.message, exc.data))

    def _param_headers(self, conn: UpstreamConnection, method: str, exposed: Any, arguments: Any) -> dict[str, str]:
        """`Mcp-Param-*` headers a 2026-07-28 HTTP upstream expects for a tool's `x-mcp-header` arguments."""
        if method != "tools/call" or not conn.is_http or conn.era != "2026-07-28" or self.catalog is None:
            return {}
        tool = self.catalog.item("tools/list", exposed) if isinstance(exposed, str) else None
        schema = tool.get("inputSchema") if tool is not None else None
        if not isinstance(schema, Mapping) or not isinstance(arguments, Mapping):
            return {}
        return mcp_param_headers(x_mcp_header_map(schema), arguments)

    async def _ask_client(
        self,
        requests: Mapping[str, Any],
        state: Any,
        downstream: Downstream,
        context: InvocationContext,
        record: CallRecord,
    ) -> dict[str, Any]:
        """Bridge: a handshake-era client answers a 2026-07-28 upstream's input requests as server requests.

        Each answer closes the audit call its request opened (`_govern_input_requests`), as a 2026-07-28
        client's retry does, so request and answer make one compound receipt."""
        answers: dict[str, Any] = {}
        try:
            for key, request in requests.items():
                method, params = request.get("method"), request.get("params")
                opened = self.gateway.close_input(self.key, state, str(key)) if isinstance(state, str) else None
                linked = opened is not None and opened.method == method and bool(opened.call_id)
                answer_record = record.embedded(opened.call_id if opened is not None and linked else None)
                try:
                    answer = await downstream.request(method, params)
                except MCPError as exc:
                    scrubbed = self.scrub_error(exc)
                    if linked:
                        await answer_record.failed(method, scrubbed.code, scrubbed.message)
                    _reraise(exc, scrubbed)
                except anyio.get_cancelled_exc_class():
                    if linked:
                        await answer_record.cancelled(method)
                    raise
                if method in GOVERNED_EVENTS:
                    answer = await self.gateway.governor.govern_response(method, answer, context, answer_record)
                answers[key] = answer
        except BaseException:
            if isinstance(state, str):  # the requests not asked yet never will be
                unasked = [(self.key, state, str(key)) for key in requests if key not in answers]
                with anyio.CancelScope(shield=True):
                    await self.gateway.forget_inputs("the call ended before the client was asked it", unasked)
            raise
        return answers

    async def _route(self, method: str, params: Mapping[str, Any] | None, *, check: bool = False) -> Route:
        """Where the call goes; with `check`, refuse anything this session was not advertised."""
        if method == "completion/complete":
            return await self._route_completion(params)
        list_method, key_name = CALLS[method]
        key = (params or {}).get(key_name)
        if not isinstance(key, str):
            raise MCPError(INVALID_PARAMS, f"{method}: params.{key_name} must be a string", {"field": key_name})
        enforce = check and self.gateway.config.advertised_equals_callable
        # What this session was shown, held here: a `list_changed` while the catalog is fetched below
        # drops `self.advertised`, and must not make an item just shown (and still listed) uncallable.
        shown = await self.compute_advertised(list_method) if enforce else {}
        needed = (list_method, "resources/templates/list") if list_method == "resources/list" else (list_method,)
        missing = tuple(m for m in needed if self.catalog is None or m not in self.catalog.routes)
        if missing:
            await self.refresh_catalog(missing)
        assert self.catalog is not None
        route = self.catalog.route(method, key)
        if route is None and await self._owner_back(list_method, key):
            self.invalidate(list_method)  # listed while it restarted: list again, with its items
            return await self._route(method, params, check=check)
        if route is None or (enforce and not self._was_advertised(shown, list_method, key)):
            kind = {"tools/list": "tool", "prompts/list": "prompt"}.get(list_method, "resource")
            data = {"reason": "not advertised to this session", key_name: key, "event": method}
            if kind == "resource":  # resource-not-found as a server sends it: clients recognise `{uri}` alone
                data = {key_name: key}
            raise MCPError(INVALID_PARAMS, f"Unknown {kind}: {key}", data)
        return route

    async def _owner_back(self, list_method: str, key: str) -> bool:
        """For a tool or prompt not in the listing, under the prefix of an upstream that is down: whether
        that upstream is back after a request's wait for it (a restart). If it does not come back, or never
        connected, the call gets its error naming it rather than "Unknown tool"."""
        if list_method not in PREFIXED_LISTS:
            return False
        conns = self.upstreams or self.gateway.shared
        for name, prefix in self.gateway.prefixes.items():
            conn = conns.get(name)
            if not prefix or not key.startswith(prefix + SEPARATOR) or conn is None or conn.up:
                continue
            if conn.info is None or not await conn.wait_up():  # never connected: not worth a wait
                raise conn.unavailable()
            return True
        return False

    def _was_advertised(self, shown: Mapping[str, set[str]], list_method: str, key: str) -> bool:
        if key in shown.get(list_method, set()):
            return True
        if list_method != "resources/list" or self.catalog is None:
            return False
        templates = shown.get("resources/templates/list", set())
        if key in templates:  # a template's own text (a completion's `ref/resource`)
            return True
        return any(tpl.match(key) is not None for text, tpl, _ in self.catalog.templates if text in templates)

    async def compute_advertised(self, list_method: str) -> dict[str, set[str]]:
        """What this session would be shown: the listing after the response chain, computed on demand.

        Returns the keys shown per listing (`list_method`'s, and resource templates' with resources) as
        they are now, which a `list_changed` arriving later does not take back from the caller."""
        methods = (list_method, "resources/templates/list") if list_method == "resources/list" else (list_method,)
        shown: dict[str, set[str]] = {}
        for method in methods:
            keys = self.advertised.get(method)
            if keys is None:  # else listed by the client already (maybe several pages): keep that
                try:
                    keys = await self._list_every_page(method)
                except MCPError as exc:
                    if exc.code != METHOD_NOT_FOUND:
                        raise
                    keys = self.advertised[method] = set()
            shown[method] = keys
        return shown

    async def _list_every_page(self, method: str) -> set[str]:
        """Every page of a listing, each governed as if the client had asked for it: a call may name an item
        of any page, and a client need not list before it calls."""
        keys: set[str] = set()
        cursor: str | None = None
        for _ in range(MAX_LISTING_PAGES):
            result = await self._list(method, None if cursor is None else {"cursor": cursor}, None)
            keys |= advertised_keys(method, result)
            cursor = result.get("nextCursor")
            if not isinstance(cursor, str) or not cursor:
                break
        return keys

    async def _route_completion(self, params: Mapping[str, Any] | None) -> Route:
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
            return await self._route("prompts/get", {"name": value}, check=True)
        return await self._route("resources/read", {"uri": value}, check=True)

    async def _govern_input_requests(
        self, result: dict[str, Any], context: InvocationContext, record: CallRecord
    ) -> dict[str, Any]:
        """2026-07-28: each embedded sampling/elicitation/roots request runs its own request chain."""
        requests = result.get("inputRequests")
        if not isinstance(requests, Mapping):
            return result
        governed: dict[str, Any] = {}
        state = result.get("requestState")
        # Recorded as sent once every one is approved: a denied one stops the round, and its siblings with it.
        approved: list[tuple[str, str, CallRecord, dict[str, Any]]] = []
        current: tuple[str, CallRecord] | None = None
        try:
            for key, request in requests.items():
                method = request.get("method") if isinstance(request, Mapping) else None
                if isinstance(method, str) and method in GOVERNED_EVENTS:
                    embedded = record.embedded()
                    current = (method, embedded)
                    params = request.get("params")
                    if self.era == "legacy":  # bridged to a handshake-era client: what it is sent is governed
                        params = _for_handshake_client(method, params)
                    params = await self.gateway.governor.govern_request(method, params, context, embedded)
                    approved.append((str(key), method, embedded, {"method": method, "params": _recorded(params)}))
                    governed[key] = {**request, "params": params}
                else:
                    governed[key] = request
        except BaseException as exc:
            await _withheld(approved, current, exc)
            raise
        for key, method, embedded, sent in approved:
            await embedded.dispatched(executed=sent, intent=sent)
            if isinstance(state, str):  # its answer comes with the retry
                opened = OpenInput(method, embedded.call_id, context) if record.enabled else OpenInput(method)
                await self.gateway.open_input(self.key, state, key, opened)
        return {**result, "inputRequests": governed}

    async def _govern_input_responses(
        self, params: dict[str, Any] | None, context: InvocationContext, record: CallRecord
    ) -> None:
        """2026-07-28 retry (of any call that can ask for input): the client's answers run the response chain
        of the request they answer: the one the gateway sent under that key (it remembers them), and every
        one the answer's shape could be read as (roots with an `action`, say), so no guard is skipped."""
        responses = (params or {}).get("inputResponses")
        if not isinstance(responses, dict):
            return
        state = (params or {}).get("requestState")
        for key, value in list(responses.items()):
            # The request it answers; its audit call, so request and answer make one compound receipt.
            opened = self.gateway.close_input(self.key, state, str(key)) if isinstance(state, str) else None
            methods = input_response_methods(value)
            if opened is not None and opened.method not in methods:
                methods = (opened.method, *methods)
            answer_record: CallRecord | None = None
            try:
                if methods and not isinstance(value, dict):
                    raise MCPError(
                        INVALID_PARAMS,
                        f"inputResponses.{key} must be an object: the result of the {methods[0]} request it answers",
                        {"field": f"inputResponses.{key}"},
                    )
                for method in methods:
                    linked = opened is not None and opened.method == method and bool(opened.call_id)
                    answer_record = record.embedded(opened.call_id if opened is not None and linked else None)
                    value = await self.gateway.governor.govern_response(method, value, context, answer_record)
            except BaseException:
                if opened is not None and isinstance(state, str):  # still unanswered: a later retry is governed alike
                    if answer_record is not None and answer_record.ended:  # its audit call is closed (denied)
                        opened = OpenInput(opened.method)
                    await self.gateway.open_input(self.key, state, str(key), opened)
                raise
            responses[key] = value

    async def subscription_owner(self, uri: str) -> UpstreamConnection | None:
        """Where a 2026-07-28 client's `resourceSubscriptions` entry goes: refused as its `resources/subscribe`
        would be (not advertised to it), and None unless the owner's connection is in the handshake era and
        can subscribe (a 2026-07-28 upstream connection: see Known limits in the README)."""
        route = await self._route("resources/subscribe", {"uri": uri}, check=True)
        conn = (await self.connections())[route.upstream]
        resources = conn.info.capabilities.get("resources") if conn.info is not None else None
        if conn.era != "legacy" or not isinstance(resources, Mapping) or not resources.get("subscribe"):
            return None
        return conn

    async def subscribe(self, uri: str, downstream: Downstream, request_id: Any) -> None:
        """A 2026-07-28 client's `resourceSubscriptions` entry as the `resources/subscribe` that era lacks:
        governed, recorded and forwarded as one."""
        await self._call("resources/subscribe", {"uri": uri}, downstream, request_id)

    async def _broadcast(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        conns = await self.connections()
        logging = [conn for conn in conns.values() if conn.info is not None and "logging" in conn.info.capabilities]
        if not logging:  # what a server without the logging capability answers (and the gateway advertises none)
            raise MCPError(METHOD_NOT_FOUND, "Method not found", method)
        # 2026-07-28 has no logging/setLevel: for a handshake-era client the level rides in each request's envelope.
        in_envelope = [conn for conn in logging if conn.era == "2026-07-28" and self.era == "legacy"]
        level = (params or {}).get("level")
        if in_envelope and level not in LOG_LEVELS:
            raise MCPError(INVALID_PARAMS, f"level must be one of {', '.join(LOG_LEVELS)}", {"field": "level"})
        for conn in logging:
            if conn in in_envelope:
                conn.log_level = level
            else:
                await conn.request(method, params)
        return {}

    async def _passthrough(self, method: str, params: dict[str, Any] | None, downstream: Downstream) -> dict[str, Any]:
        conns = await self.connections()
        if len(conns) != 1:
            raise MCPError(
                METHOD_NOT_FOUND,
                f"Method not found: {method} cannot be routed to one of {len(conns)} upstreams",
                method,
            )
        conn = next(iter(conns.values()))
        result = await conn.request(
            method, params, on_progress=_relay(downstream, params), on_notify=downstream.notify_related
        )
        return self.scrub_result(result)  # no event: no guard sees it (D18)

    # ------------------------------------------------------------------ from the upstreams

    async def from_upstream(self, upstream: str, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        """A server-initiated request (handshake era): govern, ask the client, govern the answer."""
        context = self.context(upstream)
        governor = self.gateway.governor
        record = self.gateway.new_record(context)
        governed = method in GOVERNED_EVENTS
        if governed:
            try:
                params = await governor.govern_request(method, params, context, record)
            except anyio.get_cancelled_exc_class():
                await record.cancelled(method)  # the upstream gave up on it while its request chain ran
                raise
        target = self.inflight[-1] if self.inflight else self.standalone
        if target is None:
            refused = MCPError(INVALID_REQUEST, "no downstream client is connected to answer " + method)
            if governed:
                await record.refused(method, refused)  # never sent: recorded as the gateway's refusal, not left open
            raise refused
        if governed:
            sent = {"method": method, "params": _recorded(params)}
            await record.dispatched(executed=sent, intent=sent)
        try:
            result = await target.request(method, params)
        except MCPError as exc:
            await self._failed(record, method, exc)  # the client's error answer, for the upstream
        except anyio.get_cancelled_exc_class():
            await record.cancelled(method)  # the upstream gave up on it, or the gateway is stopping
            raise
        if method in GOVERNED_EVENTS:
            result = await governor.govern_response(method, result, context, record)
        await record.settle()
        return result

    async def upstream_notification(self, upstream: str, method: str, params: dict[str, Any] | None) -> None:
        """Relay an upstream notification; `list_changed` also drops what this session was shown."""
        if method.endswith("/list_changed"):
            list_method = method.removeprefix("notifications/").replace("list_changed", "list")
            self.invalidate(list_method if list_method in LISTS else None)
        if self.era != "legacy" or method.startswith("notifications/subscriptions/"):
            return  # 2026-07-28 clients get events on their own subscriptions/listen stream
        target = self.standalone
        if target is not None:
            await target.notify(method, params)

    async def client_notification(self, method: str, params: dict[str, Any] | None) -> None:
        """Client notifications fan out to this session's upstream sessions (handshake era)."""
        if method in ("notifications/initialized", "notifications/cancelled") or self.era != "legacy":
            return
        for conn in (await self.connections()).values():
            await conn.notify(method, params)


def _reraise(exc: MCPError, scrubbed: MCPError) -> NoReturn:
    """Raise `scrubbed` in place of `exc`, which is being handled."""
    if scrubbed is exc:
        raise exc
    raise scrubbed from None  # the original, chained, would carry what was scrubbed into tracebacks


#: `_meta` keys each connection sets for itself, so they are not part of the payload the audit trail hashes.
_PER_HOP_META = ENVELOPE_KEYS | {"progressToken"}


def _recorded(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Params as the audit trail hashes them: with the `_meta` the chain governed and the gateway forwards (a
    vendor's keys), minus what each hop sets for itself (the 2026-07-28 envelope, the progress token)."""
    body = dict(params or {})
    meta = body.pop("_meta", None)
    if isinstance(meta, Mapping):
        meta = {key: value for key, value in meta.items() if key not in _PER_HOP_META}
    if meta:
        body["_meta"] = meta
    return body


async def _withheld(
    approved: list[tuple[str, str, CallRecord, dict[str, Any]]],
    current: tuple[str, CallRecord] | None,
    exc: BaseException,
) -> None:
    """Close the audit calls of an `input_required` round that ended before it was sent: the `current`
    request's (refused, unless its chain's denial closed it; cancelled, if the call was) and those of the
    requests approved before it, none of which was sent."""
    why = exc if isinstance(exc, (MCPError, InterceptorsError)) else None
    stopped = current[1] if current is not None and why is not None else None
    if current is not None:
        method, embedded = current
        if isinstance(exc, MCPError):
            await embedded.refused(method, exc)
        elif stopped is None:
            await embedded.cancelled(method)
    for _, method, embedded, _ in approved:
        if stopped is not None and why is not None:
            await embedded.withheld(method, stopped, why)
        else:
            await embedded.cancelled(method)


def _for_handshake_client(method: str, params: Any) -> Any:
    """A 2026-07-28 input request as a handshake-era client must get it: URL-mode elicitation there requires
    an `elicitationId`, which 2026-07-28 removed (a client refuses the request without one)."""
    if (
        method == "elicitation/create"
        and isinstance(params, Mapping)
        and params.get("mode") == "url"
        and not isinstance(params.get("elicitationId"), str)
    ):
        return {**params, "elicitationId": uuid.uuid4().hex}
    return params


def _without_meta(params: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (params or {}).items() if k != "_meta"}


def _without_answers(params: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (params or {}).items() if k not in ("inputResponses", "requestState")}


def _renamed(method: str, params: Mapping[str, Any] | None, route: Route) -> dict[str, Any]:
    """`params` as the upstream knows them: the tool or prompt under its own name, not the exposed (prefixed) one,
    whether named by `params.name` or by a completion's `params.ref.name`."""
    renamed = dict(params or {})
    if CALLS.get(method, ("", ""))[1] == "name":
        renamed["name"] = route.name
    ref = renamed.get("ref")
    if method == "completion/complete" and isinstance(ref, Mapping) and ref.get("type") == "ref/prompt":
        renamed["ref"] = {**ref, "name": route.name}
    return renamed


def _relay(downstream: Downstream, params: Mapping[str, Any] | None) -> Callable[..., Awaitable[None]] | None:
    """Relay upstream progress to the client when it asked for progress."""
    meta = (params or {}).get("_meta")
    if not isinstance(meta, Mapping) or "progressToken" not in meta:
        return None

    async def relay(progress: float, total: float | None, message: str | None) -> None:
        await downstream.progress(progress, total, message)

    return relay


async def fetch_all_pages(conn: UpstreamConnection, method: str) -> list[dict[str, Any]]:
    """Every item of a paginated list; an upstream without the capability contributes nothing."""
    capability = _LIST_CAPABILITY.get(method)
    if conn.info is not None and capability and capability not in conn.info.capabilities:
        return []
    items_key, _ = LISTS[method]
    items: list[dict[str, Any]] = []
    cursor: str | None = None
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
    return items


def shape_modern(
    method: str, result: dict[str, Any], server_info: Callable[[], dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Fill the 2026-07-28 envelope a result may lack (merged listings, handshake-era upstreams).

    A merged or bridged listing has no single upstream's cache hint, so it is marked uncacheable; a result
    without a `serverInfo` stamp gets `server_info()` (the gateway's, a fresh copy: made only when needed),
    as mcp's server stamps its own.
    """
    result_type = result.get("resultType")
    needs_hints = method in CACHEABLE_METHODS and result_type in (None, "complete")
    shaped = result
    if result_type is None or (needs_hints and ("ttlMs" not in result or "cacheScope" not in result)):
        shaped = {"resultType": "complete", **result}
        if needs_hints:
            shaped.setdefault("ttlMs", 0)
            shaped.setdefault("cacheScope", "private")
    meta = shaped.get("_meta", {})
    if server_info is not None and isinstance(meta, dict) and meta.get(SERVER_INFO_META_KEY) is None:
        shaped = {**shaped, "_meta": {**meta, SERVER_INFO_META_KEY: server_info()}}
    return shaped


#: What only 2026-07-28 results carry: a handshake-era client's results never show them.
_MODERN_RESULT_KEYS = ("ttlMs", "cacheScope")


def shape_handshake(result: dict[str, Any]) -> dict[str, Any]:
    """A 2026-07-28 upstream's result as a handshake-era server would send it: without `resultType`
    (`complete`; `input_required` rounds are bridged before this), the cache hints, or the `serverInfo`
    stamp (the client has the gateway's from `initialize`)."""
    meta = result.get("_meta")
    stamped = isinstance(meta, dict) and SERVER_INFO_META_KEY in meta
    if not stamped and result.get("resultType") != "complete" and not any(k in result for k in _MODERN_RESULT_KEYS):
        return result
    shaped = {k: v for k, v in result.items() if k not in _MODERN_RESULT_KEYS}
    if shaped.get("resultType") == "complete":
        del shaped["resultType"]
    if stamped:
        assert isinstance(meta, dict)
        kept = {k: v for k, v in meta.items() if k != SERVER_INFO_META_KEY}
        if kept:
            shaped["_meta"] = kept
        else:
            del shaped["_meta"]
    return shaped


def input_response_methods(value: Any) -> tuple[str, ...]:
    """Which client features an `inputResponses` entry may answer, from its shape: every one it could be
    read as (an upstream reads the fields it asked for and ignores the others)."""
    if not isinstance(value, Mapping):
        return ()
    methods = []
    if "action" in value:
        methods.append("elicitation/create")
    if "roots" in value:
        methods.append("roots/list")
    if "role" in value or "model" in value:
        methods.append("sampling/createMessage")
    return tuple(methods)
