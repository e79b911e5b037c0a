"""Finds credentials in a string: provider tokens by their documented shapes, private key blocks, JWTs and
random-looking values assigned to password/secret/token/api_key names.

The rules (one engine-neutral regex and a Python check each) are in `_secret_rules`; this module runs them:
one RE2 set pass picks the rules a text can match, then each picked rule's pattern and check.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from ._engine import (
    CompiledPattern,
    ScanText,
    compile_prefilter,
    compile_set,
    compile_user_pattern,
    engine_for,
    re2_escape,
)
from ._secret_rules import RANK, RULES, SECRET_KINDS, SHORTEST, Rule, example_keys
from .findings import Finding, inside_any, merge_spans

__all__ = ["SECRET_KINDS", "SecretScanner", "example_keys"]


class SecretScanner:
    """Scans strings for credentials; `scan` returns merged, non-overlapping findings sorted by start.

    `kinds` limits the scan to some of `SECRET_KINDS`. `extra_patterns` maps a new kind to a regex; the
    finding is its group named `secret` if it has one, else the whole match. Extra patterns must be RE2
    syntax and always run on re2 (linear time; see `compile_user_pattern`).
    """

    def __init__(
        self,
        kinds: Iterable[str] | None = None,
        extra_patterns: Mapping[str, str] | None = None,
        *,
        engine: Literal["auto", "re2", "re"] = "auto",
    ) -> None:
        wanted = set(SECRET_KINDS if kinds is None else kinds)
        unknown = wanted - set(SECRET_KINDS)
        if unknown:
            raise ValueError(f"unknown secret kinds {sorted(unknown)}; choose from {list(SECRET_KINDS)}")
        self._rules = [
            (rule, CompiledPattern(rule.pattern, engine_for(rule.prefer, engine), re_fence=rule.re_fence))
            for rule in RULES
            if rule.kind in wanted
        ]
        literals = sorted({re.escape(literal) for rule, _ in self._rules for literal in rule.literals})
        self._literals = re.compile("|".join(literals) or "(?!)")
        self._keywords = sorted({keyword for rule, _ in self._rules for keyword in rule.keywords})
        self._trigger_sources, self._needs = _trigger_sources([rule for rule, _ in self._rules])
        self._triggers = compile_set(self._trigger_sources)
        # The rules each answer of the trigger set selects, worked out once per distinct answer (a set of
        # a dozen entries gives few distinct answers, and most texts give one of a handful).
        self._rules_for_answer: dict[frozenset[int], list[tuple[Rule, CompiledPattern]]] = {}
        self._extras = [_compile_extra(kind, source) for kind, source in (extra_patterns or {}).items()]
        self._clean_filters: dict[tuple[str, ...], Any] = {}

    def scan(self, text: str) -> list[Finding]:
        """Return the credentials found in `text`."""
        if not self._extras and len(text) < SHORTEST:
            return []
        scan = ScanText.of(text)
        rules = self._triggered_rules(scan)
        found: list[tuple[int, int, str]] = []
        for rule, pattern in rules:
            kind, check = rule.kind, rule.check
            # Generic secrets rank last and their checks answer the candidate or nothing: one inside a
            # finding already made (`token = ghp_...` inside the GitHub token) is not worth its entropy check.
            inside = inside_any(found) if kind == "generic_secret" and found else None
            for start, end in pattern.spans(scan, rule.groups):
                if inside is not None and inside(start, end):
                    continue
                span = check(text, start, end) if check else (start, end)
                if span is not None:
                    found.append((*span, kind))
        for kind, compiled, group in self._extras:
            for match in compiled.finditer(text):
                start, end = match.span(group)
                if end > start:
                    found.append((start, end, kind))
        return merge_spans(found, RANK)

    def may_find(self, scan: ScanText) -> bool:
        """False only when no rule can match anywhere in the text: none is triggered, and no extra pattern
        (whose matches no trigger foretells) is configured. Any part of the text then scans clean."""
        if self._extras or self._triggers is None:
            return True
        return bool(self._triggered_rules(scan))

    def clean_text_filter(self, more: tuple[str, ...]) -> Any:
        """One RE2 regex over a text's UTF-8 bytes matching wherever any trigger or any of the `more` patterns
        does, or None when no such regex can stand for `may_find` (extra patterns, no google-re2, a rule with
        nothing to trigger it). Its "no match" means `may_find` is False and no `more` pattern matches:
        one pass for what a trigger set pass and `more`'s own passes would say."""
        if self._extras or self._triggers is None or not all(self._needs):
            return None
        compiled = self._clean_filters.get(more)
        if compiled is None:
            compiled = self._clean_filters[more] = compile_prefilter([*self._trigger_sources, *more])
        return compiled

    def _triggered_rules(self, scan: ScanText) -> list[tuple[Rule, CompiledPattern]]:
        """The rules whose literals and keywords occur in the text (most strings in a payload hold none)."""
        text = scan.text
        if self._triggers is not None:
            # One pass for all rules. RE2's `(?i:keyword)` folds case as the keyword rules' own RE2
            # patterns do (on ASCII text, exactly like `keyword in text.lower()`), so a rule is skipped
            # only where its pattern cannot match, and a joined scan of many strings skips nothing a
            # scan of each string would run.
            matched = frozenset(self._triggers.Match(scan.data) or ())
            rules = self._rules_for_answer.get(matched)
            if rules is None:
                rules = [rule for rule, needs in zip(self._rules, self._needs, strict=True) if needs <= matched]
                self._rules_for_answer[matched] = rules
            return rules
        if not self._extras and len(text) <= 4096 and not self._is_triggered(text):
            return []
        lowered: str | None = None
        rules = []
        for rule, pattern in self._rules:
            if rule.literals and not any(literal in text for literal in rule.literals):
                continue
            if rule.keywords:
                if lowered is None:
                    lowered = text.lower()
                if not any(keyword in lowered for keyword in rule.keywords):
                    continue
                if rule.more_keywords and not any(keyword in lowered for keyword in rule.more_keywords):
                    continue
            rules.append((rule, pattern))
        return rules

    def _is_triggered(self, text: str) -> bool:
        if self._literals.search(text):
            return True
        lowered = text.lower()
        return any(keyword in lowered for keyword in self._keywords)


def _trigger_sources(rules: Sequence[Rule]) -> tuple[list[str], list[frozenset[int]]]:
    """The RE2 sources of the trigger set, one per distinct literal or keyword alternation, and per rule the
    indices of the entries it needs."""
    entries: dict[str, int] = {}
    needs: list[frozenset[int]] = []
    for rule in rules:
        sources = []
        if rule.literals:
            sources.append("|".join(re2_escape(literal) for literal in rule.literals))
        for keywords in (rule.keywords, rule.more_keywords):
            if keywords:
                sources.append("(?i:" + "|".join(re2_escape(keyword) for keyword in keywords) + ")")
        needs.append(frozenset(entries.setdefault(source, len(entries)) for source in sources))
    return list(entries), needs


def _compile_extra(kind: str, source: str) -> tuple[str, Any, int]:
    try:
        compiled = compile_user_pattern(source)
    except ValueError as error:
        raise ValueError(f"extra secret pattern {kind!r} ({source!r}) does not compile: {error}") from None
    return kind, compiled, compiled.groupindex.get("secret", 0)
