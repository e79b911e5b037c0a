"""The e2e upstream, also serving the handshake era's `resources/subscribe` and advertising it there.

An mcp server advertises `resources.subscribe` in the 2026-07-28 era whenever it serves
subscriptions/listen, and in the handshake era only with a handler: this one has both.
"""

from typing import Any

from e2e_upstream import server
from mcp.server import ServerRequestContext
from mcp.server.context import CallNext, HandlerResult


async def handshake_subscriptions(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    if ctx.method in ("resources/subscribe", "resources/unsubscribe"):
        return {}
    result = await call_next(ctx)
    if ctx.method == "initialize" and isinstance(result, dict):
        result.setdefault("capabilities", {}).setdefault("resources", {})["subscribe"] = True
    return result


if __name__ == "__main__":
    server.middleware.insert(0, handshake_subscriptions)
    server.run("stdio")
