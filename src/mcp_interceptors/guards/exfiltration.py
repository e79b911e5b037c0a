"""exfiltration-guard: a cross-server flow policy per session. Sensitive values (credentials, configured
patterns, chosen PII kinds) that arrive in results from server A are remembered; a request to a
different server B carrying any of them, raw or base64/URL/hex-encoded, is blocked. Outgoing strings are
also read percent-decoded (so any percent-encoding of a value is found), and emails in any letter case.

Writing a value back to the server it came from is allowed, and a secret-shaped value nobody read is
allowed: the guard tracks flows, not values. The server of a payload is the invocation context's
`server` (the gateway fills it in), else the `tool_servers` map. State is bounded in size and time.
"""

from __future__ import annotations

import base64
import dataclasses
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from mcp_interceptors.guards._config import GuardSchema, SettingsCache
from mcp_interceptors.guards._detectors import PII_KINDS, SECRET_KINDS, PiiScanner, SecretScanner
from mcp_interceptors.guards._names import ServerMap, params_of, server_for
from mcp_interceptors.guards._scanning import SEPARATOR, TextScanner, find_in_payload
from mcp_interceptors.guards._state import SessionState, TtlMap
from mcp_interceptors.guards._walk import Path, PathMark, format_path, string_values, walk_strings
from mcp_interceptors.host import InterceptorHost, Invocation
from mcp_interceptors.protocol.results import ValidationMessage, ValidationResult

#: Results that bring values in (response phase), and requests that carry values out to a server.
SOURCE_EVENTS = ["tools/call", "resources/read", "prompts/get"]
SINK_REQUESTS = ["tools/call", "resources/read", "prompts/get"]
#: A client's answers to sampling and elicitation go to the server that asked.
SINK_RESPONSES = ["sampling/createMessage", "elicitation/create"]
ENCODINGS = ("base64", "url", "hex")
#: Kinds whose letter case carries no meaning: `BOB@CORP.COM` is the same address as `bob@corp.com`.
CASELESS_KINDS = frozenset({"email"})
#: Requests per session whose result may still arrive (outside the gateway, see `_Flows.pending`).
_MAX_PENDING = 1024

SCHEMA = GuardSchema(
    {
        "secret_kinds": {"type": "array", "items": {"enum": list(SECRET_KINDS)}, "default": list(SECRET_KINDS)},
        "pii_kinds": {"type": "array", "items": {"enum": list(PII_KINDS)}, "default": []},
        "patterns": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "default": {},
            "description": "{kind: regex} of further sensitive values (group `secret` if present).",
        },
        "min_length": {"type": "integer", "minimum": 4, "default": 8, "description": "Shorter values are ignored."},
        "encodings": {"type": "array", "items": {"enum": list(ENCODINGS)}, "default": ["base64", "url", "hex"]},
        "unknown_server": {
            "enum": ["block", "allow"],
            "default": "block",
            "description": "A remembered value sent where the server cannot be told: block (fail closed) or allow.",
        },
        "tool_servers": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "default": {},
            "description": "Outside the gateway: {tool/prompt/URI glob: server name}.",
        },
        "max_values_per_session": {"type": "integer", "minimum": 1, "default": 256},
        "value_ttl_seconds": {"type": "number", "exclusiveMinimum": 0, "default": 3600},
        "max_sessions": {"type": "integer", "minimum": 1, "default": 10_000},
    },
    build_only=["max_values_per_session", "value_ttl_seconds", "max_sessions"],
)
DESCRIPTION = "Blocks requests that carry sensitive values read from one server to a different server."


@dataclass(frozen=True, slots=True)
class _Settings:
    scanners: tuple[TextScanner, ...]
    min_length: int
    encodings: tuple[str, ...]
    block_unknown: bool
    servers: ServerMap


def _compile(raw: Mapping[str, Any]) -> _Settings:
    secrets = SecretScanner(raw["secret_kinds"], raw["patterns"])
    scanners = [TextScanner(secrets, min_length=raw["min_length"], batchable=not raw["patterns"])]
    if raw["pii_kinds"]:
        scanners.append(TextScanner(PiiScanner(raw["pii_kinds"]), min_length=raw["min_length"]))
    return _Settings(
        tuple(scanners),
        raw["min_length"],
        tuple(raw["encodings"]),
        raw["unknown_server"] == "block",
        ServerMap(raw["tool_servers"]),
    )


def encoded_forms(value: str, encodings: Iterable[str]) -> Iterator[tuple[str, str]]:
    """`(form, encoding)` for the value and each encoding of it that could appear inside larger text.

    Base64 is produced at the three byte alignments (standard and URL-safe alphabets) and trimmed to
    the characters that depend only on the value, so the value is found inside any encoded blob.
    """
    yield value, "raw"
    data = value.encode("utf-8")
    for encoding in encodings:
        if encoding == "url":
            for quoted in {urllib.parse.quote(value, safe=""), urllib.parse.quote_plus(value, safe="")}:
                if quoted != value:
                    yield quoted, "url"
        elif encoding == "hex":
            yield data.hex(), "hex"
            yield data.hex().upper(), "hex"
        elif encoding == "base64":
            for offset in range(3):
                text = base64.b64encode(b"\0" * offset + data).decode("ascii")
                stable = text[-(-offset * 8 // 6) : (offset + len(data)) * 8 // 6]
                yield stable, "base64"
                urlsafe = stable.replace("+", "-").replace("/", "_")
                if urlsafe != stable:
                    yield urlsafe, "base64"


@dataclass(frozen=True, slots=True)
class _Origin:
    kind: str
    servers: frozenset[str | None]
    encoding: str
    caseless: bool = False  # the form is lower-case and is looked for in lower-cased text


def _percent_decoded(text: str) -> str | None:
    """`text` with its percent-escapes decoded, or None when it has none (one linear pass, no recursion).

    Decoding the outgoing text finds every percent-encoding of a value (`%41%4B%49%41...`, partial, either
    hex case), where encoding the remembered value could only find the one form `quote` produces.
    """
    if "%" not in text:
        return None
    decoded = urllib.parse.unquote(text, errors="surrogateescape")
    return decoded if decoded != text else None


@dataclass
class _Flows:
    """One session's remembered values, by every form they may travel in."""

    forms: TtlMap[str, _Origin]
    max_values: int
    #: Each remembered value: the servers it came from and its forms (removed with it).
    values: TtlMap[str, tuple[frozenset[str | None], tuple[str, ...]]] = field(init=False)
    #: Outside the gateway a result names no tool: the server of each request, by `traceId`, until its result.
    pending: TtlMap[str, str] = field(init=False)

    def __post_init__(self) -> None:
        self.values = TtlMap(max_items=self.max_values, ttl_s=self.forms.ttl_s)
        self.pending = TtlMap(max_items=_MAX_PENDING, ttl_s=self.forms.ttl_s)

    def remember(self, value: str, kind: str, server: str | None, settings: _Settings) -> None:
        known = self.values.get(value)
        if known is None and len(self.values) >= self.max_values:
            oldest, (_, forms) = self.values.items()[0]  # the least recently read value goes, with its forms
            self.values.pop(oldest)
            for form in forms:
                self.forms.pop(form)
        servers = (known[0] if known is not None else frozenset()) | {server}
        origins = [
            (form, _Origin(kind, servers, encoding))
            for form, encoding in encoded_forms(value, settings.encodings)
            if len(form) >= settings.min_length
        ]
        if kind in CASELESS_KINDS:
            origins.append((value.lower(), _Origin(kind, servers, "raw", caseless=True)))
        for form, origin in origins:
            self.forms.set(form, origin)
        self.values.set(value, (servers, tuple(form for form, _ in origins)))

    def carried(self, texts: list[str]) -> list[tuple[str, _Origin]]:
        """The remembered forms that occur in any of `texts`: each form is searched once, in all of them joined."""
        joined = SEPARATOR.join(texts)
        lowered: str | None = None
        found = []
        for form, origin in self.forms.items():
            if origin.caseless:
                lowered = joined.lower() if lowered is None else lowered
                if form in lowered:
                    found.append((form, origin))
            elif form in joined:
                found.append((form, origin))
        return found


def _occurs(form: str, origin: _Origin, texts: list[str]) -> bool:
    return any(form in (text.lower() if origin.caseless else text) for text in texts)


def _readings(text: str, decode: bool) -> list[str]:
    """The string as sent, then percent-decoded when `url` is among the encodings and it has escapes."""
    decoded = _percent_decoded(text) if decode else None
    return [text] if decoded is None else [text, decoded]


def _describe(origin: _Origin, target: str | None) -> str:
    sources = ", ".join(sorted(repr(s) if s else "an unknown server" for s in origin.servers))
    encoded = "" if origin.encoding == "raw" else f" ({origin.encoding}-encoded)"
    destination = repr(target) if target else "an unknown server"
    return f"{origin.kind} read from {sources} is sent to {destination}{encoded}"


def is_allowed_flow(origin: _Origin, target: str | None, block_unknown: bool) -> bool:
    """Back to a server the value came from is fine; where either end is unknown, `unknown_server` decides."""
    if not block_unknown and (target is None or None in origin.servers):
        return True
    return target is not None and target in origin.servers


class ExfiltrationGuard:
    def __init__(self, settings: SettingsCache[_Settings]) -> None:
        raw = settings.raw
        self.settings = settings
        max_values = raw["max_values_per_session"]
        per_session = max_values * 16  # a value has up to ~12 forms
        ttl = raw["value_ttl_seconds"]
        self.sessions: SessionState[_Flows] = SessionState(
            lambda: _Flows(TtlMap(max_items=per_session, ttl_s=ttl), max_values),
            max_sessions=raw["max_sessions"],
            ttl_s=ttl,
        )

    async def handle(self, inv: Invocation) -> ValidationResult | bool:
        settings = self.settings.for_config(inv.config)
        if inv.phase == "response" and inv.event in SOURCE_EVENTS:
            self.learn(settings, inv)
            return True
        return self.check(settings, inv)

    def learn(self, settings: _Settings, inv: Invocation) -> None:
        server = server_for(inv, None, settings.servers)
        trace = inv.context.trace_id if inv.context is not None else None
        flows: _Flows | None = None
        if server is None and trace is not None:
            # A result names no tool: its server is the one its request (same traceId) was attributed to.
            flows = self.sessions.peek(inv.session_id)
            server = flows.pending.pop(trace) if flows is not None else None
        for scanner in settings.scanners:
            for hit in find_in_payload(inv.payload, scanner, include_keys=True):
                flows = flows or self.sessions.get(inv.session_id)
                flows.remember(hit.value, hit.kind, server, settings)

    def check(self, settings: _Settings, inv: Invocation) -> ValidationResult | bool:
        params = params_of(inv.payload)
        name = params.get("uri") if inv.event == "resources/read" else params.get("name")
        target = server_for(inv, name if isinstance(name, str) else None, settings.servers)
        trace = inv.context.trace_id if inv.context is not None and not inv.context.server else None
        if inv.phase == "request" and target is not None and trace is not None:
            # Outside the gateway: remembered for the result, which names no tool (see `learn`).
            self.sessions.get(inv.session_id).pending.set(trace, target)
        flows = self.sessions.peek(inv.session_id)
        if flows is None or not len(flows.forms):
            return True
        minimum, decode = settings.min_length, "url" in settings.encodings
        texts = [
            reading
            for text in string_values(inv.payload, include_keys=True)  # a mapping key is sent too
            if len(text) >= minimum
            for reading in _readings(text, decode)
        ]
        found = [
            (form, origin)
            for form, origin in flows.carried(texts)
            if not is_allowed_flow(origin, target, settings.block_unknown)
        ]
        messages = []
        hidden: dict[Path, str] = {}
        strings = (
            [(path, text) for path, text in walk_strings(inv.payload, include_keys=True) if len(text) >= minimum]
            if found
            else []
        )
        for path, text in strings:
            # A form found in the joined text is attributed to the string holding it (one message per string).
            origin = _origin_in(found, _readings(text, decode))
            if origin is not None:
                if path[-1] is PathMark.KEY:  # the key is the value: name where it is, not what it is
                    hidden[path[:-1]] = "[REDACTED]"
                shown = format_path(path, hidden)
                messages.append(ValidationMessage(message=_describe(origin, target), severity="error", path=shown))
        if not messages:
            messages = _split_across_strings(flows, settings, inv.payload, target, decode)
        if not messages:
            return True
        return ValidationResult(valid=False, severity="error", messages=tuple(messages[:20]), info={"target": target})


def _split_across_strings(
    flows: _Flows, settings: _Settings, payload: Any, target: str | None, decode: bool
) -> list[ValidationMessage]:
    """A value cut into pieces sent in several strings (`{"a": "AKIAJ7Q2", "b": "XKZ4M5N6P3RT"}`), found in
    the values joined in the order they are sent; the message names the string where the value starts."""
    values = string_values(payload)
    if len(values) < 2:
        return []
    joined = "".join(values)
    for form, origin in flows.carried(_readings(joined, decode)):
        if is_allowed_flow(origin, target, settings.block_unknown):
            continue
        path = _string_at(payload, joined.find(form))
        message = f"{_describe(origin, target)}, split across strings"
        return [ValidationMessage(message=message, severity="error", path=format_path(path))]
    return []


def _string_at(payload: Any, offset: int) -> Path:
    """The path of the string holding `offset` of the payload's string values joined (the payload's, for -1:
    a form found in the decoded or lower-cased reading)."""
    if offset >= 0:
        for path, text in walk_strings(payload):
            if offset < len(text):
                return path
            offset -= len(text)
    return ()


def _origin_in(found: list[tuple[str, _Origin]], readings: list[str]) -> _Origin | None:
    """The first found form in the string as sent, else in its decoded reading (then it travelled url-encoded)."""
    for form, origin in found:
        if _occurs(form, origin, readings[:1]):
            return origin
    for form, origin in found:
        if _occurs(form, origin, readings[1:]):
            return origin if origin.encoding != "raw" else dataclasses.replace(origin, encoding="url")
    return None


def build(name: str, config: Mapping[str, Any]) -> InterceptorHost:
    """A host with one validator: learns from results, checks requests and client answers."""
    guard = ExfiltrationGuard(SettingsCache(name, SCHEMA, config, _compile))
    host = InterceptorHost(name, copy_payloads=False)
    hooks = [
        {"events": SOURCE_EVENTS + SINK_RESPONSES, "phase": "response"},
        {"events": SINK_REQUESTS, "phase": "request"},
    ]
    host.validator(name, hooks=hooks, description=DESCRIPTION, config_schema=SCHEMA.advertised)(guard.handle)
    return host
