"""Render the resolved plan for `gateway --check`: per event and phase, who runs, in what order, how."""

from __future__ import annotations

from typing import Any

from mcp_interceptors.gateway.config import GatewayConfig
from mcp_interceptors.gateway.governor import GOVERNED_EVENTS
from mcp_interceptors.invoker import Chain
from mcp_interceptors.protocol.events import CLIENT_FEATURE_EVENTS, PHASES, SERVER_FEATURE_EVENTS, Direction

#: Every event the gateway governs, in the spec's table order.
EVENT_ORDER = (*SERVER_FEATURE_EVENTS, *CLIENT_FEATURE_EVENTS)


def resolved_plan(chain: Chain, directions: tuple[Direction, ...] = ("sending",)) -> list[dict[str, Any]]:
    """One row per (event, phase, interception point): the direction and the steps in invocation order."""
    assert set(EVENT_ORDER) == set(GOVERNED_EVENTS)
    rows = []
    for event in EVENT_ORDER:
        for phase, direction in ((phase, direction) for phase in PHASES for direction in directions):
            plan = chain.plan(event, phase, direction=direction)
            rows.append(
                {
                    "event": event,
                    "phase": phase,
                    "direction": direction,
                    "steps": plan.describe(),
                    "skipped": [{"interceptor": s.name, "reason": s.reason} for s in plan.skipped],
                }
            )
    return rows


def resolved_upstreams(config: GatewayConfig) -> dict[str, dict[str, Any]]:
    """Each upstream: its transport, what it runs or reaches, and the prefix of its tools and prompts."""
    resolved = {}
    for name, upstream in config.upstreams.items():
        where = " ".join([upstream.command or "", *upstream.args]) if upstream.command else upstream.url
        target = config.redact(where or "")  # a token in an argument or URL: shown as the `${VAR}` written
        resolved[name] = {"kind": upstream.kind, "target": target, "prefix": config.prefix_for(name) or None}
    return resolved


def check_report(config: GatewayConfig, chain: Chain, file: str) -> dict[str, Any]:
    """What `--check --json` prints: the same facts as `render_check`."""
    return {
        "file": file,
        "upstreams": resolved_upstreams(config),
        "deadlineMs": config.chain.deadline_ms,
        "points": list(config.chain.points),
        "plan": resolved_plan(chain, config.chain.directions),
        "metrics": metrics_endpoints(config),
    }


def metrics_endpoints(config: GatewayConfig) -> list[str]:
    """Where the metrics are served: the HTTP front's `/metrics` and the `metrics.listen` listener."""
    endpoints = ["GET /metrics on the HTTP front"] if config.http.metrics else []
    if config.metrics.listen is not None:
        endpoints.append(f"http://{config.metrics.listen}/metrics")
    return endpoints


def render_check(config: GatewayConfig, chain: Chain, file: str) -> str:
    lines = [f"{file}: configuration is valid", "", "upstreams:"]
    for name, upstream in resolved_upstreams(config).items():
        prefix = upstream["prefix"]
        named = f"{prefix + '__' if prefix else ''}<name>"
        lines.append(f"  {name}: {upstream['kind']} {upstream['target']}  (tools/prompts as {named})")
    metrics = metrics_endpoints(config)
    lines.append(f"metrics: {', '.join(metrics) if metrics else 'off'}")
    lines.append("")
    lines.append(
        f"chain deadline: {config.chain.deadline_ms} ms" if config.chain.deadline_ms else "chain deadline: none"
    )
    lines.append("plan (mutators by priority; validators run in parallel):")
    points = " then ".join(config.chain.points)
    lines.append(f"interception point: {points} (sending: mutate, then validate; receiving: validate, then mutate)")
    for row in resolved_plan(chain, config.chain.directions):
        header = f"  {row['event']} {row['phase']} ({row['direction']})"
        if not row["steps"]:
            lines.append(f"{header}: no interceptors")
            continue
        lines.append(f"{header}:")
        for index, step in enumerate(row["steps"], start=1):
            priority = f" priority={step['priority']}" if step["type"] == "mutation" else ""
            timeout = f" timeout={step['timeoutMs']}ms" if step["timeoutMs"] is not None else ""
            lines.append(
                f"    {index}. {step['interceptor']} [{step['type']}] from {step['source']}: mode={step['mode']} "
                f"failOpen={str(step['failOpen']).lower()}{priority}{timeout}"
            )
        for skipped in row["skipped"]:
            lines.append(f"    - skipped {skipped['interceptor']}: {skipped['reason']}")
    return "\n".join(lines)
