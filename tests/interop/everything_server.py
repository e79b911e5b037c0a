"""An everything-style MCP server for the `@modelcontextprotocol/conformance` server scenarios, on mcp 2.3.

The npm `@modelcontextprotocol/server-everything` neither speaks 2026-07-28 nor has the suite's
`test_*` tools, so this one implements what the scenarios ask for (tool, resource and prompt names
and shapes from their descriptions). Typed pieces use `MCPServer`; the raw 2026-07-28
`input_required` tools, the JSON Schema 2020-12 tool and subscriptions are answered by one middleware,
and listed in `tools/list` like the rest, so a gateway in front can advertise (and so route) them.

python everything_server.py              # stdio
python everything_server.py --http PORT  # http://127.0.0.1:PORT/mcp
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import sys
from collections.abc import Mapping
from typing import Annotated, Any

import anyio
import mcp_types as types
from mcp import MCPError
from mcp.server import ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve, Sample
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS as HANDSHAKE_VERSIONS
from pydantic import BaseModel, Field

PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c63f8cfc0f01f0005000201a5e3c7d50000000049454e44ae426082"
    )
).decode()
WAV = base64.b64encode(
    b"RIFF$\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00@\x1f\x00\x00\x80>\x00\x00"
    b"\x02\x00\x10\x00data\x00\x00\x00\x00"
).decode()
STATE_KEY = b"everything-server-request-state"
CAPS_META = "io.modelcontextprotocol/clientCapabilities"

server = MCPServer("conformance-everything", version="1.0.0", instructions="Everything-style conformance server.")


# --------------------------------------------------------------------------- typed tools


@server.tool(description="Returns simple text content.")
async def test_simple_text() -> str:
    return "This is a simple text response for testing."


@server.tool(description="Returns image content.")
async def test_image_content() -> list[types.ContentBlock]:
    return [types.ImageContent(type="image", data=PNG, mime_type="image/png")]


@server.tool(description="Returns audio content.")
async def test_audio_content() -> list[types.ContentBlock]:
    return [types.AudioContent(type="audio", data=WAV, mime_type="audio/wav")]


def _text_resource(uri: str, text: str, mime: str = "text/plain") -> types.EmbeddedResource:
    contents = types.TextResourceContents(uri=uri, mime_type=mime, text=text)
    return types.EmbeddedResource(type="resource", resource=contents)


@server.tool(description="Returns an embedded resource.")
async def test_embedded_resource() -> list[types.ContentBlock]:
    return [_text_resource("test://embedded-resource", "This is an embedded resource content.")]


@server.tool(description="Returns text, image and resource content.")
async def test_multiple_content_types() -> list[types.ContentBlock]:
    return [
        types.TextContent(type="text", text="Multiple content types test:"),
        types.ImageContent(type="image", data=PNG, mime_type="image/png"),
        _text_resource("test://mixed-content-resource", '{"test":"data","value":123}', "application/json"),
    ]


@server.tool(description="Sends three log messages while it runs.")
async def test_tool_with_logging(ctx: Context) -> str:
    await ctx.info("Tool execution started")
    await anyio.sleep(0.05)
    await ctx.info("Tool processing data")
    await anyio.sleep(0.05)
    await ctx.info("Tool execution completed")
    return "Tool with logging executed successfully"


@server.tool(description="Always fails with a tool error.")
async def test_error_handling() -> str:
    raise ValueError("This tool intentionally returns an error for testing")


@server.tool(description="Reports progress 0, 50, 100.")
async def test_tool_with_progress(ctx: Context) -> str:
    for step in (0, 50, 100):
        await ctx.report_progress(step, 100, f"step {step}")
        await anyio.sleep(0.05)
    return "Progress complete"


def _sample(prompt: str) -> Sample:
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))
    return Sample([message], max_tokens=100)


@server.tool(description="Asks the client's model (sampling).")
async def test_sampling(prompt: str, answer: Annotated[types.CreateMessageResult, Resolve(_sample)]) -> str:
    content = answer.content
    return f"LLM response: {content.text if isinstance(content, types.TextContent) else content}"


class UserInfo(BaseModel):
    username: str = Field(description="User's response")
    email: str = Field(description="User's email address")


def _elicit(message: str) -> Elicit[UserInfo]:
    return Elicit(message, UserInfo)


@server.tool(description="Asks the user (elicitation).")
async def test_elicitation(message: str, answer: Annotated[Any, Resolve(_elicit)]) -> str:
    return f"User response: {answer}"


@server.tool(description="Mirrors `region` into the Mcp-Param-Region header (SEP-2243).")
async def test_custom_headers(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
    return f"region: {region}"


@server.tool(description="Diagnostic for server-stateless: logs once (only a client that set a log level hears it).")
async def test_logging_tool(ctx: Context) -> str:
    await ctx.info("test_logging_tool ran")
    return "logged"


class Confirmation(BaseModel):
    ok: bool


def _confirm() -> Elicit[Confirmation]:
    return Elicit("Please confirm", Confirmation)


@server.tool(description="Diagnostic for server-stateless: asks the user through the response stream.")
async def test_streaming_elicitation(answer: Annotated[Any, Resolve(_confirm)]) -> str:
    return f"answer: {answer}"


# --------------------------------------------------------------------------- resources, prompts, completion


@server.resource("test://static-text", description="A static text resource.", mime_type="text/plain")
async def static_text() -> str:
    return "This is the content of the static text resource."


@server.resource("test://static-binary", description="A static binary resource.", mime_type="image/png")
async def static_binary() -> bytes:
    return base64.b64decode(PNG)


@server.resource("test://watched-resource", description="A resource to subscribe to.", mime_type="text/plain")
async def watched() -> str:
    return "Watched resource content."


@server.resource("test://template/{id}/data", description="A templated resource.", mime_type="application/json")
async def template_data(id: str) -> str:
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"}, separators=(",", ":"))


@server.prompt(description="A simple prompt.")
async def test_simple_prompt() -> str:
    return "This is a simple prompt for testing."


@server.prompt(description="A prompt with two arguments.")
async def test_prompt_with_arguments(arg1: str, arg2: str) -> str:
    return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"


@server.prompt(description="A prompt embedding a resource.")
async def test_prompt_with_embedded_resource(resourceUri: str) -> list[UserMessage]:
    return [
        UserMessage(_text_resource(resourceUri, "Embedded resource content for testing.")),
        UserMessage("Please process the embedded resource above."),
    ]


@server.prompt(description="A prompt with an image.")
async def test_prompt_with_image() -> list[UserMessage]:
    return [
        UserMessage(types.ImageContent(type="image", data=PNG, mime_type="image/png")),
        UserMessage("Please analyze the image above."),
    ]


@server.completion()
async def complete(ref: Any, argument: types.CompletionArgument, context: Any) -> types.Completion:
    options = ["paris", "park", "party"]
    return types.Completion(values=[o for o in options if o.startswith(argument.value)], total=3, has_more=False)


# --------------------------------------------------------------------------- raw pieces (one middleware)

JSON_SCHEMA_TOOL = {
    "name": "json_schema_2020_12_tool",
    "description": "Tool with JSON Schema 2020-12 features",
    "inputSchema": {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "$defs": {
            "address": {
                "$anchor": "addressDef",
                "type": "object",
                "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
            }
        },
        "properties": {
            "name": {"type": "string"},
            "address": {"$ref": "#/$defs/address"},
            "contactMethod": {"type": "string", "enum": ["phone", "email"]},
            "phone": {"type": "string"},
            "email": {"type": "string"},
        },
        "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
        "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
        "then": {"required": ["phone"]},
        "else": {"required": ["email"]},
        "additionalProperties": False,
    },
}


def _elicitation(message: str, field: str, kind: str = "string") -> dict[str, Any]:
    schema = {"type": "object", "properties": {field: {"type": kind}}, "required": [field]}
    return {"method": "elicitation/create", "params": {"message": message, "requestedSchema": schema}}


def _sampling(text: str, max_tokens: int) -> dict[str, Any]:
    message = {"role": "user", "content": {"type": "text", "text": text}}
    return {"method": "sampling/createMessage", "params": {"messages": [message], "maxTokens": max_tokens}}


ROOTS = {"method": "roots/list", "params": {}}


def _sign(payload: str) -> str:
    mac = hmac.new(STATE_KEY, payload.encode(), hashlib.sha256).hexdigest()
    return f"{payload}.{mac}"


def _verify(state: Any) -> str:
    if not isinstance(state, str) or "." not in state:
        raise MCPError(-32602, "Invalid requestState", {"reason": "missing or malformed"})
    payload, _, _mac = state.rpartition(".")
    if not hmac.compare_digest(_sign(payload), state):
        raise MCPError(-32602, "Invalid requestState: integrity check failed", {"reason": "tampered"})
    return payload


def _needs_input(requests: dict[str, Any], state: str | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {"resultType": "input_required", "inputRequests": requests}
    if state is not None:
        result["requestState"] = _sign(state)
    return result


def _text(text: str) -> dict[str, Any]:
    return {"resultType": "complete", "content": [{"type": "text", "text": text}], "isError": False}


def _responses(params: Mapping[str, Any]) -> dict[str, Any] | None:
    if "inputResponses" not in params:
        return None
    responses = params["inputResponses"]
    if not isinstance(responses, dict):
        raise MCPError(-32602, "inputResponses must be an object", {"field": "inputResponses"})
    for key, value in responses.items():
        if not isinstance(value, dict):
            raise MCPError(-32602, f"inputResponses.{key} must be an object", {"field": f"inputResponses.{key}"})
    return responses


def _content(response: Mapping[str, Any]) -> dict[str, Any]:
    content = response.get("content")
    return content if isinstance(content, dict) else {}


def _mrtr_tool(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    responses = _responses(params)
    if name == "test_input_required_result_elicitation":
        if not responses or "user_name" not in responses:
            return _needs_input({"user_name": _elicitation("What is your name?", "name")})
        return _text(f"Hello, {_content(responses['user_name']).get('name', 'stranger')}!")
    if name == "test_input_required_result_sampling":
        if not responses or "capital_question" not in responses:
            return _needs_input({"capital_question": _sampling("What is the capital of France?", 100)})
        content = responses["capital_question"].get("content") or {}
        return _text(f"Sampling response: {content.get('text', '') if isinstance(content, dict) else content}")
    if name == "test_input_required_result_list_roots":
        if not responses or "client_roots" not in responses:
            return _needs_input({"client_roots": ROOTS})
        roots = responses["client_roots"].get("roots") or []
        return _text("Roots: " + ", ".join(str(r.get("uri")) for r in roots if isinstance(r, dict)))
    if name in ("test_input_required_result_request_state", "test_input_required_result_tampered_state"):
        if not responses or "confirm" not in responses:
            return _needs_input({"confirm": _elicitation("Please confirm", "ok", "boolean")}, state="confirm")
        if _verify(params.get("requestState")) != "confirm":
            raise MCPError(-32602, "Invalid requestState", {"reason": "unexpected state"})
        return _text("state-ok: confirmed")
    if name == "test_input_required_result_multiple_inputs":
        requests = {
            "user_name": _elicitation("What is your name?", "name"),
            "greeting": _sampling("Generate a greeting", 50),
            "client_roots": ROOTS,
        }
        if not responses or not set(requests) <= set(responses):
            return _needs_input(requests, state="multiple")
        _verify(params.get("requestState"))
        return _text("All inputs received")
    if name == "test_input_required_result_multi_round":
        state = _verify(params["requestState"]) if "requestState" in params else None
        if state == "round-2" and responses and "step2" in responses:
            return _text("Multi-round complete")
        if state == "round-1" and responses and "step1" in responses:
            step2 = _elicitation("Step 2: What is your favorite color?", "color")
            return _needs_input({"step2": step2}, state="round-2")
        return _needs_input({"step1": _elicitation("Step 1: What is your name?", "name")}, state="round-1")
    if name == "test_input_required_result_capabilities":
        meta = params.get("_meta") or {}
        caps = meta.get(CAPS_META) or {}
        requests = {}
        if "sampling" in caps:
            requests["greeting"] = _sampling("Generate a greeting", 50)
        if "elicitation" in caps:
            requests["user_name"] = _elicitation("What is your name?", "name")
        if responses is None and requests:
            return _needs_input(requests)
        return _text("Capabilities respected")
    if name == "test_missing_capability":
        caps = (params.get("_meta") or {}).get(CAPS_META) or {}
        if "sampling" not in caps:
            raise MCPError(
                -32021, "Missing required client capability: sampling", {"requiredCapabilities": {"sampling": {}}}
            )
        return _text("sampling declared")
    if name == "json_schema_2020_12_tool":
        return _text(f"Received: {json.dumps(params.get('arguments') or {}, sort_keys=True)}")
    raise KeyError(name)


RAW_TOOLS = [
    JSON_SCHEMA_TOOL,
    *(
        {"name": name, "description": f"Conformance tool {name}.", "inputSchema": {"type": "object"}}
        for name in (
            "test_input_required_result_elicitation",
            "test_input_required_result_sampling",
            "test_input_required_result_list_roots",
            "test_input_required_result_request_state",
            "test_input_required_result_tampered_state",
            "test_input_required_result_multiple_inputs",
            "test_input_required_result_multi_round",
            "test_input_required_result_capabilities",
            "test_missing_capability",
        )
    ),
]
RAW_TOOL_NAMES = frozenset(tool["name"] for tool in RAW_TOOLS)
MRTR_PROMPT = {"name": "test_input_required_result_prompt", "description": "A prompt that needs input first."}


def _dump(result: HandlerResult) -> dict[str, Any]:
    if isinstance(result, BaseModel):
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dict(result)  # type: ignore[arg-type]


async def raw_pieces(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    params: dict[str, Any] = dict(ctx.params or {})
    method = ctx.method
    if method == "tools/call" and params.get("name") in RAW_TOOL_NAMES:
        return _mrtr_tool(str(params["name"]), params)
    if method == "prompts/get" and params.get("name") == MRTR_PROMPT["name"]:
        responses = _responses(params)
        if not responses:
            return _needs_input({"user_context": _elicitation("What context should the prompt use?", "context")})
        context = _content(next(iter(responses.values()))).get("context", "")
        message = {"role": "user", "content": {"type": "text", "text": f"Prompt with context: {context}"}}
        return {"resultType": "complete", "messages": [message]}
    if method in ("resources/subscribe", "resources/unsubscribe") and ctx.protocol_version in HANDSHAKE_VERSIONS:
        return {}  # removed in 2026-07-28: the runner's own -32601 answers those
    result = await call_next(ctx)
    if method == "tools/list":
        body = _dump(result)
        body["tools"] = [*body.get("tools", []), *RAW_TOOLS]
        return body
    if method == "prompts/list":
        body = _dump(result)
        body["prompts"] = [*body.get("prompts", []), MRTR_PROMPT]
        return body
    return result


server.middleware.append(raw_pieces)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", port=int(sys.argv[2]))
    else:
        server.run("stdio")
