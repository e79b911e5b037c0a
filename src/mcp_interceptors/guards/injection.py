"""prompt-injection: score tool results, resource contents, prompts, tool descriptions and sampling requests
for injection markers, with a severity from the score. Heuristics ship built in; any `Detector` (say, a
model-based classifier) can be plugged in beside them.

Heuristics: instruction-override phrases, role-play and system-prompt claims, hidden instructions to
keep things from the user, invisible/bidi/tag Unicode, markdown or HTML images and links to hosts not
on the allowlist that carry data, and base64 blobs that decode to such phrases. Signals from all
strings combine as a noisy-OR, so one strong signal or several weak ones raise the score.
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcp_interceptors.guards._config import GuardSchema, SettingsCache, check_patterns
from mcp_interceptors.guards._injection_checks import CHECKS, Detector, HeuristicDetector, Signal, combine, fold
from mcp_interceptors.guards._walk import format_path, string_values, walk_strings
from mcp_interceptors.host import InterceptorHost, Invocation
from mcp_interceptors.protocol.results import ValidationMessage, ValidationResult

__all__ = ["Detector", "HeuristicDetector", "Signal", "build", "combine", "fold"]
DEFAULT_HOOKS = [
    {"events": ["tools/call", "resources/read", "prompts/get", "tools/list"], "phase": "response"},
    {"events": ["sampling/createMessage"], "phase": "request"},
]


SCHEMA = GuardSchema(
    {
        "block_threshold": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.8},
        "warn_threshold": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.5},
        "allowed_hosts": {"type": "array", "items": {"type": "string"}, "default": [], "description": "Host globs."},
        "extra_phrases": {
            "type": "array",
            "items": {"type": "string"},
            "default": [],
            "description": "Regexes in RE2 syntax.",
        },
        "disabled_checks": {"type": "array", "items": {"enum": list(CHECKS)}, "default": []},
        "detectors": {
            "type": "array",
            "items": {"type": "string", "pattern": r"^[\w.]+:[\w.]+$"},
            "default": [],
            "description": "Extra detectors as `module:attribute` (a Detector, or a factory returning one).",
        },
    },
    build_only=["detectors"],
)
DESCRIPTION = "Scores results, resources, prompts, tool descriptions and sampling requests for prompt injection."


@dataclass(frozen=True, slots=True)
class _Settings:
    heuristics: HeuristicDetector
    block: float
    warn: float


def _compile(raw: Mapping[str, Any]) -> _Settings:
    check_patterns("extra_phrases", raw["extra_phrases"], ignore_case=True)
    if raw["warn_threshold"] > raw["block_threshold"]:
        raise ValueError("config.warn_threshold must not exceed config.block_threshold")
    detector = HeuristicDetector(raw["allowed_hosts"], raw["extra_phrases"], raw["disabled_checks"])
    return _Settings(detector, raw["block_threshold"], raw["warn_threshold"])


def load_detector(spec: str) -> Detector:
    module_name, _, attribute = spec.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"config.detectors: cannot load {spec!r}: {exc}") from None
    # A class is a factory even though it has a `detect` attribute (its unbound method), so
    # `isinstance(cls, Detector)` would take the class itself for a detector.
    detector = target if isinstance(target, Detector) and not isinstance(target, type) else target()
    if not isinstance(detector, Detector):
        raise ValueError(f"config.detectors: {spec!r} is not a Detector (it needs a detect(text) method)")
    return detector


class InjectionGuard:
    def __init__(self, settings: SettingsCache[_Settings], detectors: Sequence[Detector]) -> None:
        self.settings = settings
        self.detectors = detectors

    async def check(self, inv: Invocation) -> ValidationResult | bool:
        settings = self.settings.for_config(inv.config)
        texts = string_values(inv.payload)
        if not self.detectors and settings.heuristics.is_clean([text for text in texts if len(text) >= 8]):
            return True
        found: list[tuple[int, Signal]] = []
        for index, text in enumerate(texts):
            if len(text) < 8:
                continue
            found.extend((index, signal) for signal in settings.heuristics.detect(text))
            for detector in self.detectors:
                outcome = detector.detect(text)
                if inspect.isawaitable(outcome):
                    outcome = await outcome
                found.extend((index, _checked(detector, signal)) for signal in outcome)
        score = combine([signal.score for _, signal in found])
        if score < settings.warn:
            return True
        severity = "error" if score >= settings.block else "warn"
        top = sorted(found, key=lambda item: -item[1].score)[:10]
        wanted = {index for index, _ in top}
        paths = {i: path for i, (path, _) in enumerate(walk_strings(inv.payload)) if i in wanted}
        messages = tuple(
            ValidationMessage(
                message=f"{s.kind}: {s.detail} (score {s.score})", severity=severity, path=format_path(paths[i])
            )
            for i, s in top
        )
        return ValidationResult(valid=False, severity=severity, messages=messages, info={"score": score})


def _checked(detector: Detector, signal: Any) -> Signal:
    """A plugged-in detector's signal, or an error naming the detector: a NaN score would neither warn
    nor block reliably (every comparison with it is false), so it fails the invocation (fail closed)."""
    score = getattr(signal, "score", None)
    if not isinstance(signal, Signal) or isinstance(score, bool) or not isinstance(score, int | float):
        raise TypeError(f"detector {type(detector).__name__} returned {signal!r}, not a Signal with a numeric score")
    if not math.isfinite(score):
        raise ValueError(f"detector {type(detector).__name__} returned a signal with score {score!r}")
    return signal


def build(name: str, config: Mapping[str, Any], *, detectors: Sequence[Detector] = ()) -> InterceptorHost:
    """A host with one validator; `detectors` (or config `detectors`) run beside the heuristics."""
    settings = SettingsCache(name, SCHEMA, config, _compile)
    try:
        loaded = [*detectors, *(load_detector(spec) for spec in settings.raw["detectors"])]
    except ValueError as exc:
        raise ValueError(f"guard {name!r}: {exc}") from None
    guard = InjectionGuard(settings, loaded)
    host = InterceptorHost(name, copy_payloads=False)
    host.validator(name, hooks=DEFAULT_HOOKS, description=DESCRIPTION, config_schema=SCHEMA.advertised)(guard.check)
    return host
