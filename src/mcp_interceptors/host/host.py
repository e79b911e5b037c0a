"""`InterceptorHost`: a set of interceptors authored with decorators, served as an mcp `Extension`.

Its wire handlers for `interceptors/list` / `interceptor/invoke` and in-process chains (`Chain.add_local`)
both run an interceptor through `core.HostCore.invoke`, so local and remote semantics are identical.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from mcp import MCPError
from mcp.server import MCPServer, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.server.extension import Extension, MethodBinding
from pydantic import ValidationError

from mcp_interceptors.canonical import CanonicalizationError
from mcp_interceptors.host.authoring import build_descriptor, check_handler, is_async_handler, may_suspend, registrar
from mcp_interceptors.host.core import HostCore
from mcp_interceptors.host.invocation import F, Handler, Registered
from mcp_interceptors.protocol.descriptors import (
    InterceptorDescriptor,
    supported_events,
)
from mcp_interceptors.protocol.errors import (
    InterceptorExecutionError,
    InterceptorsError,
    InvalidParamsError,
    TimeoutCodeStyle,
)
from mcp_interceptors.protocol.events import (
    EXTENSION_ID,
    PHASES,
    is_interceptable,
    is_pattern,
)
from mcp_interceptors.protocol.invoke import (
    INVOKE_METHOD,
    LIST_METHOD,
    InvokeParams,
    RawParams,
    check_payload,
)
from mcp_interceptors.protocol.results import (
    RESULT_MODELS,
    ValidationResult,
    result_json_problem,
)
from mcp_interceptors.signatures import SigningKeyLike, public_key_text, sign_result, signing_key_from

logger = logging.getLogger(__name__)


class InterceptorHost(HostCore, Extension):
    """A set of interceptors, servable on any mcp server and runnable in-process.

    `copy_payloads=False` skips the per-invocation deep copy for handlers known not to mutate
    their input (the built-in guards). `timeout_code` picks G4's `-32000` or G5's `-32603`.
    `strict_list_filter` rejects wildcard `interceptors/list` filters with `-32602` (R10).
    `signing_key` (an Ed25519 key, its raw or base64url bytes, or PEM; see `mcp_interceptors.signatures`)
    signs every validation result this host sends over the wire; `public_key` is what invokers configure.
    """

    identifier = EXTENSION_ID

    def __init__(
        self,
        name: str = "interceptors",
        *,
        copy_payloads: bool = True,
        timeout_code: TimeoutCodeStyle = "g4",
        strict_list_filter: bool = False,
        signing_key: SigningKeyLike | None = None,
    ) -> None:
        super().__init__(copy_payloads=copy_payloads, timeout_code=timeout_code)
        self.name = name
        self.signing_key = signing_key_from(signing_key) if signing_key is not None else None
        self.strict_list_filter = strict_list_filter
        self._wire_list: list[dict[str, Any]] | None = None

    # ------------------------------------------------------------------ authoring

    def add(self, descriptor: InterceptorDescriptor, handler: Handler) -> None:
        """Register a handler under a full descriptor. Names are unique per host (R11).

        A hook on an event no hook can match (`initialize`, `ping`, `server/discover`, notifications:
        spec §1.2) raises: the handler would never run while the host advertised the event.
        """
        if descriptor.name in self._registry:
            raise ValueError(f"interceptor {descriptor.name!r} is already registered on host {self.name!r}")
        never = sorted({event for hook in descriptor.hooks for event in hook.events if not is_interceptable(event)})
        if never:
            raise ValueError(
                f"interceptor {descriptor.name!r} hooks {', '.join(map(repr, never))}, which no interceptor ever"
                " runs on (initialize, ping, server/discover and notifications are not lifecycle events);"
                " drop them from its hooks"
            )
        check_handler(descriptor.name, handler)
        schema = descriptor.config_schema
        if schema is not None:
            try:
                Draft202012Validator.check_schema(schema)
            except SchemaError as exc:  # a nested schema: the envelope was checked by the descriptor model
                at = " at " + "/".join(str(part) for part in exc.path) if exc.path else ""
                raise ValueError(f"interceptor {descriptor.name!r}: invalid configSchema{at}: {exc.message}") from None
        is_async = is_async_handler(handler)
        registered = Registered(
            descriptor=descriptor,
            name=descriptor.name,
            type=descriptor.type,
            handler=handler,
            is_async=is_async,
            config_validator=Draft202012Validator(schema) if schema is not None else None,
            still=is_async and not may_suspend(handler),
            stamps={
                phase: RESULT_MODELS[descriptor.type].template({"interceptor": descriptor.name, "phase": phase})
                for phase in PHASES
            },
        )
        self._registry[descriptor.name] = registered
        self._has_sync = self._has_sync or not is_async
        self._may_suspend = self._may_suspend or (is_async and not registered.still)
        self._wire_list = None

    validator = registrar(
        build_descriptor,
        "validation",
        "Register a validator. Returns may be a `ValidationResult`, a bool, or `(bool, messages)`.",
    )
    mutator = registrar(
        build_descriptor,
        "mutation",
        "Register a mutator. Returns may be a `MutationResult`, the new payload, or None (unchanged).",
    )
    sink = registrar(
        build_descriptor, "sink", "Register an opt-in sink (PR #28): never blocks, never changes the payload."
    )

    def _decorator(self, descriptor: InterceptorDescriptor) -> Callable[[F], F]:
        def register(fn: F) -> F:
            self.add(descriptor, fn)
            return fn

        return register

    @property
    def public_key(self) -> str | None:
        """The base64url public half of `signing_key`, for invokers' `verify_key` (None: results unsigned)."""
        return public_key_text(self.signing_key) if self.signing_key is not None else None

    # ------------------------------------------------------------------ discovery

    @property
    def descriptors(self) -> list[InterceptorDescriptor]:
        """Every registered descriptor, in registration order (R7)."""
        return [registered.descriptor for registered in self._registry.values()]

    def list(self, event: str | None = None) -> list[InterceptorDescriptor]:
        """`interceptors/list` semantics: the event filter matches literal and `*` hooks in any phase (R8/R9)."""
        if event is None:
            return self.descriptors
        if self.strict_list_filter and is_pattern(event):
            raise InvalidParamsError(
                f"interceptors/list filter must be one concrete event name, got pattern {event!r}",
                data={"field": "event", "event": event},
            )
        return [d for d in self.descriptors if d.matches_event(event)]

    def settings(self) -> dict[str, Any]:
        """Advertised at `capabilities.extensions[EXTENSION_ID]` (and `experimental` for legacy clients)."""
        return {"supportedEvents": supported_events(self.descriptors)}

    # ------------------------------------------------------------------ mcp wiring

    def methods(self) -> Sequence[MethodBinding]:
        return [
            MethodBinding(method=LIST_METHOD, params_type=RawParams, handler=self._serve_list),
            MethodBinding(method=INVOKE_METHOD, params_type=RawParams, handler=self._serve_invoke),
        ]

    async def _serve_list(self, ctx: ServerRequestContext[Any, Any], params: RawParams) -> dict[str, Any]:
        raw = ctx.params or {}
        event = raw.get("event")
        if event is not None and not isinstance(event, str):
            raise MCPError(-32602, "interceptors/list: `event` must be a string", data={"field": "event"})
        try:
            if event is None:
                if self._wire_list is None:
                    self._wire_list = [d.to_wire() for d in self.descriptors]
                return {"interceptors": self._wire_list}
            return {"interceptors": [d.to_wire() for d in self.list(event)]}
        except InterceptorsError as exc:
            raise MCPError(exc.code, exc.message, exc.data) from None

    async def _serve_invoke(self, ctx: ServerRequestContext[Any, Any], params: RawParams) -> dict[str, Any]:
        try:
            parsed = parse_invoke_params(ctx.params)
            check_payload(parsed.payload, interceptor=parsed.name)  # deeper ones cannot be copied or answered
            check_payload(parsed.config, field="config", interceptor=parsed.name)
            result = await self.invoke_params(parsed)
        except InterceptorsError as exc:
            raise MCPError(exc.code, exc.message, exc.data) from None
        # `invoke` checked what the handler filled (pydantic would turn a set into a list and NaN into null);
        # deep nesting fails with a bare ValueError that mcp answers with code 0 or a data-less -32603 (R25).
        problem = None
        try:
            body = result.to_wire()
        except ValueError as exc:  # PydanticSerializationError too; e.g. an unchanged payload nested too deep
            problem = result_json_problem(result) or str(exc)
        if problem is not None:
            error = InterceptorExecutionError(parsed.name, f"result is not JSON-serialisable: {problem}")
            raise MCPError(error.code, error.message, error.data) from None
        if self.signing_key is not None and isinstance(result, ValidationResult):
            try:
                body = sign_result(body, self.signing_key)  # over the body exactly as it goes on the wire
            except CanonicalizationError as exc:  # e.g. an integer past the doubles in `info`: code 0, no data
                error = InterceptorExecutionError(parsed.name, f"result cannot be signed: {exc}")
                raise MCPError(error.code, error.message, error.data) from None
        return body

    async def capability_middleware(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Server middleware that repeats the capability under `experimental` in `initialize` results,
        and keeps the one in `server/discover` results current.

        Handshake-era (`<= 2025-11-25`) results have no `extensions` member, so without this a
        legacy client never sees the advertisement (spec §4 era gap). mcp stores an extension's
        settings when the server is built, so interceptors registered later would be missing from
        the 2026-07-28 advertisement while `interceptors/list` shows them (R4).
        """
        result = await call_next(ctx)
        if ctx.method == "initialize" and isinstance(result, dict):
            capabilities = result.setdefault("capabilities", {})
            experimental = capabilities.get("experimental") or {}
            capabilities["experimental"] = {**experimental, EXTENSION_ID: self.settings()}
        elif ctx.method == "server/discover" and isinstance(result, dict):
            capabilities = result.setdefault("capabilities", {})
            extensions = capabilities.get("extensions") or {}
            capabilities["extensions"] = {**extensions, EXTENSION_ID: self.settings()}
        return result

    def create_server(self, name: str | None = None, **kwargs: Any) -> MCPServer[Any]:
        """An `MCPServer` hosting only these interceptors, advertised in both protocol eras."""
        middleware = [*kwargs.pop("middleware", ()), self.capability_middleware]
        return MCPServer(name or self.name, extensions=[self], middleware=middleware, **kwargs)


def parse_invoke_params(raw: Mapping[str, Any] | None) -> InvokeParams:
    """Validate `interceptor/invoke` params; a bad field gets `-32602` naming it (and the interceptor)."""
    body = {k: v for k, v in (raw or {}).items() if k != "_meta"}
    try:
        return InvokeParams.model_validate(body)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        field = ".".join(str(part) for part in error["loc"]) or "params"
        name = body.get("name") if isinstance(body.get("name"), str) else None
        data: dict[str, Any] = {"field": field, "reason": error["msg"]}
        if name:
            data["interceptor"] = name
        raise InvalidParamsError(f"Invalid interceptor/invoke params: {field}: {error['msg']}", data=data) from None
