"""secrets: find credentials anywhere in a payload (AWS, GitHub, Stripe, Slack, Google keys, private keys,
JWTs, high-entropy assignments). `action: redact` (default) is a mutator replacing each with a typed
placeholder (`[REDACTED:aws_access_key]`); `action: deny` is a validator blocking with the JSON path.

Detection is `_detectors.SecretScanner`, compiled once at build time; a payload with nothing to redact
is returned untouched (no copy).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from mcp_interceptors.guards._config import EVENT_OR_WILDCARD, GuardSchema, SettingsCache, check_patterns
from mcp_interceptors.guards._detectors import SECRET_KINDS, SecretScanner
from mcp_interceptors.guards._detectors.secrets import example_keys
from mcp_interceptors.guards._scanning import (
    CONTENT_EVENTS,
    REDACTION_PRIORITY,
    TextScanner,
    deny_result,
    find_in_payload,
    redact_payload,
)
from mcp_interceptors.guards._walk import format_path, walk_strings
from mcp_interceptors.host import InterceptorHost, Invocation
from mcp_interceptors.protocol.results import MutationResult, ValidationResult

_log = logging.getLogger(__name__)

#: No credential the scanner knows is shorter than this (`xoxb-1-abcdefgh`, `://u:secret@`).
MIN_SECRET_LENGTH = 12

SCHEMA = GuardSchema(
    {
        "action": {"enum": ["redact", "deny"], "default": "redact", "description": "Mutator or validator form."},
        "kinds": {
            "type": "array",
            "items": {"enum": list(SECRET_KINDS)},
            "uniqueItems": True,
            "default": list(SECRET_KINDS),
        },
        "extra_patterns": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "default": {},
            "description": "{kind: regex} in RE2 syntax; the group named `secret`, if any, is the value.",
        },
        "allow": {
            "type": "array",
            "items": {"type": "string"},
            "default": [],
            "description": "Exact values never reported (published example keys, test fixtures).",
        },
        "placeholder": {"type": "string", "default": "[REDACTED:{kind}]"},
        "scan_keys": {"type": "boolean", "default": False, "description": "deny only: also scan mapping keys."},
        "scan_across_blocks": {
            "type": "boolean",
            "default": False,
            "description": "Also read consecutive text content blocks joined around their seams: finds a value cut "
            "across two blocks (up to 64 characters either side of the cut).",
        },
        "events": {"type": "array", "items": EVENT_OR_WILDCARD, "minItems": 1, "default": CONTENT_EVENTS},
    },
    build_only=["action", "events"],
)
DESCRIPTION = {
    "redact": "Redacts credentials (cloud keys, tokens, private keys, JWTs, secret assignments) in payloads.",
    "deny": "Blocks payloads that carry credentials, naming the kind and JSON path.",
}


def _compile(raw: Mapping[str, Any]) -> tuple[TextScanner, Mapping[str, Any]]:
    check_patterns("extra_patterns", raw["extra_patterns"])
    scanner = SecretScanner(raw["kinds"], raw["extra_patterns"])
    min_length = MIN_SECRET_LENGTH if not raw["extra_patterns"] else 1
    batchable = not raw["extra_patterns"]  # a user pattern could span the separator of a joined scan
    allow = frozenset(raw["allow"])
    across = raw["scan_across_blocks"]
    return TextScanner(scanner, min_length=min_length, allow=allow, batchable=batchable, across_blocks=across), raw


def scrub_scanner(config: Mapping[str, Any], override: Mapping[str, Any] | None = None) -> tuple[TextScanner, str]:
    """The scanner and placeholder the guard built from `config` (and an invocation `config` override)
    redacts with, for the gateway's scrub of what no event carries; in deny mode too (an error cannot be
    blocked, only redacted)."""
    scanner, raw = SettingsCache("secrets", SCHEMA, config, _compile).for_config(override or {})
    return scanner, raw["placeholder"]


def log_example_keys(guard: str, payload: Any) -> None:
    """At DEBUG, one line per AWS documentation key the scan skipped on purpose (`AKIAIOSFODNN7EXAMPLE`),
    naming the guard and the JSON path (never the key): the first key a user tries is often that one.
    Costs nothing unless DEBUG is on for this logger."""
    if not _log.isEnabledFor(logging.DEBUG):
        return
    for path, text in walk_strings(payload, include_keys=True):
        if "EXAMPLE" in text and example_keys(text):
            _log.debug(
                "guard %r: known example key skipped at %s (AWS documentation keys never authenticate)",
                guard,
                format_path(path),
            )


def build(name: str, config: Mapping[str, Any]) -> InterceptorHost:
    """A host with the redacting mutator or the denying validator, per `action`."""
    settings = SettingsCache(name, SCHEMA, config, _compile)
    host = InterceptorHost(name, copy_payloads=False)
    action = settings.raw["action"]
    events = settings.raw["events"]
    options: dict[str, Any] = {
        "events": events,
        "phase": "both",
        "description": DESCRIPTION[action],
        "config_schema": SCHEMA.advertised,
    }
    if action == "redact":

        @host.mutator(name, priority=REDACTION_PRIORITY, **options)
        async def redact(inv: Invocation) -> MutationResult | None:
            scanner, raw = settings.for_config(inv.config)
            new, counts, paths = redact_payload(inv.payload, scanner, raw["placeholder"])
            log_example_keys(name, inv.payload)
            if not counts:
                return None
            return MutationResult(modified=True, payload=new, info={"redacted": dict(counts), "paths": paths})

    else:

        @host.validator(name, **options)
        async def deny(inv: Invocation) -> ValidationResult | bool:
            scanner, raw = settings.for_config(inv.config)
            hits = list(find_in_payload(inv.payload, scanner, include_keys=raw["scan_keys"]))
            log_example_keys(name, inv.payload)
            return deny_result(hits, "credential") if hits else True

    return host
