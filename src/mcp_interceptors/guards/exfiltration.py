"""exfiltration-guard: a cross-server flow policy per session. Sensitive values (credentials, configured
patterns, chosen PII kinds) that arrive in results from server A are remembered; a request to a
different server B carrying any of them, raw or base64/URL/hex-encoded, is blocked. Outgoing strings are
also read percent-decoded (so any percent-encoding of a value is found), and emails in any letter case.

Writing a value back to the server it came from is allowed, and a secret-shaped value nobody read is
allowed: the guard tracks flows, not values. The server of a payload is the invocation context's
`server` (the gateway fills it in), else the `tool_servers` map. State is bounded in size and time.

What a session read is kept in the guard's state store too (`state/`): a gateway replica sharing it (Redis)
blocks a value read through another replica. The guard's `Flows` index is built from the store's records.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcp_interceptors.guards._config import GuardSchema, SettingsCache, check_patterns
from mcp_interceptors.guards._detectors import PII_KINDS, SECRET_KINDS, PiiScanner, SecretScanner
from mcp_interceptors.guards._names import ServerMap, params_of, server_for
from mcp_interceptors.guards._readings import read_in_place
from mcp_interceptors.guards._scanning import SEPARATOR, TextScanner, find_in_payload
from mcp_interceptors.guards._state import ANONYMOUS, TtlMap
from mcp_interceptors.guards._taint import Flows, Origin, Overflow, is_allowed_flow
from mcp_interceptors.guards._walk import Path, PathMark, format_path, string_values, walk_strings
from mcp_interceptors.host import InterceptorHost, Invocation
from mcp_interceptors.protocol.results import ValidationMessage, ValidationResult
from mcp_interceptors.state import StateStore
from mcp_interceptors.state.memory import MemoryState

#: `guards.load` hands this guard the gateway's state store.
USES_STATE = True

#: Results that bring values in (response phase), and requests that carry values out to a server.
SOURCE_EVENTS = ["tools/call", "resources/read", "prompts/get"]
SINK_REQUESTS = ["tools/call", "resources/read", "prompts/get"]
#: A client's answers to sampling and elicitation go to the server that asked.
SINK_RESPONSES = ["sampling/createMessage", "elicitation/create"]
ENCODINGS = ("base64", "url", "hex")

SCHEMA = GuardSchema(
    {
        "secret_kinds": {"type": "array", "items": {"enum": list(SECRET_KINDS)}, "default": list(SECRET_KINDS)},
        "pii_kinds": {"type": "array", "items": {"enum": list(PII_KINDS)}, "default": []},
        "patterns": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "default": {},
            "description": "{kind: regex} of further sensitive values, in RE2 syntax (group `secret` if present).",
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
    check_patterns("patterns", raw["patterns"])
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


def _percent_decoded(text: str) -> str | None:
    """`text` with its percent-escapes decoded, or None when it has none (one linear pass, no recursion).

    Decoding the outgoing text finds every percent-encoding of a value (`%41%4B%49%41...`, partial, either
    hex case), where encoding the remembered value could only find the one form `quote` produces.
    """
    if "%" not in text:
        return None
    decoded = urllib.parse.unquote(text, errors="surrogateescape")
    return decoded if decoded != text else None


def _occurs(form: str, origin: Origin, texts: list[str]) -> bool:
    return any(form in (text.lower() if origin.caseless else text) for text in texts)


def _readings(text: str, decode: bool) -> list[tuple[str, str]]:
    """`(text, how it was read)`: the string as sent, then percent-decoded when `url` is among the encodings
    and it has escapes, then read as a reader sees it (other escapes decoded, invisible and look-alike
    characters undone)."""
    readings = [(text, "raw")]
    if decode and (decoded := _percent_decoded(text)) is not None:
        readings.append((decoded, "url"))
    if (undone := read_in_place(text, percent=False)) is not None:
        readings.append((undone, "escaped"))
    return readings


def _texts(text: str, decode: bool) -> list[str]:
    return [reading for reading, _ in _readings(text, decode)]


def _describe(origin: Origin, target: str | None) -> str:
    sources = ", ".join(sorted(repr(s) if s else "an unknown server" for s in origin.servers))
    encoded = "" if origin.encoding == "raw" else f" ({origin.encoding}-encoded)"
    destination = repr(target) if target else "an unknown server"
    return f"{origin.kind} read from {sources} is sent to {destination}{encoded}"


def _record_field(value: str, server: str | None) -> str:
    return json.dumps(["v", server, value], ensure_ascii=False)


def _overflow_field(kind: str, server: str | None) -> str:
    return json.dumps(["o", server, kind], ensure_ascii=False)


class ExfiltrationGuard:
    def __init__(self, name: str, settings: SettingsCache[_Settings], state: StateStore) -> None:
        raw = settings.raw
        self.name = name
        self.state = state
        self.settings = settings
        self.max_values = raw["max_values_per_session"]
        self.ttl_s = raw["value_ttl_seconds"]
        #: Sessions that remember values are never evicted (see `_flows_for`); idle ones expire.
        self.sessions: TtlMap[str, Flows] = TtlMap(max_items=raw["max_sessions"], ttl_s=self.ttl_s)
        #: What sessions the guard had no room for read: it applies to every session.
        self.overflow = Overflow(self.ttl_s)

    async def handle(self, inv: Invocation) -> ValidationResult | bool:
        settings = self.settings.for_config(inv.config)
        if inv.phase == "response" and inv.event in SOURCE_EVENTS:
            await self.learn(settings, inv)
            return True
        await self._sync(inv.session_id, settings)
        return self.check(settings, inv)

    def _state_key(self, session_id: str | None) -> str:
        return f"exfiltration:{self.name}:{session_id or ANONYMOUS}"

    async def _sync(self, session_id: str | None, settings: _Settings) -> None:
        """Bring the session's `Flows` up to what the store holds: values read through other replicas."""
        records = await self.state.fields(self._state_key(session_id))
        flows = self.sessions.get(session_id or ANONYMOUS)
        if not records or (flows is not None and flows.synced == len(records)):
            return
        flows = flows or self._flows_for(session_id)
        for field, stored in records.items():
            try:
                tag, server, value = json.loads(field)
            except (ValueError, TypeError):
                continue  # not a field this guard writes
            kind = value if tag == "o" else stored  # an overflow record names its kind; a value's record holds it
            if flows is None:
                self.overflow.note(kind, server)
            elif tag == "o":
                flows.overflow.note(kind, server)
            elif not flows.knows(value, server):
                flows.remember(value, kind, server, settings.encodings, settings.min_length)
        if flows is not None:
            flows.synced = len(records)

    def _flows_for(self, session_id: str | None) -> Flows | None:
        """The session's memory, made on first use; None when the guard holds `max_sessions` sessions that all
        remember something (one that remembers nothing is dropped to make room)."""
        key = session_id or ANONYMOUS
        flows = self.sessions.get(key)
        if flows is not None:
            return flows
        flows = Flows(self.max_values, self.ttl_s)
        if self.sessions.add(key, flows):
            return flows
        idle = next((k for k, other in self.sessions.items() if not other.holds_values()), None)
        if idle is None:
            return None
        self.sessions.pop(idle)
        return flows if self.sessions.add(key, flows) else None

    async def learn(self, settings: _Settings, inv: Invocation) -> None:
        server = server_for(inv, None, settings.servers)
        trace = inv.context.trace_id if inv.context is not None else None
        flows: Flows | None = None
        if server is None and trace is not None:
            # A result names no tool: its server is the one its request (same traceId) was attributed to.
            flows = self.sessions.get(inv.session_id or ANONYMOUS)
            server = flows.pending.pop(trace) if flows is not None else None
        hits = [
            hit for scanner in settings.scanners for hit in find_in_payload(inv.payload, scanner, include_keys=True)
        ]
        if not hits:  # nothing to record: no round trip to the store
            return
        key = self._state_key(inv.session_id)
        # The store first, every value of the result in one write: a value no replica can be told of must not
        # pass here either.
        records = [(_record_field(hit.value, server), hit.kind) for hit in hits]
        stored = await self.state.put_many(key, records, ttl_s=self.ttl_s, max_fields=self.max_values)
        # Kinds the session had no room for (it holds all the values it may) fail closed everywhere.
        full = sorted({hit.kind for hit, kept in zip(hits, stored, strict=True) if kept is None})
        if full:
            await self.state.put_many(key, [(_overflow_field(kind, server), "1") for kind in full], ttl_s=self.ttl_s)
        for hit, kept in zip(hits, stored, strict=True):
            flows = flows or self._flows_for(inv.session_id)
            if flows is None:  # no room for this session: every session fails closed for the kind
                self.overflow.note(hit.kind, server)
            elif kept is None:
                flows.overflow.note(hit.kind, server)
            else:
                flows.remember(hit.value, hit.kind, server, settings.encodings, settings.min_length)

    def check(self, settings: _Settings, inv: Invocation) -> ValidationResult | bool:
        params = params_of(inv.payload)
        name = params.get("uri") if inv.event == "resources/read" else params.get("name")
        target = server_for(inv, name if isinstance(name, str) else None, settings.servers)
        trace = inv.context.trace_id if inv.context is not None and not inv.context.server else None
        # Outside the gateway: remembered for the result, which names no tool (see `learn`).
        if (
            inv.phase == "request"
            and target is not None
            and trace is not None
            and (mine := self._flows_for(inv.session_id))
        ):
            mine.pending.set(trace, target)
        flows = self.sessions.get(inv.session_id or ANONYMOUS)
        messages = self._carried(flows, settings, inv.payload, target) if flows is not None and len(flows.forms) else []
        if not messages and (self.overflow or (flows is not None and flows.overflow)):
            messages = self._shaped(flows, settings, inv.payload, target)
        if not messages:
            return True
        return ValidationResult(valid=False, severity="error", messages=tuple(messages[:20]), info={"target": target})

    def _carried(self, flows: Flows, settings: _Settings, payload: Any, target: str | None) -> list[ValidationMessage]:
        """Messages for the remembered values the payload carries to a server they may not go to."""
        minimum, decode = settings.min_length, "url" in settings.encodings
        texts = [
            reading
            for text in string_values(payload, include_keys=True)  # a mapping key is sent too
            if len(text) >= minimum
            for reading in _texts(text, decode)
        ]
        found = [
            (form, origin)
            for form, origin in flows.carried(texts, SEPARATOR)
            if not is_allowed_flow(origin, target, settings.block_unknown)
        ]
        messages = []
        hidden: dict[Path, str] = {}
        strings = (
            [(path, text) for path, text in walk_strings(payload, include_keys=True) if len(text) >= minimum]
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
        return messages or _split_across_strings(flows, settings, payload, target, decode)

    def _shaped(
        self, flows: Flows | None, settings: _Settings, payload: Any, target: str | None
    ) -> list[ValidationMessage]:
        """Fail closed past the caps: any value of a kind that could not be remembered, sent to a server it
        may not have come from, is blocked (found by shape, as `secrets` and `pii` find it)."""
        messages = []
        hidden: dict[Path, str] = {}
        for scanner in settings.scanners:
            for hit in find_in_payload(payload, scanner, include_keys=True):
                if flows is not None and flows.overflow.blocks(hit.kind, target, settings.block_unknown):
                    cap = "max_values_per_session"
                elif self.overflow.blocks(hit.kind, target, settings.block_unknown):
                    cap = "max_sessions"
                else:
                    continue
                if hit.path and hit.path[-1] is PathMark.KEY:
                    hidden[hit.path[:-1]] = "[REDACTED]"
                destination = repr(target) if target else "an unknown server"
                text = (
                    f"{hit.kind} sent to {destination}: more sensitive values were read than exfiltration-guard "
                    f"remembers ({cap}), so no {hit.kind} goes to a server it may not have come from until they expire"
                )
                messages.append(ValidationMessage(message=text, severity="error", path=format_path(hit.path, hidden)))
        return messages


def _split_across_strings(
    flows: Flows, settings: _Settings, payload: Any, target: str | None, decode: bool
) -> list[ValidationMessage]:
    """A value cut into pieces sent in several strings (`{"a": "AKIAJ7Q2", "b": "XKZ4M5N6P3RT"}`), found in
    the values joined in the order they are sent; the message names the string where the value starts."""
    values = string_values(payload)
    if len(values) < 2:
        return []
    joined = "".join(values)
    for form, origin in flows.carried(_texts(joined, decode), SEPARATOR):
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


def _origin_in(found: list[tuple[str, Origin]], readings: list[tuple[str, str]]) -> Origin | None:
    """The first found form in the string as sent, else in a reading of it (then it travelled encoded so)."""
    for form, origin in found:
        if _occurs(form, origin, [readings[0][0]]):
            return origin
    for form, origin in found:
        for text, how in readings[1:]:
            if _occurs(form, origin, [text]):
                return origin if origin.encoding != "raw" else dataclasses.replace(origin, encoding=how)
    return None


def build(name: str, config: Mapping[str, Any], state: StateStore | None = None) -> InterceptorHost:
    """A host with one validator: learns from results, checks requests and client answers; what sessions read
    is kept in `state` (a store of the guard's own in memory by default)."""
    settings = SettingsCache(name, SCHEMA, config, _compile)
    guard = ExfiltrationGuard(name, settings, state or MemoryState(max_keys=settings.raw["max_sessions"]))
    host = InterceptorHost(name, copy_payloads=False)
    hooks = [
        {"events": SOURCE_EVENTS + SINK_RESPONSES, "phase": "response"},
        {"events": SINK_REQUESTS, "phase": "request"},
    ]
    host.validator(name, hooks=hooks, description=DESCRIPTION, config_schema=SCHEMA.advertised)(guard.handle)
    return host
