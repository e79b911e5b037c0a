"""A config reload's change of the upstream set: start the new and changed upstreams, list the new set (refusing a
collision), then `Gateway.replace_policy` swaps them in with the config; those taken out of service are drained
and closed, and clients are told their listings changed.

`reload` decides when; this module says what changes and prepares it; `connections` opens and retires.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mcp_interceptors.gateway.config import GatewayConfig, UpstreamConfig
from mcp_interceptors.gateway.connections import Connections, same_server
from mcp_interceptors.gateway.listings import Listings
from mcp_interceptors.gateway.routing import Catalog
from mcp_interceptors.gateway.upstream.connection import UpstreamConnection

#: What clients are told when the upstream set changes, by the capability an upstream serves them with.
LIST_CHANGED = {
    "tools": "notifications/tools/list_changed",
    "prompts": "notifications/prompts/list_changed",
    "resources": "notifications/resources/list_changed",
}


@dataclass
class UpstreamChange:
    """How a new config's upstreams differ from the running ones, and what was started for it."""

    added: dict[str, UpstreamConfig] = field(default_factory=dict)
    changed: dict[str, UpstreamConfig] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)
    #: A prefix changed (one upstream became two, say): the listings change even if no connection does.
    renamed: bool = False
    #: The shared connections started for `added` and `changed` (`prepare`).
    started: dict[str, UpstreamConnection] = field(default_factory=dict)
    #: What the new set lists (`prepare`).
    catalog: Catalog | None = None

    @property
    def empty(self) -> bool:
        return not (self.added or self.changed or self.removed or self.renamed)

    def describe(self) -> str:
        parts = [
            f"{what} {', '.join(repr(name) for name in names)}"
            for what, names in (("added", self.added), ("changed", self.changed), ("removed", self.removed))
            if names
        ]
        return "; ".join(parts) or "prefixes changed"

    def abandon(self) -> None:
        """The reload was refused: stop what it started."""
        for conn in self.started.values():
            conn.close("the config reload that started it was refused")


def diff(current: GatewayConfig, new: GatewayConfig) -> UpstreamChange:
    old, fresh = current.upstreams, new.upstreams
    return UpstreamChange(
        added={name: upstream for name, upstream in fresh.items() if name not in old},
        changed={
            name: upstream for name, upstream in fresh.items() if name in old and not same_server(old[name], upstream)
        },
        removed=[name for name in old if name not in fresh],
        renamed=any(current.prefix_for(name) != new.prefix_for(name) for name in fresh if name in old),
    )


async def prepare(change: UpstreamChange, new: GatewayConfig, connections: Connections, listings: Listings) -> None:
    """Start the new and changed upstreams and list the new set. Raises (having stopped what it started) if one
    cannot start or two would expose the same name."""
    change.started = await connections.start_shared({**change.added, **change.changed})
    try:
        conns = {name: change.started.get(name) or connections.shared[name] for name in new.upstreams}
        prefixes = {name: new.prefix_for(name) for name in new.upstreams}
        change.catalog = await listings.catalog_of(conns, prefixes)
    except BaseException:
        change.abandon()
        raise


def announcements(change: UpstreamChange, retired: list[UpstreamConnection]) -> list[str]:
    """The `list_changed` notifications clients get: for each capability an upstream that came or went serves."""
    if change.renamed:
        return list(LIST_CHANGED.values())
    features: set[str] = set()
    for conn in [*change.started.values(), *retired]:
        features.update((conn.info.capabilities if conn.info is not None else LIST_CHANGED).keys())
    return [method for feature, method in LIST_CHANGED.items() if feature in features]
