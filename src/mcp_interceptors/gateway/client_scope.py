"""What a client's `interceptor/invoke` and `interceptor/executeChain` run against (`client_interceptor_methods`).

The gateway's own chains keep state in their guards (learned tool schemas, tainted values, rate-limit
windows). A client invoking those very instances could rewrite it: a fake `tools/list` response given to
`schema-guard` replaced what it had learned, and a call it blocked went through. So by default (`scoped`)
clients get instances of their own: each built-in guard is built again from its config, once, and serves
every client's invocations; interceptors whose state the gateway cannot copy (in-process hosts from
`interceptors.hosts`, remote interceptor servers) refuse a client's invocation. `shared` invokes the
gateway's own instances (trusted clients only); `off` serves no interceptor-host method at all.
"""

from __future__ import annotations

import logging
from typing import Literal

from mcp_interceptors.executor import Call, Source
from mcp_interceptors.gateway.config import GatewayConfig
from mcp_interceptors.gateway.sources import guard_source_configs
from mcp_interceptors.invoker import Chain
from mcp_interceptors.planning import Entry
from mcp_interceptors.protocol.errors import InterceptorExecutionError
from mcp_interceptors.protocol.results import InterceptorResult

logger = logging.getLogger(__name__)

ClientMethods = Literal["scoped", "shared", "off"]


class WithheldSource:
    """A source clients may not reach: every invocation fails naming the interceptor and the setting."""

    def __init__(self, source: str) -> None:
        self.source = source

    async def invoke(self, call: Call) -> InterceptorResult:
        reason = (
            f"interceptor {call.name!r} runs in {self.source!r}, whose state the gateway's own chains share: clients "
            "cannot invoke it (client_interceptor_methods: scoped)"
        )
        raise InterceptorExecutionError(call.name, reason)


class ClientScope:
    """The chain and sources a client's interceptor-host calls use, mirroring the gateway's `chain`."""

    def __init__(self, config: GatewayConfig, chain: Chain) -> None:
        self.mode: ClientMethods = config.client_interceptor_methods
        self.gateway_chain = chain
        self._guards = guard_source_configs(config)
        self._sources: dict[str, Source] = {}
        self._chain: Chain | None = None
        self._mirrored: tuple[int, ...] = ()

    @property
    def serves(self) -> bool:
        """Whether clients get the interceptor-host methods at all."""
        return self.mode != "off"

    def source(self, name: str) -> Source:
        """Where a client's invocation of an interceptor of the gateway's source `name` runs."""
        if self.mode == "shared":
            return self.gateway_chain.sources[name]
        found = self._sources.get(name)
        if found is None:
            found = self._sources[name] = self._scoped(name)
        return found

    def _scoped(self, name: str) -> Source:
        guard = self._guards.get(name)
        if guard is None:
            return WithheldSource(name)
        from mcp_interceptors import guards

        guard_name, guard_config = guard
        logger.info("guard %r: an instance of its own serves clients' interceptor/invoke", name)
        host: Source = guards.load(guard_name, guard_config)
        return host

    def chain(self) -> Chain:
        """The gateway's chain with every source replaced by `source(name)` (the same chain when `shared`)."""
        gateway = self.gateway_chain
        if self.mode == "shared":
            return gateway
        entries = gateway.entries
        mirrored = tuple(id(entry) for entry in entries)
        if self._chain is None or mirrored != self._mirrored:  # remote servers' listings change
            scoped = Chain(
                role=gateway.role,
                protocol_version=gateway.protocol_version,
                enforce_compat=gateway.enforce_compat,
                severity_rule=gateway.severity_rule,
                deadline_always_blocks=gateway.deadline_always_blocks,
                sinks=gateway.sinks_enabled,
                timeout_ms=gateway.timeout_ms,
                tracer_provider=False,  # the gateway traces only with its own provider
            )
            by_source: dict[str, list[Entry]] = {}
            for entry in entries:
                by_source.setdefault(entry.source, []).append(entry)
            for name, group in by_source.items():
                overrides = {e.name: e.overrides for e in group if e.overrides is not None}
                descriptors = [e.descriptor for e in group]
                order = group[0].host_order
                scoped.add_source(self.source(name), descriptors, name=name, overrides=overrides, order=order)
            self._chain, self._mirrored = scoped, mirrored
        return self._chain
