"""`GET /healthz` on the HTTP front: whether this replica can serve, for a load balancer's or Kubernetes'
readiness check. 200 when every upstream's shared connection is up and the state store answers; 503 with
what is not, otherwise. No auth and no Host check (probes come by address and carry no token); the answer
names nothing but counts, so it tells a caller no more than that the gateway is there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio

from mcp_interceptors.protocol.errors import StateUnavailableError

if TYPE_CHECKING:
    from mcp_interceptors.gateway.gateway import Gateway

#: How long the state store may take to answer a probe.
_STATE_PROBE_S = 2.0


async def health_of(gateway: Gateway) -> tuple[bool, dict[str, Any]]:
    """`(ready, body)`: upstreams up out of those configured, and the state store's answer."""
    shared = gateway.connections.shared
    up = sum(1 for conn in shared.values() if conn.up)
    body: dict[str, Any] = {"upstreams": {"up": up, "configured": len(gateway.config.upstreams)}}
    ready = gateway.connected and up == len(gateway.config.upstreams)
    state = "memory"
    if gateway.state is not None:
        state = "ok"
        with anyio.move_on_after(_STATE_PROBE_S) as scope:
            try:
                await gateway.state.ping()
            except StateUnavailableError:
                state = "unavailable"
        if scope.cancelled_caught:
            state = "unavailable"
    body["state"] = state
    ready = ready and state != "unavailable"
    body["status"] = "ok" if ready else "unavailable"
    return ready, body


def health_route(gateway: Gateway) -> Any:
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def healthz(request: Request) -> JSONResponse:
        ready, body = await health_of(gateway)
        return JSONResponse(body, status_code=200 if ready else 503, headers={"cache-control": "no-store"})

    return Route("/healthz", endpoint=healthz, methods=["GET"])
