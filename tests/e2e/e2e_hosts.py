"""In-process interceptor hosts the end-to-end gateway configs load with `hosts: [{module: ...}]`.

`host` is the standard chain of the e2e tests: it redacts secrets in tool arguments, denies
`delete_everything`, hides `hidden_tool` from `tools/list`, and tags sampling requests and
answers in both directions so a test can see the guard ran on each leg. `context_host` shows a
test the invocation context a call ran with, and `deep_host` answers with a payload too deep to send.
"""

from __future__ import annotations

import json
import re
from typing import Any

import anyio

from mcp_interceptors import InterceptorHost, Invocation, ValidationMessage, ValidationResult

SECRET = re.compile(r"sk-live-[A-Za-z0-9]{8,}")
REDACTED = "[REDACTED]"
DENIED_TOOLS = frozenset({"delete_everything"})
HIDDEN_TOOLS = frozenset({"hidden_tool"})
QUESTION_TAG = " [seen by gateway]"
ANSWER_TAG = " [checked by gateway]"
#: The `echo` text `stamp-context` replaces with the invocation context, as JSON.
WHOAMI = "whoami"
#: How deep `deepen` nests its answer: past the gateway's limit on what it sends back (200).
DEEPER = 250

host = InterceptorHost("e2e-guards")


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return SECRET.sub(REDACTED, value)
    if isinstance(value, dict):
        return {key: _scrub(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_scrub(item) for item in value]
    return value


@host.mutator("redact-secrets", events=["tools/call"], phase="request", description="Redacts sk-live-… keys.")
async def redact_secrets(inv: Invocation) -> Any:
    params = inv.payload.get("params") or {}
    return {**inv.payload, "params": {**params, "arguments": _scrub(params.get("arguments"))}}


@host.validator("deny-tools", events=["tools/call"], phase="request", description="Refuses dangerous tools.")
async def deny_tools(inv: Invocation) -> ValidationResult:
    tool = (inv.payload.get("params") or {}).get("name")
    if tool in DENIED_TOOLS:
        message = ValidationMessage(path="$.params.name", message=f"tool {tool!r} is denied", severity="error")
        return ValidationResult(valid=False, severity="error", messages=[message])
    return ValidationResult(valid=True)


@host.mutator("hide-tools", events=["tools/list"], phase="response", description="Hides internal tools.")
async def hide_tools(inv: Invocation) -> Any:
    tools = [tool for tool in inv.payload.get("tools") or [] if tool.get("name") not in HIDDEN_TOOLS]
    return {**inv.payload, "tools": tools}


@host.mutator(
    "tag-sampling", events=["sampling/createMessage"], phase="both", description="Tags sampling in both directions."
)
async def tag_sampling(inv: Invocation) -> Any:
    if inv.phase == "request":
        params = dict(inv.payload.get("params") or {})
        messages = []
        for message in params.get("messages") or []:
            content = message.get("content")
            if isinstance(content, dict) and content.get("type") == "text":
                message = {**message, "content": {**content, "text": content["text"] + QUESTION_TAG}}
            messages.append(message)
        return {**inv.payload, "params": {**params, "messages": messages}}
    content = inv.payload.get("content")
    if isinstance(content, dict) and content.get("type") == "text":
        return {**inv.payload, "content": {**content, "text": content["text"] + ANSWER_TAG}}
    return inv.payload


context_host = InterceptorHost("e2e-context")


@context_host.mutator("stamp-context", events=["tools/call"], phase="request", description="Shows the context.")
async def stamp_context(inv: Invocation) -> Any:
    params = inv.payload.get("params") or {}
    arguments = params.get("arguments") or {}
    if arguments.get("text") != WHOAMI:
        return inv.payload
    context = inv.context.to_wire() if inv.context is not None else {}
    return {**inv.payload, "params": {**params, "arguments": {**arguments, "text": json.dumps(context)}}}


deep_host = InterceptorHost("e2e-deep")


@deep_host.mutator("deepen", events=["tools/call"], phase="response", description="Nests the result too deep.")
async def deepen(inv: Invocation) -> Any:
    nested: Any = inv.payload
    for _ in range(DEEPER):
        nested = [nested]
    return {**inv.payload, "nested": nested}


#: A host with one response-phase validator: a tool result mentioning `LEAK_MARKER` is refused.
response_guard = InterceptorHost("e2e-response-guard")
LEAK_MARKER = "leak-marker-7d1e"


@response_guard.validator("deny-leaks", events=["tools/call"], phase="response", description="Refuses leaky results.")
async def deny_leaks(inv: Invocation) -> ValidationResult:
    if LEAK_MARKER in str(inv.payload):
        message = ValidationMessage(path="$.content", message="the result leaks", severity="error")
        return ValidationResult(valid=False, severity="error", messages=[message])
    return ValidationResult(valid=True)


#: A host with one validator on `resources/subscribe`: subscribing to `FORBIDDEN_SUBSCRIPTION` is refused.
subscribe_guard = InterceptorHost("e2e-subscribe-guard")
FORBIDDEN_SUBSCRIPTION = "sub://other"


@subscribe_guard.validator(
    "deny-subscription", events=["resources/subscribe"], phase="request", description="Refuses one subscription."
)
async def deny_subscription(inv: Invocation) -> ValidationResult:
    if (inv.payload.get("params") or {}).get("uri") == FORBIDDEN_SUBSCRIPTION:
        message = ValidationMessage(path="$.params.uri", message="not this one", severity="error")
        return ValidationResult(valid=False, severity="error", messages=[message])
    return ValidationResult(valid=True)


#: A host with validators on sampling: a question or an answer mentioning `FORBIDDEN_QUESTION` is refused.
question_guard = InterceptorHost("e2e-question-guard")
FORBIDDEN_QUESTION = "forbidden-question-5b2c"


@question_guard.validator(
    "deny-questions", events=["sampling/createMessage"], phase="request", description="Refuses one question."
)
async def deny_questions(inv: Invocation) -> ValidationResult:
    if FORBIDDEN_QUESTION in str(inv.payload):
        message = ValidationMessage(path="$.params.messages", message="not this question", severity="error")
        return ValidationResult(valid=False, severity="error", messages=[message])
    return ValidationResult(valid=True)


@question_guard.validator(
    "deny-answers", events=["sampling/createMessage"], phase="response", description="Refuses one answer."
)
async def deny_answers(inv: Invocation) -> ValidationResult:
    if FORBIDDEN_QUESTION in str(inv.payload):
        message = ValidationMessage(path="$.content", message="not this answer", severity="error")
        return ValidationResult(valid=False, severity="error", messages=[message])
    return ValidationResult(valid=True)


#: A host whose request validator on tools/call holds an `echo` of `HOLD_TEXT` until the call is cancelled.
hold_guard = InterceptorHost("e2e-hold-guard")
HOLD_TEXT = "hold-in-chain-7d1e"


@hold_guard.validator("hold-calls", events=["tools/call"], phase="request", description="Holds one call.")
async def hold_calls(inv: Invocation) -> ValidationResult:
    if HOLD_TEXT in str(inv.payload):
        await anyio.sleep(30)
    return ValidationResult(valid=True)
