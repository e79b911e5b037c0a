"""`InterceptingClient`: an `mcp.Client` whose calls and callbacks run through a `Chain`.

Outgoing requests and incoming results of server features, and incoming requests and outgoing
results of client features (sampling, elicitation, roots), are each governed at the client's
interception points with the direction the spec prescribes for a client (§5.1). A 2026-07-28 `listen`'s
resource subscriptions are governed as the `resources/subscribe` requests they replace.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from mcp import Client, MCPError
from mcp.client import ClientRequestContext
from mcp.client.session import ElicitationFnT, ListRootsFnT, SamplingFnT
from mcp.client.subscriptions import Subscription
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    CreateMessageRequestParams,
    CreateMessageResult,
    CreateMessageResultWithTools,
    ElicitRequestParams,
    ElicitResult,
    EmptyResult,
    ErrorData,
    GetPromptRequestParams,
    GetPromptResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListRootsResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    RequestParams,
    SubscribeRequestParams,
)
from pydantic import BaseModel, TypeAdapter, ValidationError

from mcp_interceptors.invoker import Chain, chain_error, invalid_payload_error, payload_problem
from mcp_interceptors.planning import direction_for
from mcp_interceptors.protocol.events import Phase
from mcp_interceptors.protocol.invoke import InvocationContext

if TYPE_CHECKING:
    from mcp import StdioServerParameters
    from mcp.client import Transport
    from mcp.server import MCPServer, Server

M = TypeVar("M", bound=BaseModel)
#: `mcp.Client` keyword arguments that go on the wire as request params: (keyword, params key).
_PARAM_KEYWORDS = (("cursor", "cursor"), ("meta", "_meta"))

_ELICIT_PARAMS: TypeAdapter[Any] = TypeAdapter(ElicitRequestParams)
_PAGINATED: TypeAdapter[Any] = TypeAdapter(PaginatedRequestParams)
#: The params each governed request must still parse as after mutation (spec §1.2: a mutator's
#: replacement is a payload of the same event), so a bad one blocks here and is never sent.
_REQUEST_PARAMS: dict[str, TypeAdapter[Any]] = {
    "tools/call": TypeAdapter(CallToolRequestParams),
    "resources/read": TypeAdapter(ReadResourceRequestParams),
    "prompts/get": TypeAdapter(GetPromptRequestParams),
    "resources/subscribe": TypeAdapter(SubscribeRequestParams),
    "tools/list": _PAGINATED,
    "prompts/list": _PAGINATED,
    "resources/list": _PAGINATED,
    "resources/templates/list": _PAGINATED,
    "sampling/createMessage": TypeAdapter(CreateMessageRequestParams),
    "elicitation/create": _ELICIT_PARAMS,
    "roots/list": TypeAdapter(RequestParams | None),
}


def dump(model: BaseModel) -> dict[str, Any]:
    """A typed mcp model as the wire JSON object a chain governs."""
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


class InterceptingClient:
    """Wraps `mcp.Client(server, ...)`; a blocked operation raises the chain's `MCPError`.

    Callbacks for sampling, elicitation and roots are wrapped the same way; a blocked one answers
    the server with the chain's JSON-RPC error. Use as `async with InterceptingClient(...) as c`.
    """

    def __init__(
        self,
        server: Server[Any] | MCPServer | Transport | StdioServerParameters | str,
        chain: Chain,
        *,
        sampling_callback: SamplingFnT | None = None,
        elicitation_callback: ElicitationFnT | None = None,
        list_roots_callback: ListRootsFnT | None = None,
        context: InvocationContext | Mapping[str, Any] | None = None,
        include_details: bool = False,
        **client_kwargs: Any,
    ) -> None:
        self.chain = chain
        self.include_details = include_details
        base = context if isinstance(context, InvocationContext) else InvocationContext.model_validate(context or {})
        self.context = base if base.session_id else base.model_copy(update={"session_id": uuid.uuid4().hex})
        self._user_sampling = sampling_callback
        self._user_elicitation = elicitation_callback
        self._user_roots = list_roots_callback
        self.client = Client(
            server,
            sampling_callback=self._sampling if sampling_callback else None,
            elicitation_callback=self._elicitation if elicitation_callback else None,
            list_roots_callback=self._roots if list_roots_callback else None,
            **client_kwargs,
        )

    async def __aenter__(self) -> InterceptingClient:
        await self.client.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.client.__aexit__(*exc)

    # ------------------------------------------------------------------ governance

    async def _govern(self, event: str, phase: Phase, payload: Any, parse: Callable[[Any], Any] | None = None) -> Any:
        """Run the chain; a block raises its `MCPError`, and so does a mutated payload that is no payload of
        `event` at `phase` (or that `parse` refuses): it is never sent nor handed to local code."""
        result = await self.chain.execute(
            event,
            phase,
            payload,
            direction=direction_for("client", event, phase),
            context=self.context,
            protocol_version=self.client.protocol_version,
        )
        if not result.allowed:
            raise chain_error(result, include_details=self.include_details)
        governed = result.final_payload
        problem = payload_problem(event, phase, governed)
        if problem is None and parse is not None:
            try:
                return parse(governed)
            except ValidationError as exc:
                problem = f"not a valid {event} {phase}: {_first_error(exc)}"
        if problem is not None:
            raise invalid_payload_error(result, problem)
        return governed

    async def _request(
        self, method: str, params: dict[str, Any], kwargs: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Govern the request `{method, params}`; the `cursor` and `meta` in `kwargs` are sent as params, so
        they are part of the payload, and `kwargs` gets the governed values back."""
        for keyword, key in _PARAM_KEYWORDS:
            if kwargs is not None and kwargs.get(keyword) is not None:
                params[key] = kwargs[keyword]
        adapter = _REQUEST_PARAMS.get(method)
        payload = {"method": method, "params": params}

        def parse(governed: Any) -> dict[str, Any]:
            out = dict(governed.get("params") or {})
            if adapter is not None and governed is not payload:  # only a mutator's replacement needs the check
                adapter.validate_python(out)
            return out

        out: dict[str, Any] = await self._govern(method, "request", payload, parse)
        for keyword, key in _PARAM_KEYWORDS:
            if kwargs is not None and (key in out or keyword in kwargs):
                kwargs[keyword] = out.get(key)
        return out

    async def _response(self, method: str, result: BaseModel, model: type[M]) -> M:
        # The result as the server sent it: fields mcp's model fills with defaults (a handshake-era
        # `resultType`, say) were never on the wire, so the chain does not see them.
        sent = result.model_dump(by_alias=True, mode="json", exclude_none=True, exclude_unset=True)
        governed: M = await self._govern(method, "response", sent, model.model_validate)
        return governed

    # ------------------------------------------------------------------ server features

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None, **kwargs: Any) -> CallToolResult:
        params = await self._request(
            "tools/call", {"name": name, **({"arguments": arguments} if arguments is not None else {})}, kwargs
        )
        result = await self.client.call_tool(str(params.get("name", name)), params.get("arguments"), **kwargs)
        return await self._response("tools/call", result, CallToolResult)

    async def read_resource(self, uri: str, **kwargs: Any) -> ReadResourceResult:
        params = await self._request("resources/read", {"uri": uri}, kwargs)
        result = await self.client.read_resource(str(params.get("uri", uri)), **kwargs)
        return await self._response("resources/read", result, ReadResourceResult)

    async def get_prompt(self, name: str, arguments: dict[str, str] | None = None, **kwargs: Any) -> GetPromptResult:
        params = await self._request(
            "prompts/get", {"name": name, **({"arguments": arguments} if arguments is not None else {})}, kwargs
        )
        result = await self.client.get_prompt(str(params.get("name", name)), params.get("arguments"), **kwargs)
        return await self._response("prompts/get", result, GetPromptResult)

    async def list_tools(self, **kwargs: Any) -> ListToolsResult:
        await self._request("tools/list", {}, kwargs)
        return await self._response("tools/list", await self.client.list_tools(**kwargs), ListToolsResult)

    async def list_prompts(self, **kwargs: Any) -> ListPromptsResult:
        await self._request("prompts/list", {}, kwargs)
        return await self._response("prompts/list", await self.client.list_prompts(**kwargs), ListPromptsResult)

    async def list_resources(self, **kwargs: Any) -> ListResourcesResult:
        await self._request("resources/list", {}, kwargs)
        return await self._response("resources/list", await self.client.list_resources(**kwargs), ListResourcesResult)

    async def list_resource_templates(self, **kwargs: Any) -> ListResourceTemplatesResult:
        await self._request("resources/templates/list", {}, kwargs)
        result = await self.client.list_resource_templates(**kwargs)
        return await self._response("resources/templates/list", result, ListResourceTemplatesResult)

    async def subscribe_resource(self, uri: str, **kwargs: Any) -> EmptyResult:
        """`resources/subscribe`, governed (handshake era: mcp deprecates it for 2026-07-28, see `listen`)."""
        params = await self._request("resources/subscribe", {"uri": uri}, kwargs)
        result = await self.client.subscribe_resource(str(params.get("uri", uri)), **kwargs)
        return await self._response("resources/subscribe", result, EmptyResult)

    @asynccontextmanager
    async def listen(
        self, *, resource_subscriptions: Sequence[str] = (), **kwargs: bool
    ) -> AsyncIterator[Subscription]:
        """`Client.listen` (2026-07-28); each of `resource_subscriptions` is governed first as the
        `resources/subscribe` request it stands for: a block refuses the listen, and the governed URIs are sent."""
        uris = []
        for uri in resource_subscriptions:
            params = await self._request("resources/subscribe", {"uri": uri})
            uris.append(str(params.get("uri", uri)))
        async with self.client.listen(resource_subscriptions=uris, **kwargs) as subscription:
            yield subscription

    # ------------------------------------------------------------------ client features (server-initiated)

    async def _sampling(
        self, context: ClientRequestContext, params: CreateMessageRequestParams
    ) -> CreateMessageResult | CreateMessageResultWithTools | ErrorData:
        user = self._user_sampling
        assert user is not None

        async def answer(governed: dict[str, Any]) -> Any:
            return await user(context, CreateMessageRequestParams.model_validate(governed))

        result: CreateMessageResult | CreateMessageResultWithTools | ErrorData
        result = await self._serve_feature("sampling/createMessage", dump(params), answer)
        return result

    async def _elicitation(
        self, context: ClientRequestContext, params: ElicitRequestParams
    ) -> ElicitResult | ErrorData:
        user = self._user_elicitation
        assert user is not None

        async def answer(governed: dict[str, Any]) -> Any:
            return await user(context, _ELICIT_PARAMS.validate_python(governed))

        result: ElicitResult | ErrorData = await self._serve_feature("elicitation/create", dump(params), answer)
        return result

    async def _roots(self, context: ClientRequestContext) -> ListRootsResult | ErrorData:
        user = self._user_roots
        assert user is not None

        async def answer(_: dict[str, Any]) -> Any:
            return await user(context)

        result: ListRootsResult | ErrorData = await self._serve_feature("roots/list", {}, answer)
        return result

    async def _serve_feature(
        self, method: str, params: dict[str, Any], answer: Callable[[dict[str, Any]], Awaitable[Any]]
    ) -> Any:
        """Govern a server-initiated request and the client's answer; a block becomes the error answer."""
        try:
            governed = await self._request(method, params)
            result = await answer(governed)
            if isinstance(result, ErrorData):
                return result
            return await self._response(method, result, type(result))
        except MCPError as exc:
            return exc.error


def _first_error(exc: ValidationError) -> str:
    """The first problem pydantic found, as `field.path: message`."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: {error['msg']}" if where else str(error["msg"])
