"""The approval webhook's callback answers (`approvals/callbacks.py`): the callback URL a question carries,
and the status each callback gets (404 unknown, 401 unsigned, 400 another id, 200 once, then 409; 410 late)."""

from __future__ import annotations

import time

import orjson

from mcp_interceptors.gateway.approvals.callbacks import Callbacks, sign
from mcp_interceptors.gateway.approvals.webhook import Webhook, WebhookSettings

SECRET = b"a-shared-secret-of-some-length"


def answer(ident: str) -> bytes:
    return orjson.dumps({"id": ident, "action": "accept", "content": {}})


def test_the_callback_url_is_the_public_url_if_set_else_the_listening_address_and_none_without_a_front() -> None:
    callbacks = Callbacks()
    listening = Webhook(WebhookSettings("http://hooks.test/a", SECRET), callbacks)
    proxied = Webhook(WebhookSettings("http://hooks.test/a", SECRET, public_url="https://gw.example.com/"), callbacks)
    assert listening.callback_url("q1") is None and proxied.callback_url("q1") is None  # stdio: no listener
    callbacks.base_url = "http://127.0.0.1:8080"
    assert listening.callback_url("q1") == "http://127.0.0.1:8080/approvals/q1"
    assert proxied.callback_url("q1") == "https://gw.example.com/approvals/q1"


def test_a_callback_is_taken_once_signed_for_its_own_id_and_in_time() -> None:
    callbacks = Callbacks()
    pending = callbacks.open("q1", SECRET, time.time() + 60)
    body = answer("q1")
    assert callbacks.receive("nope", body, sign(SECRET, body))[0] == 404
    assert callbacks.receive("q1", body, sign(b"another-secret-entirely", body))[0] == 401
    assert callbacks.receive("q1", body, None)[0] == 401
    other = answer("q2")
    assert callbacks.receive("q1", other, sign(SECRET, other))[0] == 400
    assert pending.body is None and not pending.done.is_set()  # nothing refused changed the question
    assert callbacks.receive("q1", body, sign(SECRET, body))[0] == 200
    assert pending.body == body and pending.done.is_set()
    assert callbacks.receive("q1", body, sign(SECRET, body))[0] == 409
    callbacks.close("q1")
    assert callbacks.receive("q1", body, sign(SECRET, body))[0] == 409


def test_a_callback_after_expiry_gets_410_and_changes_nothing() -> None:
    callbacks = Callbacks()
    pending = callbacks.open("q1", SECRET, time.time() - 1)
    body = answer("q1")
    assert callbacks.receive("q1", body, sign(SECRET, body))[0] == 410
    assert pending.body is None
    callbacks.close("q1")
    assert callbacks.receive("q1", body, sign(SECRET, body))[0] == 410
