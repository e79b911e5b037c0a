"""Asking a person through a webhook, for clients that cannot be asked themselves (no form elicitation).

The gateway POSTs the question as JSON to the configured URL, signed with HMAC-SHA256 over the body under
the shared secret (`X-MCPI-Signature: sha256=<hex>`), and the receiver's 200 response is the answer, signed
the same way over the response body: `{id, action, content?, answered_by?}`. The receiver may hold the response
until the person answers, within the rule's timeout, or answer 202 and POST the same signed answer to the
question's `callback_url` later (`callbacks.py`). An unsigned or badly signed answer, one for another
question (`id`), or one after the question's expiry never approves (fail closed).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import orjson

from mcp_interceptors.gateway.approvals.answers import Answer, judge
from mcp_interceptors.gateway.approvals.callbacks import CALLBACK_PREFIX, SIGNATURE_HEADER, Callbacks, sign, signed_by
from mcp_interceptors.gateway.approvals.rounds import Question
from mcp_interceptors.gateway.config import GatewayConfig
from mcp_interceptors.guards._names import params_of
from mcp_interceptors.protocol.invoke import InvocationContext

__all__ = ["SIGNATURE_HEADER", "Webhook", "WebhookSettings", "approval_webhooks", "shown_url", "sign", "signed_by"]

#: The `type` of a question the gateway posts.
REQUEST_TYPE = "io.github.mcp-interceptors/approval-request"
#: How much of `answered_by` the audit record keeps.
_ANSWERED_BY_KEPT = 200


def shown_url(url: str) -> str:
    """The URL as the audit trail names it: scheme, host, port and path (no user info, query or fragment)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


@dataclass(frozen=True)
class WebhookSettings:
    """The `approval` guard's `webhook` section: where questions go, and the secret both sides sign with."""

    url: str
    secret: bytes
    #: The gateway's base URL as the receiver reaches it (behind a proxy); None: the HTTP listening address.
    public_url: str | None = None

    @classmethod
    def from_config(cls, raw: Mapping[str, Any]) -> WebhookSettings:
        public = raw.get("public_url")
        return cls(
            url=str(raw["url"]),
            secret=str(raw["secret"]).encode("utf-8"),
            public_url=str(public) if public is not None else None,
        )


def approval_webhooks(config: GatewayConfig, callbacks: Callbacks) -> dict[str, Webhook]:
    """The webhooks of the configured guards, by interceptor name (the `approval` guard's `webhook`)."""
    return {
        guard.name: Webhook(WebhookSettings.from_config(guard.config["webhook"]), callbacks)
        for guard in config.interceptors.guards
        if guard.name == "approval" and isinstance(guard.config.get("webhook"), Mapping)
    }


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Webhook:
    """Puts questions to a person through one webhook URL."""

    def __init__(self, settings: WebhookSettings, callbacks: Callbacks) -> None:
        self.settings = settings
        self.shown_url = shown_url(settings.url)
        self.callbacks = callbacks

    def callback_url(self, ident: str) -> str | None:
        """Where the receiver may POST the answer after a 202 (None without an HTTP front to take it)."""
        if self.callbacks.base_url is None:
            return None
        base = self.settings.public_url or self.callbacks.base_url
        return f"{base.rstrip('/')}{CALLBACK_PREFIX}{ident}"

    def question_body(
        self, ident: str, question: Question, context: InvocationContext, event: str, call: Any, expires_at: float
    ) -> dict[str, Any]:
        """What the receiver is sent: the question, who asks (the principal) and the call as the chain left it."""
        principal = context.principal
        call = params_of(call)
        return {
            "type": REQUEST_TYPE,
            "id": ident,
            "interceptor": question.interceptor,
            "event": event,
            "message": question.escalation.message,
            "requested_schema": question.escalation.requested_schema,
            "principal": {"type": principal.type, "id": principal.id} if principal is not None else None,
            "server": context.server,
            "tool": call.get("name"),
            "arguments": call.get("arguments", {}),
            "asked_at": _iso(time.time()),
            "expires_at": _iso(expires_at),
            "callback_url": self.callback_url(ident),
        }

    async def ask(self, question: Question, context: InvocationContext, event: str, call: Any) -> Answer:
        """Post `question` and judge the signed answer, within the escalation's timeout."""
        timeout_s = question.escalation.timeout_ms / 1000
        ident = secrets.token_urlsafe(18)
        deadline = time.time() + timeout_s
        body = orjson.dumps(self.question_body(ident, question, context, event, call, deadline))
        headers = {"Content-Type": "application/json", SIGNATURE_HEADER: sign(self.settings.secret, body)}
        answer = Answer("timeout", detail=f"the approval webhook gave no answer within {timeout_s:g} s")
        # Open before posting: the callback may come before the 202 does.
        pending = self.callbacks.open(ident, self.settings.secret, deadline)
        try:
            with anyio.move_on_after(timeout_s):
                try:
                    async with httpx2.AsyncClient(timeout=httpx2.Timeout(timeout_s), follow_redirects=False) as client:
                        response = await client.post(self.settings.url, content=body, headers=headers)
                except httpx2.HTTPError as exc:
                    return Answer("unreachable", detail=f"the approval webhook failed: {type(exc).__name__}")
                if response.status_code == 202:
                    if self.callback_url(ident) is None:
                        return Answer(
                            "unreachable",
                            detail="the approval webhook answered 202, but the gateway has no HTTP front "
                            "to take its answer at a callback URL (stdio)",
                        )
                    await pending.done.wait()
                    assert pending.body is not None
                    return self._judged(pending.body, ident, question, deadline)
                answer = self._answer(response, ident, question, deadline)
        finally:
            self.callbacks.close(ident)
        return answer

    def _answer(self, response: httpx2.Response, ident: str, question: Question, deadline: float) -> Answer:
        if response.status_code != 200:
            return Answer("unreachable", detail=f"the approval webhook answered HTTP {response.status_code}")
        if not signed_by(self.settings.secret, response.content, response.headers.get(SIGNATURE_HEADER)):
            return Answer(
                "invalid", detail=f"the webhook's answer is not signed with the shared secret ({SIGNATURE_HEADER})"
            )
        return self._judged(response.content, ident, question, deadline)

    def _judged(self, content: bytes, ident: str, question: Question, deadline: float) -> Answer:
        """A signed answer's verdict (the signature already checked)."""
        try:
            raw = orjson.loads(content)
        except orjson.JSONDecodeError:
            return Answer("invalid", detail="the webhook's answer is not JSON")
        if not isinstance(raw, Mapping) or raw.get("id") != ident:
            return Answer("invalid", detail="the webhook's answer is for another question (its id)")
        if time.time() > deadline:
            return Answer("timeout", detail="the webhook's answer came after the question expired")
        answer = judge(raw, question.escalation)
        answered_by = raw.get("answered_by")
        if isinstance(answered_by, str) and answered_by:
            answer.extra["answered_by"] = answered_by[:_ANSWERED_BY_KEPT]
        return answer
