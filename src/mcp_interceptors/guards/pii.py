"""pii: find personal data in payloads (emails, phone numbers, Luhn-checked cards, checksummed IBANs,
US SSNs, IP addresses) and redact or deny it per entity type.

Kinds whose action is `redact` go to a mutator (named after the guard); kinds whose action is `deny` go
to a validator (`<name>-deny`, or the guard's name when nothing is redacted). Detection is
`_detectors.PiiScanner`, or Presidio's pattern recognizers with `backend: presidio`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcp_interceptors.guards._config import EVENT_OR_WILDCARD, GuardSchema, SettingsCache
from mcp_interceptors.guards._detectors import DEFAULT_PHONE_REGIONS, PII_KINDS, PiiScanner, load_presidio_scanner
from mcp_interceptors.guards._scanning import (
    CONTENT_EVENTS,
    REDACTION_PRIORITY,
    Scanner,
    TextScanner,
    deny_result,
    find_in_payload,
    redact_payload,
)
from mcp_interceptors.host import InterceptorHost, Invocation
from mcp_interceptors.protocol.results import MutationResult, ValidationResult

ACTIONS = ("redact", "deny", "allow")
#: The shortest item any kind can match (`a@b.io`).
MIN_PII_LENGTH = 6

SCHEMA = GuardSchema(
    {
        "action": {"enum": ["redact", "deny"], "default": "redact", "description": "For kinds not in kind_actions."},
        "kind_actions": {
            "type": "object",
            "propertyNames": {"enum": list(PII_KINDS)},
            "additionalProperties": {"enum": list(ACTIONS)},
            "default": {},
            "description": 'Per entity type: redact, deny or allow, e.g. {"credit_card": "deny"}.',
        },
        "kinds": {"type": "array", "items": {"enum": list(PII_KINDS)}, "uniqueItems": True, "default": list(PII_KINDS)},
        "phone_regions": {
            "type": "array",
            "items": {"type": "string", "pattern": "^[A-Z]{2}$"},
            "default": list(DEFAULT_PHONE_REGIONS),
            "description": "Regions whose national phone formats count; +/00 international numbers always do.",
        },
        "include_private_ips": {"type": "boolean", "default": True},
        "allow": {"type": "array", "items": {"type": "string"}, "default": [], "description": "Exact values to skip."},
        "placeholder": {"type": "string", "default": "[REDACTED:{kind}]"},
        "scan_keys": {"type": "boolean", "default": False, "description": "deny only: also scan mapping keys."},
        "scan_across_blocks": {
            "type": "boolean",
            "default": False,
            "description": "Also read consecutive text content blocks joined around their seams: finds a value cut "
            "across two blocks (up to 64 characters either side of the cut).",
        },
        "backend": {"enum": ["builtin", "presidio"], "default": "builtin"},
        "events": {"type": "array", "items": EVENT_OR_WILDCARD, "minItems": 1, "default": CONTENT_EVENTS},
    },
    build_only=["action", "kind_actions", "backend", "events"],
)


@dataclass(frozen=True, slots=True)
class _Settings:
    redact: TextScanner | None
    deny: TextScanner | None
    placeholder: str
    scan_keys: bool


def _scanner(raw: Mapping[str, Any], kinds: Sequence[str]) -> TextScanner | None:
    if not kinds:
        return None
    scanner: Scanner
    if raw["backend"] == "presidio":
        try:
            scanner = load_presidio_scanner(kinds=kinds, phone_regions=raw["phone_regions"])
        except ImportError as exc:
            raise ValueError(f"config.backend 'presidio': {exc}") from None
    else:
        scanner = PiiScanner(kinds, raw["phone_regions"], raw["include_private_ips"])
    batchable = raw["backend"] == "builtin"  # Presidio's recognizers are not ours to reason about
    allow = frozenset(raw["allow"])
    across = raw["scan_across_blocks"]
    return TextScanner(
        scanner, min_length=MIN_PII_LENGTH, allow=allow, batchable=batchable, integers=True, across_blocks=across
    )


def _compile(raw: Mapping[str, Any]) -> _Settings:
    actions = {kind: raw["kind_actions"].get(kind, raw["action"]) for kind in raw["kinds"]}
    redact_kinds = [kind for kind, action in actions.items() if action == "redact"]
    deny_kinds = [kind for kind, action in actions.items() if action == "deny"]
    return _Settings(_scanner(raw, redact_kinds), _scanner(raw, deny_kinds), raw["placeholder"], raw["scan_keys"])


def scrub_scanners(
    config: Mapping[str, Any], override: Mapping[str, Any] | None = None
) -> list[tuple[TextScanner, str]]:
    """The scanners (its redacted kinds', then its denied kinds') and placeholder the guard built from
    `config` (and an invocation `config` override), for the gateway's scrub of what no event carries: an
    error cannot be blocked, so denied kinds are redacted there too."""
    settings = SettingsCache("pii", SCHEMA, config, _compile).for_config(override or {})
    return [(scanner, settings.placeholder) for scanner in (settings.redact, settings.deny) if scanner is not None]


def build(name: str, config: Mapping[str, Any]) -> InterceptorHost:
    """A host with a redacting mutator and/or a denying validator, per the kinds' actions."""
    settings = SettingsCache(name, SCHEMA, config, _compile)
    base = settings.base
    if base.redact is None and base.deny is None:
        raise ValueError(f"guard {name!r}: config leaves no kind to redact or deny; check kinds and kind_actions")
    host = InterceptorHost(name, copy_payloads=False)
    options: dict[str, Any] = {"events": settings.raw["events"], "phase": "both", "config_schema": SCHEMA.advertised}
    if base.redact is not None:

        @host.mutator(name, priority=REDACTION_PRIORITY, description="Redacts personal data in payloads.", **options)
        async def redact(inv: Invocation) -> MutationResult | None:
            current = settings.for_config(inv.config)
            if current.redact is None:
                return None
            new, counts, paths = redact_payload(inv.payload, current.redact, current.placeholder)
            if not counts:
                return None
            return MutationResult(modified=True, payload=new, info={"redacted": dict(counts), "paths": paths})

    if base.deny is not None:
        deny_name = f"{name}-deny" if base.redact is not None else name

        @host.validator(deny_name, description="Blocks payloads that carry denied kinds of personal data.", **options)
        async def deny(inv: Invocation) -> ValidationResult | bool:
            current = settings.for_config(inv.config)
            if current.deny is None:
                return True
            hits = list(find_in_payload(inv.payload, current.deny, include_keys=current.scan_keys))
            return deny_result(hits, "personal data") if hits else True

    return host
