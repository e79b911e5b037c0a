"""The client-feature guards: `sampling-guard`, `elicitation-guard` and `roots-guard`, for the requests a
server sends to a client (as legacy requests, or 2026-07-28 `inputRequests`) and the client's answers.

sampling-guard caps `maxTokens`, allowlists models named in `modelPreferences`, forbids `includeContext:
allServers` unless allowed, and scans the system prompt for injection. elicitation-guard denies form
fields asking for passwords, card numbers, bank details, SSNs or one-time codes, and URL-mode elicitation
to hosts not on the allowlist. roots-guard lets only configured roots reach the server.
"""

from __future__ import annotations

import posixpath
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcp_interceptors.guards._config import GuardSchema, SettingsCache, check_patterns
from mcp_interceptors.guards._names import Glob, params_of
from mcp_interceptors.guards._walk import format_path
from mcp_interceptors.guards.injection import HeuristicDetector, combine, fold
from mcp_interceptors.host import InterceptorHost, Invocation
from mcp_interceptors.protocol.results import MutationResult, ValidationMessage, ValidationResult

GUARDS = ("sampling-guard", "elicitation-guard", "roots-guard")
CLAMP_PRIORITY = {"request": -5_000}  # normalization band (spec §6)
ROOTS_PRIORITY = {"response": -30_000}  # security sanitization band


def _deny(messages: Sequence[tuple[str, str]], **info: Any) -> ValidationResult:
    return ValidationResult(
        valid=False,
        severity="error",
        messages=tuple(ValidationMessage(message=m, severity="error", path=p) for m, p in messages),
        info=info or None,
    )


def _base(payload: Any) -> str:
    return "$" if params_of(payload) is payload else "$.params"


# --------------------------------------------------------------------------- sampling-guard

SAMPLING_SCHEMA = GuardSchema(
    {
        "max_tokens": {"type": ["integer", "null"], "minimum": 1, "default": 4096},
        "max_tokens_action": {"enum": ["clamp", "deny"], "default": "clamp"},
        "allowed_models": {
            "type": "array",
            "items": {"type": "string"},
            "default": [],
            "description": "Globs; when set, every modelPreferences hint must match one.",
        },
        "include_context": {
            "type": "array",
            "items": {"enum": ["none", "thisServer", "allServers"]},
            "default": ["none", "thisServer"],
        },
        "scan_system_prompt": {"type": "boolean", "default": True},
        "system_prompt_threshold": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.8},
    },
    build_only=["max_tokens_action"],
)


@dataclass(frozen=True, slots=True)
class _Sampling:
    max_tokens: int | None
    clamp: bool
    models: Glob
    include_context: frozenset[str]
    detector: HeuristicDetector | None
    threshold: float


def _compile_sampling(raw: Mapping[str, Any]) -> _Sampling:
    return _Sampling(
        raw["max_tokens"],
        raw["max_tokens_action"] == "clamp",
        Glob(raw["allowed_models"]),
        frozenset(raw["include_context"]),
        HeuristicDetector() if raw["scan_system_prompt"] else None,
        raw["system_prompt_threshold"],
    )


def check_sampling(s: _Sampling, payload: Any) -> ValidationResult | bool:
    params, base = params_of(payload), _base(payload)
    problems: list[tuple[str, str]] = []
    max_tokens = params.get("maxTokens")
    # With `clamp`, the `-clamp` mutator lowers it: where requests are received (a client, a gateway's
    # receive point) validators run before mutators (§5.1), so this must not block what the clamp corrects.
    if s.max_tokens is not None and not s.clamp and _over_cap(max_tokens, s.max_tokens):
        if _is_int(max_tokens):
            problems.append((f"maxTokens {max_tokens} exceeds the cap of {s.max_tokens}", f"{base}.maxTokens"))
        else:  # clients coerce "100000" and 1e9 to integers: what the cap cannot read is not within it
            message = f"maxTokens is not an integer, so the cap of {s.max_tokens} cannot hold"
            problems.append((message, f"{base}.maxTokens"))
    context = params.get("includeContext")
    if isinstance(context, str) and context not in s.include_context:
        problems.append((f"includeContext {context!r} is not allowed", f"{base}.includeContext"))
    preferences = params.get("modelPreferences")
    hints = preferences.get("hints") if isinstance(preferences, Mapping) else None
    if s.models and isinstance(hints, list):
        for index, hint in enumerate(hints):
            model = hint.get("name") if isinstance(hint, Mapping) else None
            if isinstance(model, str) and not s.models.matches(model):
                problems.append((f"model {model!r} is not allowed", f"{base}.modelPreferences.hints[{index}].name"))
    system = params.get("systemPrompt")
    if s.detector is not None and isinstance(system, str):
        score = combine([signal.score for signal in s.detector.detect(system)])
        if score >= s.threshold:
            problems.append((f"system prompt looks like prompt injection (score {score})", f"{base}.systemPrompt"))
    return _deny(problems) if problems else True


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _over_cap(max_tokens: Any, cap: int) -> bool:
    """Whether a request's `maxTokens` is more than `cap`; one that is not a JSON integer counts as more
    (a string or a float is read as a number by clients, so it must not slip past the cap)."""
    return max_tokens is not None and (not _is_int(max_tokens) or max_tokens > cap)


def clamp_sampling(s: _Sampling, payload: Any) -> Any:
    """The payload with `maxTokens` lowered to the cap (or set to it, when not an integer), or None when
    it is within it."""
    params = params_of(payload)
    if s.max_tokens is None or not _over_cap(params.get("maxTokens"), s.max_tokens):
        return None
    clamped = {**params, "maxTokens": s.max_tokens}
    return clamped if params is payload else {**payload, "params": clamped}


def _build_sampling(name: str, config: Mapping[str, Any]) -> InterceptorHost:
    settings = SettingsCache(name, SAMPLING_SCHEMA, config, _compile_sampling)
    host = InterceptorHost(name, copy_payloads=False)
    options: dict[str, Any] = {"events": ["sampling/createMessage"], "config_schema": SAMPLING_SCHEMA.advertised}

    @host.validator(name, description="Checks sampling requests: token cap, models, context, system prompt.", **options)
    async def check(inv: Invocation) -> ValidationResult | bool:
        return check_sampling(settings.for_config(inv.config), inv.payload)

    if settings.base.clamp:

        @host.mutator(f"{name}-clamp", priority=CLAMP_PRIORITY, description="Lowers maxTokens to the cap.", **options)
        async def clamp(inv: Invocation) -> Any:
            return clamp_sampling(settings.for_config(inv.config), inv.payload)

    return host


# --------------------------------------------------------------------------- elicitation-guard

#: Sensitive field categories, matched on a field's name, title and description split into words.
FIELD_CATEGORIES: dict[str, str] = {
    "password": r"\b(?:pass ?words?|passwd|pass ?phrases?|pass ?codes?|pwd|pin(?: code| number)?)\b",
    "payment_card": r"\b(?:(?:credit|debit|payment|bank) cards?(?: numbers?)?|card (?:numbers?|no|num)|cvv2?|cvc2?"
    r"|card (?:verification|security) (?:codes?|values?|numbers?)|security codes?|pan number)\b",
    "bank_account": r"\b(?:routing (?:numbers?|no)|aba|iban|bank accounts?(?: numbers?)?|account (?:numbers?|no)"
    r"|sort codes?|swift(?: codes?)?|bic)\b",
    "ssn": r"\b(?:ssn|social security(?: numbers?)?|national insurance(?: numbers?)?|tax ?payer id)\b",
    "one_time_code": r"\b(?:otp|one ?time (?:codes?|pass ?codes?|pass ?words?|pins?)|verification codes?|2fa"
    r"(?: codes?)?|mfa(?: codes?)?|totp|auth(?:entication)? codes?|sms codes?|login codes?)\b",
}
ELICITATION_SCHEMA = GuardSchema(
    {
        "deny_categories": {
            "type": "array",
            "items": {"enum": list(FIELD_CATEGORIES)},
            "default": list(FIELD_CATEGORIES),
        },
        "extra_field_patterns": {"type": "array", "items": {"type": "string"}, "default": []},
        "allow_fields": {"type": "array", "items": {"type": "string"}, "default": [], "description": "Field names."},
        "url_hosts": {"type": "array", "items": {"type": "string"}, "default": [], "description": "Host globs."},
        "require_https": {"type": "boolean", "default": True},
    }
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_OPTIONAL_SPACE = re.compile(r" (?!\?)")
_NON_WORD = re.compile(r"[^a-z0-9]+")


def field_words(*texts: Any, split_camel: bool = True) -> str:
    """`cardNumber`, `card_number` and "Card number:" all become `card number` (`cardnumber` without
    `split_camel`). Texts are read as a client shows them (`fold`): fullwidth `cardNumber` is `cardNumber`."""
    parts = [_CAMEL.sub(" ", t) if split_camel else t for t in map(fold, (t for t in texts if isinstance(t, str)))]
    return _NON_WORD.sub(" ", " ".join(parts).lower()).strip()


@dataclass(frozen=True, slots=True)
class _Elicitation:
    patterns: Sequence[tuple[str, Any]]
    allow_fields: frozenset[str]
    url_hosts: Glob
    require_https: bool


def _compile_elicitation(raw: Mapping[str, Any]) -> _Elicitation:
    # Word breaks are optional, for the reading without camelCase splits (`CaRdNuMbEr` reads `cardnumber`).
    patterns: list[tuple[str, Any]] = [
        (c, re.compile(_OPTIONAL_SPACE.sub(" ?", FIELD_CATEGORIES[c]))) for c in raw["deny_categories"]
    ]
    # On re2 only: a requested field's name and description come from the server, so a backtracking
    # pattern would let it hold the event loop.
    patterns += [
        ("configured", p) for p in check_patterns("extra_field_patterns", raw["extra_field_patterns"], ignore_case=True)
    ]
    return _Elicitation(patterns, frozenset(raw["allow_fields"]), Glob(raw["url_hosts"]), raw["require_https"])


def check_elicitation(s: _Elicitation, payload: Any) -> ValidationResult | bool:
    params, base = params_of(payload), _base(payload)
    if params.get("mode") == "url" or ("url" in params and "requestedSchema" not in params):
        return _check_url(s, params.get("url"), base)
    schema = params.get("requestedSchema")
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(properties, Mapping):
        return True
    problems = []
    for field, spec in properties.items():
        if field in s.allow_fields:
            continue
        spec = spec if isinstance(spec, Mapping) else {}
        texts = (field, spec.get("title"), spec.get("description"))
        # Read with camelCase split and without, so `PaSsWoRd` and `PassWord` are both a password.
        readings = (field_words(*texts), field_words(*texts, split_camel=False))
        category = next((c for c, p in s.patterns if any(p.search(words) for words in readings)), None)
        if category is None and spec.get("format") == "password":
            category = "password"
        if category is not None:
            path = base + format_path(("requestedSchema", "properties", field))[1:]  # `["card number"]` quoted
            problems.append((f"field {field!r} asks for sensitive data ({category})", path))
    return _deny(problems) if problems else True


def _check_url(s: _Elicitation, url: Any, base: str) -> ValidationResult | bool:
    path = f"{base}.url"
    if not isinstance(url, str):
        return _deny([("URL-mode elicitation without a url", path)])
    # A browser reads `\` as `/` in http(s) URLs, so `https://evil.example\@allowed.example/` goes to
    # evil.example while urlsplit sees allowed.example: read the URL as the browser will.
    parts = urllib.parse.urlsplit(url.replace("\\", "/"))
    if s.require_https and parts.scheme != "https":
        return _deny([(f"URL-mode elicitation must use https, got {parts.scheme or 'no'} scheme", path)])
    host = (parts.hostname or "").lower()
    if not s.url_hosts.matches(host):
        return _deny([(f"URL-mode elicitation to host {host!r} is not allowed", path)], host=host)
    return True


def _build_elicitation(name: str, config: Mapping[str, Any]) -> InterceptorHost:
    settings = SettingsCache(name, ELICITATION_SCHEMA, config, _compile_elicitation)
    host = InterceptorHost(name, copy_payloads=False)

    @host.validator(
        name,
        events=["elicitation/create"],
        description="Denies elicitation of passwords, payment or bank details, SSNs, one-time codes; checks URLs.",
        config_schema=ELICITATION_SCHEMA.advertised,
    )
    async def check(inv: Invocation) -> ValidationResult | bool:
        return check_elicitation(settings.for_config(inv.config), inv.payload)

    return host


# --------------------------------------------------------------------------- roots-guard

ROOTS_SCHEMA = GuardSchema(
    {
        "allowed": {
            "type": "array",
            "items": {"type": "string"},
            "default": [],
            "description": "Root URIs (a root and everything below it) or globs; empty: no root reaches the server.",
        },
        "action": {"enum": ["filter", "deny"], "default": "filter"},
    },
    build_only=["action"],
)


def normalise_uri(uri: str) -> str:
    """Scheme and host lower-cased, path percent-decoded and `..`-resolved, no trailing slash."""
    parts = urllib.parse.urlsplit(uri)
    path = urllib.parse.unquote(parts.path)
    if path:
        path = posixpath.normpath(path)
        path = "/" + path.lstrip("/") if parts.path.startswith("/") else path
    return urllib.parse.urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path.rstrip("/"), "", ""))


@dataclass(frozen=True, slots=True)
class _Roots:
    prefixes: tuple[str, ...]
    globs: Glob

    def allows(self, uri: str) -> bool:
        normal = normalise_uri(uri)
        if self.globs.matches(normal):
            return True
        return any(normal == p or normal.startswith(p + "/") for p in self.prefixes)


def _is_glob(value: str) -> bool:
    return any(c in value for c in "*?[")


def _compile_roots(raw: Mapping[str, Any]) -> _Roots:
    prefixes = tuple(normalise_uri(a) for a in raw["allowed"] if not _is_glob(a))
    return _Roots(prefixes, Glob(a for a in raw["allowed"] if _is_glob(a)))


def _rejected(s: _Roots, payload: Any) -> tuple[list[Any], list[int]]:
    roots = payload.get("roots") if isinstance(payload, Mapping) else None
    if not isinstance(roots, list):
        return [], []
    uris = [root.get("uri") if isinstance(root, Mapping) else None for root in roots]
    return roots, [i for i, uri in enumerate(uris) if not (isinstance(uri, str) and s.allows(uri))]


def _build_roots(name: str, config: Mapping[str, Any]) -> InterceptorHost:
    settings = SettingsCache(name, ROOTS_SCHEMA, config, _compile_roots)
    host = InterceptorHost(name, copy_payloads=False)
    options: dict[str, Any] = {"events": ["roots/list"], "phase": "response", "config_schema": ROOTS_SCHEMA.advertised}
    if settings.raw["action"] == "filter":

        @host.mutator(name, priority=ROOTS_PRIORITY, description="Removes roots outside the allowed ones.", **options)
        async def filter_roots(inv: Invocation) -> Any:
            roots, rejected = _rejected(settings.for_config(inv.config), inv.payload)
            if not rejected:
                return None
            dropped = set(rejected)
            kept = [root for i, root in enumerate(roots) if i not in dropped]
            return MutationResult(
                modified=True, payload={**inv.payload, "roots": kept}, info={"removed": len(rejected)}
            )

    else:

        @host.validator(name, description="Blocks roots/list answers with roots outside the allowed ones.", **options)
        async def deny_roots(inv: Invocation) -> ValidationResult | bool:
            _, rejected = _rejected(settings.for_config(inv.config), inv.payload)
            if not rejected:
                return True
            return _deny([("root is not allowed", f"$.roots[{i}].uri") for i in rejected])

    return host


def build(name: str, config: Mapping[str, Any]) -> InterceptorHost:
    """The host for one of `GUARDS`, chosen by name."""
    builders = {"sampling-guard": _build_sampling, "elicitation-guard": _build_elicitation, "roots-guard": _build_roots}
    builder = builders.get(name)
    if builder is None:
        raise ValueError(f"{__name__} builds {', '.join(GUARDS)}, not {name!r}")
    return builder(name, config)
