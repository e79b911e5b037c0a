"""PURE: params and results as each side of a call must see them (the era's envelope, the upstream's names).

A 2026-07-28 client's results carry `resultType`, cache hints and a `serverInfo` stamp; a handshake-era
client's carry none of them. Params go upstream under the upstream's own names, and the audit trail
hashes them without what each hop sets for itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from mcp_types import SERVER_INFO_META_KEY
from mcp_types.methods import CACHEABLE_METHODS

from mcp_interceptors.gateway.routing import CALLS, Route
from mcp_interceptors.gateway.upstream.handshake import ENVELOPE_KEYS

#: What only 2026-07-28 results carry: a handshake-era client's results never show them.
_MODERN_RESULT_KEYS = ("ttlMs", "cacheScope")
#: `_meta` keys each connection sets for itself, so they are not part of the payload the audit trail hashes.
_PER_HOP_META = ENVELOPE_KEYS | {"progressToken"}


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


def renamed(method: str, params: Mapping[str, Any] | None, route: Route) -> dict[str, Any]:
    """`params` as the upstream knows them: the tool or prompt under its own name, not the exposed (prefixed) one,
    whether named by `params.name` or by a completion's `params.ref.name`."""
    out = dict(params or {})
    if CALLS.get(method, ("", ""))[1] == "name":
        out["name"] = route.name
    ref = out.get("ref")
    if method == "completion/complete" and isinstance(ref, Mapping) and ref.get("type") == "ref/prompt":
        out["ref"] = {**ref, "name": route.name}
    return out


def recorded(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Params as the audit trail hashes them: with the `_meta` the chain governed and the gateway forwards (a
    vendor's keys), minus what each hop sets for itself (the 2026-07-28 envelope, the progress token)."""
    body = dict(params or {})
    meta = body.pop("_meta", None)
    if isinstance(meta, Mapping):
        meta = {key: value for key, value in meta.items() if key not in _PER_HOP_META}
    if meta:
        body["_meta"] = meta
    return body


def without_meta(params: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (params or {}).items() if k != "_meta"}


def without_answers(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """A retry's params minus what makes it a retry (`inputResponses`, `requestState`)."""
    return {k: v for k, v in (params or {}).items() if k not in ("inputResponses", "requestState")}
