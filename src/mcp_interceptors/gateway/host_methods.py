"""The gateway as an interceptor host: it answers `interceptors/list` (what it enforces), `interceptor/invoke`
and, opt-in, `interceptor/executeChain`, taking nothing a client says on trust (spec §7). Clients' invocations
run against instances of their own (`client_scope.py`), never the state the gateway's chains use.

The context is the one the gateway's own legs would set for the caller (principal, session, server); a
payload too deeply nested is refused; results become wire bodies or errors naming the interceptor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mcp import MCPError
from mcp.server import Server, ServerRequestContext
from pydantic import ValidationError

from mcp_interceptors.executor import Call, ChainResult
from mcp_interceptors.gateway.client_scope import ClientScope
from mcp_interceptors.gateway.config import GatewayConfig
from mcp_interceptors.gateway.listings import Listings
from mcp_interceptors.gateway.recording import RECEIPT_META_KEY, Leg, receipt_meta
from mcp_interceptors.gateway.reply import Replies
from mcp_interceptors.gateway.session import DownstreamSession
from mcp_interceptors.host import parse_invoke_params
from mcp_interceptors.invoker import Chain
from mcp_interceptors.planning import direction_for
from mcp_interceptors.protocol.chain import ChainExecutionParams
from mcp_interceptors.protocol.descriptors import InterceptorDescriptor
from mcp_interceptors.protocol.errors import (
    HookMismatchError,
    InterceptorExecutionError,
    InterceptorNotFoundError,
    InterceptorsError,
    unknown_interceptors_error,
)
from mcp_interceptors.protocol.invoke import (
    EXECUTE_CHAIN_METHOD,
    INVOKE_METHOD,
    LIST_METHOD,
    MAX_PAYLOAD_DEPTH,
    InvocationContext,
    RawParams,
    check_payload,
    is_too_deep,
)
from mcp_interceptors.protocol.results import InterceptorResult, MutationResult

#: Context fields the gateway knows from its own request, in every spelling a host might read.
_VOUCHED = frozenset({"principal", "sessionid", "server"})
SessionOf = Callable[[ServerRequestContext[Any, Any]], DownstreamSession]


def enforced_descriptors(chain: Chain) -> list[InterceptorDescriptor]:
    """What the gateway enforces: each interceptor once, with its configured overrides applied."""
    seen: set[str] = set()
    out = []
    for entry in chain.entries:
        if entry.name not in seen:
            seen.add(entry.name)
            out.append(entry.effective())
    return out


class HostMethods:
    """Serves the interceptor-host methods on the gateway's mcp `Server` (`register`)."""

    def __init__(
        self, config: GatewayConfig, chain: Chain, replies: Replies, listings: Listings, session_of: SessionOf
    ) -> None:
        self.config = config
        self.chain = chain
        #: What clients' invocations run against: never the gateway's own guard state unless `shared`.
        self.scope = ClientScope(config, chain)
        self.replies = replies
        self.listings = listings
        self.session_of = session_of

    def register(self, server: Server[Any]) -> None:
        if not self.scope.serves:  # `client_interceptor_methods: off`: mcp answers -32601, as a server without them
            return
        server.add_request_handler(LIST_METHOD, RawParams, self._serve_list)
        server.add_request_handler(INVOKE_METHOD, RawParams, self._serve_invoke)
        if self.config.expose_execute_chain:
            server.add_request_handler(EXECUTE_CHAIN_METHOD, RawParams, self._serve_execute_chain)

    async def _serve_list(self, ctx: ServerRequestContext[Any, Any], params: RawParams) -> dict[str, Any]:
        event = (ctx.params or {}).get("event")
        if event is not None and not isinstance(event, str):  # as the plain host answers (host.py)
            raise MCPError(-32602, "interceptors/list: `event` must be a string", data={"field": "event"})
        found = enforced_descriptors(self.chain)
        if event is not None:
            found = [d for d in found if d.matches_event(event)]
        return {"interceptors": [d.to_wire() for d in found]}

    async def _serve_invoke(self, ctx: ServerRequestContext[Any, Any], params: RawParams) -> dict[str, Any]:
        try:
            parsed = parse_invoke_params(ctx.params)
            entry = next((e for e in self.chain.entries if e.name == parsed.name), None)
            if entry is None:
                raise InterceptorNotFoundError(parsed.name)
            enforced = entry.effective()
            if not enforced.covers(parsed.event, parsed.phase):  # R22, as the gateway lists it (hooks narrowed)
                raise HookMismatchError(parsed.name, parsed.event, parsed.phase, [h.to_wire() for h in enforced.hooks])
            check_payload(parsed.payload, interceptor=parsed.name)
            check_payload(parsed.config, field="config", interceptor=parsed.name)
            context = self._host_context(ctx, parsed.context, parsed.event, parsed.phase, parsed.payload)
            configured = self.config.interceptors.config.get(parsed.name)
            update: dict[str, Any] = {"context": context}
            if configured is not None:  # the verdict the gateway enforces, not one the client configures
                update["config"] = dict(configured)
            call = Call.for_params(parsed.model_copy(update=update), entry.descriptor.type)
            result = await self.scope.source(entry.source).invoke(call)
            return result_body(result, parsed.name)
        except InterceptorsError as exc:
            raise MCPError(exc.code, exc.message, exc.data) from None

    async def _serve_execute_chain(self, ctx: ServerRequestContext[Any, Any], params: RawParams) -> dict[str, Any]:
        body = {k: v for k, v in (ctx.params or {}).items() if k != "_meta"}
        try:
            parsed = ChainExecutionParams.model_validate(body)
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            field = ".".join(str(part) for part in error["loc"])
            message = f"Invalid interceptor/executeChain params: {field}: {error['msg']}"
            raise MCPError(-32602, message, {"field": field}) from None
        try:
            check_payload(parsed.payload, event=parsed.event, phase=parsed.phase)
            check_payload(parsed.config, field="config", event=parsed.event, phase=parsed.phase)
            unknown = sorted(set(parsed.config or {}) - {d.name for d in enforced_descriptors(self.chain)})
            if unknown:  # as for `interceptors`: a misspelt name must not silently drop the caller's config
                raise unknown_interceptors_error(unknown, field="config")
            context = self._host_context(ctx, parsed.context, parsed.event, parsed.phase, parsed.payload)
            result = await self.scope.chain().execute(
                parsed.event,
                parsed.phase,
                parsed.payload,
                direction=parsed.direction or direction_for("client", parsed.event, parsed.phase),
                config={**(parsed.config or {}), **self.config.interceptors.config},
                context=context,
                timeout_ms=parsed.timeout_ms,
                interceptors=parsed.interceptors,
            )
            body = chain_body(result)
            record = self.replies.new_record(context)
            if not record.enabled:
                return body
            # A chain the gateway ran is recorded like a leg (docs/audit.md), and durable before the answer.
            leg = Leg(parsed.event, parsed.phase, result, parsed.payload)
            if result.allowed:
                await record.chain_ran(leg, result.final_payload)
                receipts = await record.settle()
            else:
                receipts = await record.denied(leg)
            meta = receipt_meta(receipts) if self.replies.receipts else None
            return body if meta is None else {**body, "_meta": {RECEIPT_META_KEY: meta}}
        except InterceptorsError as exc:
            raise MCPError(exc.code, exc.message, exc.data) from None

    def _host_context(
        self,
        ctx: ServerRequestContext[Any, Any],
        supplied: InvocationContext | None,
        event: str,
        phase: str,
        payload: Any,
    ) -> InvocationContext:
        """The context of a client's invoke or executeChain: principal and session from the gateway's own
        view of the request, exactly as its legs set them for this client, so guard state (rate limits,
        flows) is keyed the same; only the client's correlation fields pass through (spec §7)."""
        session = self.session_of(ctx)
        own = session.context(self.listings.server_of(session, event, phase, payload), ctx.request_id)
        return vouched_context(own, supplied)


def vouched_context(own: InvocationContext, supplied: InvocationContext | None) -> InvocationContext:
    """`own` (principal, session and server as the gateway's own legs set them), with the client's
    correlation fields: a client must not act as another principal or session."""
    if supplied is None:
        return own
    extra = {k: v for k, v in (supplied.model_extra or {}).items() if k.replace("_", "").lower() not in _VOUCHED}
    return InvocationContext(
        **extra,
        principal=own.principal,
        session_id=own.session_id,
        server=own.server,
        trace_id=supplied.trace_id or own.trace_id,
        span_id=supplied.span_id,
        timestamp=supplied.timestamp or own.timestamp,
    )


def result_body(result: InterceptorResult, name: str) -> dict[str, Any]:
    """The wire body of interceptor `name`'s result, or `-32603` naming it when the result cannot be sent."""
    _check_result_depth(result, name)
    try:
        return result.to_wire()
    except ValueError as exc:  # pydantic's serialization errors (not JSON, too deep) are ValueErrors
        raise InterceptorExecutionError(name, f"result is not JSON-serialisable: {exc}") from None


def chain_body(result: ChainResult) -> dict[str, Any]:
    """The `ChainExecutionResult` body; a result that cannot be sent fails as in `result_body`."""
    for each in result.results:
        _check_result_depth(each, each.interceptor or "")  # the final payload is the last applied mutator's
    try:
        return result.to_wire()
    except ValueError as exc:
        for each in result.results:
            result_body(each, each.interceptor or "")  # raises naming the interceptor whose result it was
        reason = f"chain result is not JSON-serialisable: {exc}"
        raise InterceptorsError("Interceptor chain result cannot be sent", data={"reason": reason}) from None


def _check_result_depth(result: InterceptorResult, name: str) -> None:
    if isinstance(result, MutationResult) and is_too_deep(result.payload):
        reason = f"result payload is nested more than {MAX_PAYLOAD_DEPTH} levels deep"
        raise InterceptorExecutionError(name, reason)
