"""The approval webhook's asynchronous mode: a receiver that answers its question with 202 Accepted POSTs
the signed answer later to `POST /approvals/{id}` on the gateway's HTTP front (the question's
`callback_url`). The HMAC signature is the callback's auth (no bearer token); fail closed: an unknown id is
404, a bad signature 401 (the call stays pending until its timeout), a second answer 409, a late one 410.
Pending questions live in this replica's memory: the callback must reach the replica that asked.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field

import anyio
import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

__all__ = ["CALLBACK_PREFIX", "SIGNATURE_HEADER", "Callbacks", "PendingCallback", "callback_route", "sign", "signed_by"]

#: The header carrying a body's signature, both ways.
SIGNATURE_HEADER = "X-MCPI-Signature"

#: Where answers are POSTed on the HTTP front: this prefix and the question's id.
CALLBACK_PREFIX = "/approvals/"
#: How many settled ids are kept to tell a second (409) or late (410) answer from an unknown id (404).
_SETTLED_KEPT = 10_000


def sign(secret: bytes, body: bytes) -> str:
    """The signature header's value for `body`: `sha256=` and the hex HMAC-SHA256 under `secret`."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def signed_by(secret: bytes, body: bytes, header: str | None) -> bool:
    """Whether `header` is `body`'s signature under `secret` (compared in constant time)."""
    return header is not None and hmac.compare_digest(header.strip(), sign(secret, body))


@dataclass
class PendingCallback:
    """A question waiting for its answer at the callback URL."""

    secret: bytes
    deadline: float
    done: anyio.Event = field(default_factory=anyio.Event)
    #: The signed body that answered (`None` until then).
    body: bytes | None = None


class Callbacks:
    """The questions of this gateway waiting for a callback, by id, and where the receiver answers."""

    def __init__(self) -> None:
        #: The base URL the receiver reaches the gateway at; `None` without an HTTP front (stdio).
        self.base_url: str | None = None
        self.pending: dict[str, PendingCallback] = {}
        #: Ids no longer pending: "answered" or "expired".
        self.settled: OrderedDict[str, str] = OrderedDict()

    def open(self, ident: str, secret: bytes, deadline: float) -> PendingCallback:
        pending = self.pending[ident] = PendingCallback(secret, deadline)
        return pending

    def close(self, ident: str) -> None:
        """The question is settled (answered, or its wait over): later answers get 409 or 410."""
        pending = self.pending.pop(ident, None)
        if pending is None:
            return
        self.settled[ident] = "answered" if pending.body is not None else "expired"
        while len(self.settled) > _SETTLED_KEPT:
            self.settled.popitem(last=False)

    def receive(self, ident: str, body: bytes, signature: str | None) -> tuple[int, str]:
        """Take an answer POSTed for `ident`: the HTTP status and why."""
        pending = self.pending.get(ident)
        if pending is None:
            settled = self.settled.get(ident)
            if settled == "answered":
                return 409, "this question was answered already"
            if settled == "expired":
                return 410, "this question expired"
            return 404, "no such question"
        if not signed_by(pending.secret, body, signature):
            return 401, "the answer is not signed with the shared secret"
        try:
            raw = orjson.loads(body)
        except orjson.JSONDecodeError:
            return 400, "the answer is not JSON"
        if not isinstance(raw, Mapping) or raw.get("id") != ident:
            return 400, "the answer's id is not the callback URL's"
        if pending.body is not None:
            return 409, "this question was answered already"
        if time.time() > pending.deadline:
            return 410, "this question expired"
        pending.body = body
        pending.done.set()
        return 200, "answer taken"


def callback_route(callbacks: Callbacks, max_body: int) -> Route:
    """`POST /approvals/{id}`: no bearer auth (the signature is the auth), no other method."""

    async def answer(request: Request) -> JSONResponse:
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_body:
                return JSONResponse({"error": "the answer is too large"}, status_code=413)
        status, why = callbacks.receive(
            request.path_params["ident"], bytes(body), request.headers.get(SIGNATURE_HEADER)
        )
        return JSONResponse({"status": why} if status == 200 else {"error": why}, status_code=status)

    return Route(CALLBACK_PREFIX + "{ident}", endpoint=answer, methods=["POST"])
