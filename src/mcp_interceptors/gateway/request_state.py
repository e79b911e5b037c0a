"""The gateway's own `requestState` for the 2026-07-28 `input_required` rounds it relays: the upstream's state,
wrapped with what the gateway must know of the retry (its session, upstream, request, and which client feature
each input request asked for), sealed with HMAC-SHA256 under a key the replicas share.

A retry may then land on any replica: each one opens the token, checks it was issued to this session for this
request and upstream, and forwards the upstream's own state. A token altered or made up fails its MAC and is
refused (-32602, `reason: invalid_request_state`), before any chain or upstream sees the retry.
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, hmac
from mcp import MCPError

from mcp_interceptors.canonical import canonical_json
from mcp_interceptors.protocol.errors import INVALID_PARAMS

#: Every token the gateway seals starts so (version 1).
PREFIX = "mcpi1."
#: Shortest shared key accepted (bytes of its UTF-8 text).
MIN_KEY_BYTES = 32


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _refused(reason: str, message: str) -> MCPError:
    return MCPError(INVALID_PARAMS, message, {"reason": reason, "field": "requestState"})


def request_digest(method: str, params: Mapping[str, Any]) -> str:
    """What a retry must repeat: the method and params as the client sent them, minus answers and `_meta`."""
    asked = {k: v for k, v in params.items() if k not in ("inputResponses", "requestState", "_meta")}
    return _b64(hashlib.sha256(canonical_json({"method": method, "params": asked})).digest()[:18])


class RequestStates:
    """Seals and opens the gateway's `requestState` tokens. `keys[0]` seals; every key opens (rotation)."""

    def __init__(self, keys: Sequence[bytes] = (), *, ttl_s: float = 3600.0) -> None:
        #: Without a configured key, one drawn per process: a retry is then accepted by this process only.
        self.keys = tuple(keys) or (os.urandom(32),)
        self.shared = bool(keys)
        self.ttl_s = ttl_s

    def _mac(self, key: bytes, body: bytes) -> hmac.HMAC:
        mac = hmac.HMAC(key, hashes.SHA256())
        mac.update(body)
        return mac

    def seal(self, session: str, upstream: str, digest: str, asked: Mapping[str, str], state: Any) -> str:
        """A token for one round: `asked` maps each input request's key to its method; `state` is the upstream's
        own `requestState` (None when it gave none)."""
        claims: dict[str, Any] = {"s": session, "u": upstream, "h": digest, "q": dict(asked)}
        claims["e"] = int(time.time() + self.ttl_s)
        if state is not None:
            claims["st"] = state
        body = (PREFIX + _b64(orjson.dumps(claims))).encode("ascii")
        return f"{body.decode('ascii')}.{_b64(self._mac(self.keys[0], body).finalize())}"

    def open(self, token: Any, session: str, upstream: str, digest: str) -> dict[str, Any]:
        """The claims of a retry's token, checked; an `MCPError` saying precisely why it is refused."""
        if not isinstance(token, str) or not token.startswith(PREFIX) or token.count(".") != 2:
            raise _refused("invalid_request_state", "requestState was not issued by this gateway")
        body, _, tag = token.rpartition(".")
        try:
            mac = _unb64(tag)
        except ValueError:
            mac = b""
        if not any(self._verifies(key, body.encode("ascii"), mac) for key in self.keys):
            raise _refused("invalid_request_state", "requestState failed its integrity check: it was altered or forged")
        claims: dict[str, Any] = orjson.loads(_unb64(body[len(PREFIX) :]))
        if claims.get("e", 0) < time.time():
            raise _refused("request_state_expired", f"requestState expired (rounds last {self.ttl_s:g} s): call again")
        if claims.get("s") != session:
            raise _refused("request_state_mismatch", "requestState was issued to another session")
        if claims.get("u") != upstream or claims.get("h") != digest:
            raise _refused(
                "request_state_mismatch",
                "requestState was issued for another request (a retry must repeat the request's method and params)",
            )
        return claims

    def _verifies(self, key: bytes, body: bytes, mac: bytes) -> bool:
        try:
            self._mac(key, body).verify(mac)
        except InvalidSignature:
            return False
        return True

    def is_ours(self, token: Any) -> bool:
        return isinstance(token, str) and token.startswith(PREFIX)


def sealed_round(
    states: RequestStates,
    session: str,
    upstream: str,
    method: str,
    client_params: Mapping[str, Any] | None,
    result: Mapping[str, Any],
) -> dict[str, Any]:
    """An upstream's `input_required` result as the client gets it: the gateway's token as its `requestState`."""
    requests = result.get("inputRequests")
    asked = {
        str(key): request["method"]
        for key, request in (requests.items() if isinstance(requests, Mapping) else ())
        if isinstance(request, Mapping) and isinstance(request.get("method"), str)
    }
    digest = request_digest(method, client_params or {})
    token = states.seal(session, upstream, digest, asked, result.get("requestState"))
    return {**result, "requestState": token}


def opened_retry(
    states: RequestStates, session: str, upstream: str, method: str, params: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """A retry's params with the upstream's own `requestState` back in place of the gateway's token (none, if the
    upstream gave none), and the method each answered input request asked for; `MCPError` for a token refused."""
    claims = states.open(params.get("requestState"), session, upstream, request_digest(method, params))
    opened = {k: v for k, v in params.items() if k != "requestState"}
    if "st" in claims:
        opened["requestState"] = claims["st"]
    asked = claims.get("q")
    return opened, {str(k): v for k, v in asked.items() if isinstance(v, str)} if isinstance(asked, dict) else {}
