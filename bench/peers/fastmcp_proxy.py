"""FastMCP's proxy in front of the bench's echo upstream, with middleware doing our five guards' work.

Run by `bench/compare.py` with the interpreter of its own venv (`bench/.venv-fastmcp`, fastmcp pinned
there), never imported by it:

    python bench/peers/fastmcp_proxy.py [--http PORT] (--upstream-url URL | -- UPSTREAM_COMMAND...)

The upstream is spawned over stdio (or reached over Streamable HTTP) and its session is connected once
and reused for every request (FastMCP's fastest proxy set-up; its default opens a fresh backend session
per request). The
`GuardsMiddleware.on_call_tool` hook mirrors `secrets`, `pii`, `tool-policy`, `schema-guard` and
`size-limit` with plain `re` patterns of the same shapes as our detectors: it checks the tool name
and the size, validates the arguments against the tool's input schema, redacts secrets and personal
data in every string of the arguments, and again in the result's text and structured content.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

import anyio
import jsonschema
from fastmcp import Client, FastMCP
from fastmcp.client.transports import StdioTransport
from fastmcp.server import create_proxy
from fastmcp.server.middleware import Middleware, MiddlewareContext
from fastmcp.tools.base import ToolResult
from mcp.types import TextContent

MAX_BYTES = 1 << 20
SECRETS = {
    "aws_access_key": r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b",
    "aws_secret_key": r"(?i:aws[A-Za-z0-9_ .-]{0,20}secret[A-Za-z0-9_ .-]{0,20}|secret_?access_?key)"
    r"""["']?[ \t]*[:=][ \t]*["']?([A-Za-z0-9/+]{40})\b""",
    "github_token": r"\bgh[pousr]_[A-Za-z0-9]{36}\b",
    "github_fine_grained_token": r"\bgithub_pat_[A-Za-z0-9_]{82}\b",
    "stripe_key": r"\b[rs]k_live_[A-Za-z0-9]{24,247}\b",
    "slack_token": r"\bxox[abposr]-(?:[0-9]{1,20}-){1,4}[A-Za-z0-9]{8,64}\b",
    "slack_webhook": r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/+-]{20,}",
    "google_api_key": r"\bAIza[A-Za-z0-9_-]{35}\b",
    "private_key": r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY-----[\s\S]*?-----END[A-Z0-9 ]{0,40}PRIVATE KEY-----",
    "jwt": r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
    "generic_secret": r"(?i:password|passwd|passphrase|secret|token|api[_-]?key|access[_-]?key|credentials?)"
    r"""["']?[ \t]*[:=][ \t]*["']?([^\s"'`,;<>(){}\[\]]{8,})""",
    "bearer": r"(?i:bearer)[ \t]+([A-Za-z0-9._~+/-]{16,512}=*)",
    "url_password": r"://[^/\s:@\"']{1,64}:([^/\s:@\"']{1,128})@",
}
PII = {
    "email": r"\b[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9][A-Za-z0-9-]*(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,24}\b",
    "credit_card": r"\b[0-9](?:[ -]?[0-9]){12,18}\b",
    "iban": r"\b[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30}\b",
    "us_ssn": r"\b[0-9]{3}-[0-9]{2}-[0-9]{4}\b",
    "ip_address": r"\b(?:[0-9]{1,3}\.){3}[0-9]{1,3}\b|\b(?:[0-9A-Fa-f]{1,4}:){7}[0-9A-Fa-f]{1,4}\b",
    "phone": r"(?:\+|\b00)[1-9][0-9 ().-]{7,18}[0-9]\b|\(?\b[0-9]{3}\)?[ .-][0-9]{3}[ .-][0-9]{4}\b",
}
PATTERNS = [(kind, re.compile(source)) for kind, source in {**SECRETS, **PII}.items()]


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, char in enumerate(reversed(digits)):
        value = int(char) * (2 if i % 2 else 1)
        total += value - 9 if value > 9 else value
    return total % 10 == 0


def redact_text(text: str) -> str:
    for kind, pattern in PATTERNS:
        if kind == "credit_card":
            text = pattern.sub(
                lambda m: "[REDACTED:credit_card]" if luhn_ok(re.sub(r"[ -]", "", m.group(0))) else m.group(0), text
            )
        elif pattern.groups:
            text = pattern.sub(lambda m, kind=kind: m.group(0).replace(m.group(1), f"[REDACTED:{kind}]"), text)
        else:
            text = pattern.sub(f"[REDACTED:{kind}]", text)
    return text


def redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return redact_text(value) if len(value) >= 6 else value
    if isinstance(value, dict):
        return {key: redact_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [redact_value(item) for item in value]
    return value


class GuardsMiddleware(Middleware):
    """tool-policy, size-limit and schema-guard on the request; secrets and PII redaction both ways."""

    def __init__(self, schemas: dict[str, dict[str, Any]]) -> None:
        self.validators = {name: jsonschema.Draft202012Validator(schema) for name, schema in schemas.items()}

    async def on_call_tool(self, context: MiddlewareContext[Any], call_next: Any) -> Any:
        params = context.message
        validator = self.validators.get(params.name)
        if validator is None:
            raise ValueError(f"tool {params.name!r} is not allowed")
        arguments = params.arguments or {}
        if len(json.dumps(arguments)) > MAX_BYTES:
            raise ValueError("request too large")
        validator.validate(arguments)
        params = params.model_copy(update={"arguments": redact_value(arguments)})
        result: ToolResult = await call_next(context.copy(message=params))
        content = [
            TextContent(type="text", text=redact_text(block.text)) if isinstance(block, TextContent) else block
            for block in result.content
        ]
        structured = redact_value(result.structured_content) if result.structured_content is not None else None
        if len(json.dumps([block.model_dump() for block in content])) > MAX_BYTES:
            raise ValueError("result too large")
        return ToolResult(content=content, structured_content=structured, meta=result.meta, is_error=result.is_error)


async def main(port: int | None, upstream: list[str], upstream_url: str | None) -> None:
    backend = Client(upstream_url) if upstream_url else Client(StdioTransport(command=upstream[0], args=upstream[1:]))
    async with backend:
        schemas = {tool.name: tool.input_schema for tool in await backend.list_tools()}
        proxy: FastMCP[Any] = create_proxy(backend, name="fastmcp-proxy")
        proxy.add_middleware(GuardsMiddleware(schemas))
        if port is None:
            await proxy.run_async(transport="stdio", show_banner=False)
        else:
            await proxy.run_async(transport="http", host="127.0.0.1", port=port, show_banner=False, log_level="warning")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", type=int, metavar="PORT")
    parser.add_argument("--upstream-url")
    parser.add_argument("upstream", nargs="*")
    args = parser.parse_args(sys.argv[1:])
    if bool(args.upstream) == bool(args.upstream_url):
        parser.error("give either --upstream-url or an upstream command after --")
    anyio.run(main, args.http, args.upstream, args.upstream_url)
