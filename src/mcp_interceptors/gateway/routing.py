"""Pure aggregation: merge upstream listings under prefixes, reject collisions, route names back.

Tools and prompts are exposed as `<prefix>__<name>` (no prefix: the name itself); resources keep
their URIs and are routed by owner, exactly or through a resource template.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcp.shared.uri_template import InvalidUriTemplate, UriTemplate

from mcp_interceptors.protocol.errors import InterceptorsError

SEPARATOR = "__"
#: list method -> (result key, the key that names an item)
LISTS: dict[str, tuple[str, str]] = {
    "tools/list": ("tools", "name"),
    "prompts/list": ("prompts", "name"),
    "resources/list": ("resources", "uri"),
    "resources/templates/list": ("resourceTemplates", "uriTemplate"),
}
#: call method -> (list method whose items it calls, the params key naming the item)
CALLS: dict[str, tuple[str, str]] = {
    "tools/call": ("tools/list", "name"),
    "prompts/get": ("prompts/list", "name"),
    "resources/read": ("resources/list", "uri"),
    "resources/subscribe": ("resources/list", "uri"),
    "resources/unsubscribe": ("resources/list", "uri"),
}
PREFIXED_LISTS = frozenset({"tools/list", "prompts/list"})
#: The calls whose audit records name their item (`call_target`).
TARGETED = frozenset({"tools/call", "prompts/get", "resources/read"})


def call_target(method: str, params: Mapping[str, Any] | None) -> str | None:
    """The tool name of a `tools/call`, the uri of a `resources/read`, the prompt name of a `prompts/get`, as
    the client's params hold it (None when they hold no string there, and for any other method)."""
    if method not in TARGETED or not isinstance(params, Mapping):
        return None
    value = params.get(CALLS[method][1])
    return value if isinstance(value, str) else None


class RoutingError(InterceptorsError):
    """Two upstreams expose the same name or URI; raised at start."""


@dataclass(frozen=True, slots=True)
class Route:
    upstream: str
    name: str


def expose(prefix: str, name: str) -> str:
    return f"{prefix}{SEPARATOR}{name}" if prefix else name


@dataclass
class Catalog:
    """The merged view the gateway advertises, and how to route each item back to its owner."""

    items: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    routes: dict[str, dict[str, Route]] = field(default_factory=dict)
    #: (template text, parsed template, owning upstream)
    templates: list[tuple[str, UriTemplate, str]] = field(default_factory=list)

    def listing(self, method: str) -> list[dict[str, Any]]:
        return self.items.get(method, [])

    def item(self, method: str, key: str) -> dict[str, Any] | None:
        """The exposed item named `key` (a tool or prompt name, a resource URI) in a listing."""
        _, key_name = LISTS[method]
        return next((item for item in self.items.get(method, []) if item.get(key_name) == key), None)

    def route(self, call_method: str, key: str) -> Route | None:
        """Where a call for `key` (an exposed tool/prompt name or a resource URI) goes."""
        list_method, _ = CALLS[call_method]
        found = self.routes.get(list_method, {}).get(key)
        if found is not None or list_method != "resources/list":
            return found
        found = self.routes.get("resources/templates/list", {}).get(key)  # a template's own text
        if found is not None:
            return found
        for _, template, upstream in self.templates:
            if template.match(key) is not None:
                return Route(upstream, key)
        return None


def build_catalog(listings: Mapping[str, Mapping[str, list[dict[str, Any]]]], prefixes: Mapping[str, str]) -> Catalog:
    """Merge `{upstream: {list method: items}}`; raises `RoutingError` naming both owners of a name."""
    catalog = Catalog()
    for method, (_, key) in LISTS.items():
        merged: list[dict[str, Any]] = []
        routes: dict[str, Route] = {}
        for upstream, per_method in listings.items():
            for item in per_method.get(method, []):
                original = item.get(key)
                if not isinstance(original, str):
                    continue
                exposed = expose(prefixes.get(upstream, ""), original) if method in PREFIXED_LISTS else original
                if exposed in routes:
                    other = routes[exposed].upstream
                    if method in PREFIXED_LISTS:
                        kind, fix = method.split("/")[0][:-1], "give one of them a distinct `prefix` in the config"
                    else:
                        kind, fix = key, "resource URIs are not prefixed: front only one of them"
                    raise RoutingError(
                        f"{kind} {exposed!r} is exposed by both upstream {other!r} and {upstream!r}; {fix}",
                        data={"name": exposed, "upstreams": [other, upstream]},
                    )
                routes[exposed] = Route(upstream, original)
                merged.append({**item, key: exposed} if exposed != original else item)
        catalog.items[method] = merged
        catalog.routes[method] = routes
    for item in catalog.items["resources/templates/list"]:
        text = item.get("uriTemplate")
        if not isinstance(text, str):
            continue
        try:
            template = UriTemplate.parse(text)
        except InvalidUriTemplate:
            continue
        catalog.templates.append((text, template, catalog.routes["resources/templates/list"][text].upstream))
    return catalog


def rename_items(method: str, items: Iterable[dict[str, Any]], prefix: str) -> list[dict[str, Any]]:
    """Expose one upstream's items under its prefix (used on pass-through listings)."""
    if method not in PREFIXED_LISTS or not prefix:
        return list(items)
    _, key = LISTS[method]
    return [{**item, key: expose(prefix, item[key])} if isinstance(item.get(key), str) else item for item in items]


def advertised_keys(method: str, result: Mapping[str, Any]) -> set[str]:
    """The names (or URIs) a list result advertises, read after response-phase mutation."""
    items_key, key = LISTS[method]
    items = result.get(items_key)
    if not isinstance(items, list):
        return set()
    return {item[key] for item in items if isinstance(item, Mapping) and isinstance(item.get(key), str)}
