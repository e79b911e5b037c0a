"""Finds credentials in a string: provider tokens by their documented shapes, private key blocks, JWTs and
random-looking values assigned to password/secret/token/api_key names.

Each rule is one engine-neutral regex (see `_engine`) plus a Python check for what regexes cannot say
cheaply: boundaries, JWT headers, entropy. Rule shapes follow detect-secrets' and gitleaks' published
patterns, tightened to exact lengths, with `github_pat_` added.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

from ._engine import (
    CompiledPattern,
    Engine,
    ScanText,
    compile_set,
    compile_user_pattern,
    engine_for,
    re2_escape,
    resolve_engine,
)
from ._entropy import has_entropy_at_least, is_placeholder, is_random_value
from .findings import Finding, inside_any, merge_spans

__all__ = ["SECRET_KINDS", "SecretScanner"]

SECRET_KINDS: tuple[str, ...] = (
    "aws_access_key",
    "aws_secret_key",
    "github_token",
    "github_fine_grained_token",
    "stripe_key",
    "slack_token",
    "slack_webhook",
    "google_api_key",
    "private_key",
    "jwt",
    "generic_secret",
)
# No rule matches fewer characters than this ("token=" plus an 8-char value).
_SHORTEST = 10
# Ties between same-length findings go to the specific kind, not the generic one.
_RANK = {"generic_secret": 1}

Check = Callable[[str, int, int], "tuple[int, int] | None"]


@dataclass(frozen=True, slots=True)
class _Rule:
    kind: str
    pattern: str
    # A match needs one of these literals in the text, or one of these keywords in its lower-cased form:
    # checking that first skips most rules for most strings, which matters for the many short ones.
    literals: tuple[str, ...]
    keywords: tuple[str, ...] = ()
    # A second keyword group: one of these must appear as well (case-insensitive too).
    more_keywords: tuple[str, ...] = ()
    groups: tuple[int, ...] = (0,)
    check: Check | None = None
    # Where both engines exist, the faster one for this rule (measured: literal prefixes favour `re`,
    # case-insensitive keywords and counted repetitions favour re2).
    prefer: Engine = "re2"
    re_fence: str = ""  # see CompiledPattern


def _fenced(chars: str) -> Check:
    """A check that rejects spans glued to `chars` on either side (what a lookaround would do)."""
    fence = frozenset(chars)

    def check(text: str, start: int, end: int) -> tuple[int, int] | None:
        if (start and text[start - 1] in fence) or (end < len(text) and text[end] in fence):
            return None
        return start, end

    return check


_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_B64 = _ALNUM + "+/"
_fence_alnum = _fenced(_ALNUM)
_fence_jwt = _fenced(_ALNUM + "_-.")
# An AWS secret key: 40 base64 chars, a "/" possibly written "\/" (a char is either, never both).
_AWS_SECRET_KEY = re.compile(r"(?:[A-Za-z0-9+/]|\\/){40}")


def _check_aws_access_key(text: str, start: int, end: int) -> tuple[int, int] | None:
    # AWS documentation's sample keys end in EXAMPLE (AKIAIOSFODNN7EXAMPLE); they are public.
    return None if text.endswith("EXAMPLE", start, end) else _fence_alnum(text, start, end)


def _check_aws_secret(text: str, start: int, end: int) -> tuple[int, int] | None:
    # The pattern takes the whole run of key characters and backslashes: the key is its first 40 base64
    # characters, a "/" possibly written "\/" (JSON that escapes slashes). A run that goes on is no key.
    # (A pattern counting 40 of `[A-Za-z0-9+]|\\?/` made every scan of such text 40 % slower; here it runs
    # once per candidate.)
    key = _AWS_SECRET_KEY.match(text, start)
    if key is None:
        return None
    end = key.end()
    if (end < len(text) and text[end] in _B64) or text.startswith("\\/", end):
        return None
    value = text[start:end]
    if value.endswith("EXAMPLEKEY"):
        return None
    return (start, end) if has_entropy_at_least(value.replace("\\/", "/"), 4.0) else None


def _check_jwt(text: str, start: int, end: int) -> tuple[int, int] | None:
    if _fence_jwt(text, start, end) is None:
        return None
    header = text[start : text.index(".", start)]
    is_header = _is_known_jwt_header(header) if len(header) <= _MAX_REMEMBERED_HEADER else _is_jwt_header(header)
    return (start, end) if is_header else None


# Tokens of one issuer share their header (a handful of algorithms and types), so verdicts are remembered,
# for headers of a real token's size only (~36-120 chars): the memory stays bounded whatever the input.
_MAX_REMEMBERED_HEADER = 256


def _is_jwt_header(header: str) -> bool:
    """True when `header` is base64url of a JSON object naming an `alg`."""
    try:
        decoded = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    except (binascii.Error, ValueError):
        return False
    return isinstance(decoded, dict) and "alg" in decoded


_is_known_jwt_header = lru_cache(maxsize=1024)(_is_jwt_header)


# Between BEGIN and END: base64, whitespace, `Proc-Type:`-style headers, JSON-escaped newlines. (Runs of
# the class are taken whole, possessively: one step per run instead of one alternation per char.)
_PEM_FILLER = re.compile(r"(?:[A-Za-z0-9+/=:,. \t\r\n-]++|\\[nr])*+")
_PEM_END = re.compile(r"-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
# Key material: at least 16 base64 chars (matched without collecting them).
_PEM_KEY_MATERIAL = re.compile(r"(?:[^A-Za-z0-9+/=]*+[A-Za-z0-9+/=]){16}")
# A block cut off before its END: only whole base64 (or header) lines, so following prose stays out.
_PEM_TRUNCATED = re.compile(
    r"(?:(?:\r?\n|\\r\\n|\\n)[ \t]*(?:[A-Za-z0-9+/=]{1,100}|[A-Za-z-]+: [^\r\n\\]*)(?=[\r\n]|\\[rn]|$))*"
)


def _check_private_key(text: str, start: int, end: int) -> tuple[int, int] | None:
    """Extend a BEGIN line to its END line; a truncated block is covered up to its last body line."""
    # Look no further than the next BEGIN line or 16 KB (an 8192-bit RSA key is ~6.5 KB), so a text
    # full of BEGIN lines costs linear time.
    limit = min(len(text), end + 16384)
    next_begin = text.find("-----BEGIN", end, limit)
    limit = next_begin if next_begin >= 0 else limit
    closing = _PEM_END.search(text, end, limit)
    if closing and _PEM_FILLER.fullmatch(text, end, closing.start()):
        stop = closing.start()
    else:
        body = _PEM_TRUNCATED.match(text, end, limit)
        stop = body.end() if body else end
    # Key material, not a header quoted in docs or code ("when your file has '-----BEGIN ...'").
    if not _PEM_KEY_MATERIAL.match(text, end, stop):
        return None
    return start, closing.end() if closing and stop == closing.start() else stop


def _check_generic(text: str, start: int, end: int) -> tuple[int, int] | None:
    if end < len(text) and text[end] == "(":
        return None  # `token = make_token(...)`: a call, not a literal
    line_start = text.rfind("\n", max(0, start - 48), start) + 1
    if "public" in text[max(line_start, start - 48) : start].lower():
        return None  # publicKeyToken, public_key: published on purpose
    return (start, end) if is_random_value(text[start:end]) else None


def _check_url_password(text: str, start: int, end: int) -> tuple[int, int] | None:
    value = text[start:end]
    return None if len(value) < 6 or is_placeholder(value) else (start, end)


_ASSIGN = r"""\\?["']?[ \t]*(?::=|=>|[:=])[ \t]*\\?"""
_GENERIC_NAMES = (
    r"(?i:(?:password|passwd|passphrase|secret|token|api[_-]?key|apikey|access[_-]?key|auth[_-]?key"
    r"|credentials?)(?:[_-]?(?:key|token|id|value))?s?)"
)
# Quoted values may lack their closing quote (a truncated line); unquoted ones stop at blanks/punctuation.
# No upper bound here: a counted bound with nothing after it makes re2 20x slower; `is_random_value`
# rejects values over 512 chars instead.
_VALUE = r"""(?:"([^"\\\r\n]{8,})|'([^'\r\n]{8,})'|([^\s"'`,;\\<>(){}\[\]]{8,}))"""

_RULES: tuple[_Rule, ...] = (
    _Rule(
        "aws_access_key",
        r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}",
        ("A3T", "AKIA", "ASIA", "ABIA", "ACCA"),
        check=_check_aws_access_key,
        prefer="re",
    ),
    _Rule(
        "aws_secret_key",
        r"(?i:aws[A-Za-z0-9_ .-]{0,20}secret[A-Za-z0-9_ .-]{0,20}|secret_?access_?key)"
        + _ASSIGN
        + r"""["']?([A-Za-z0-9+/\\]{40,})""",
        (),
        ("secret",),
        ("aws", "access"),
        groups=(1,),
        check=_check_aws_secret,
    ),
    _Rule(
        "github_token",
        r"gh[pousr]_[A-Za-z0-9]{36}",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        check=_fenced(_ALNUM + "_"),
        prefer="re",
    ),
    _Rule(
        "github_fine_grained_token",
        r"github_pat_[A-Za-z0-9_]{82}",
        ("github_pat_",),
        check=_fenced(_ALNUM + "_"),
        prefer="re",
    ),
    _Rule("stripe_key", r"[rs]k_live_[A-Za-z0-9]{24,247}", ("k_live_",), check=_fenced(_ALNUM + "_")),
    _Rule(
        "slack_token",
        r"xox[abposr]-(?:[0-9]{1,20}-){1,4}[A-Za-z0-9]{8,64}",
        ("xox",),
        check=_fenced(_ALNUM + "-"),
        prefer="re",
    ),
    _Rule(
        "slack_webhook",
        r"https:(?:\\?/){2}hooks\.slack\.com\\?/(?:services|workflows|triggers)\\?/(?:[A-Za-z0-9_+-]|\\?/){20,}",
        ("hooks.slack.com",),
        prefer="re",
    ),
    _Rule("google_api_key", r"AIza[A-Za-z0-9_-]{35}", ("AIza",), check=_fenced(_ALNUM + "_-"), prefer="re"),
    _Rule(
        "private_key",
        r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----",
        ("PRIVATE KEY",),
        check=_check_private_key,
        prefer="re",
    ),
    _Rule(
        "jwt",
        r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
        ("eyJ",),
        check=_check_jwt,
        re_fence=r"(?<![A-Za-z0-9_-])",
    ),
    _Rule(
        "generic_secret",
        _GENERIC_NAMES + _ASSIGN + _VALUE,
        (),
        ("passw", "passphrase", "secret", "token", "key", "credential"),
        groups=(1, 2, 3),
        check=_check_generic,
    ),
    _Rule(
        "generic_secret",
        r"(?i:bearer)[ \t]+([A-Za-z0-9._~+/-]{16,512}=*)",
        (),
        ("bearer",),
        groups=(1,),
        check=_check_generic,
    ),
    _Rule(
        "generic_secret",
        r"://[^/\s:@\"']{0,64}:([^/\s:@\"']{1,128})@",
        ("://",),
        groups=(1,),
        check=_check_url_password,
        prefer="re",
    ),
)


class SecretScanner:
    """Scans strings for credentials; `scan` returns merged, non-overlapping findings sorted by start.

    `kinds` limits the scan to some of `SECRET_KINDS`. `extra_patterns` maps a new kind to a regex; the
    finding is its group named `secret` if it has one, else the whole match. Extra patterns run on re2
    when it is the engine and accepts them (linear time), else on stdlib `re` (lookarounds allowed).
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
            for rule in _RULES
            if rule.kind in wanted
        ]
        literals = sorted({re.escape(literal) for rule, _ in self._rules for literal in rule.literals})
        self._literals = re.compile("|".join(literals) or "(?!)")
        self._keywords = sorted({keyword for rule, _ in self._rules for keyword in rule.keywords})
        self._triggers, self._needs = _trigger_set([rule for rule, _ in self._rules])
        # The rules each answer of the trigger set selects, worked out once per distinct answer (a set of
        # a dozen entries gives few distinct answers, and most texts give one of a handful).
        self._rules_for_answer: dict[frozenset[int], list[tuple[_Rule, CompiledPattern]]] = {}
        extra_engine = resolve_engine(engine)
        self._extras = [_compile_extra(kind, source, extra_engine) for kind, source in (extra_patterns or {}).items()]

    def scan(self, text: str) -> list[Finding]:
        """Return the credentials found in `text`."""
        if not self._extras and len(text) < _SHORTEST:
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
        return merge_spans(found, _RANK)

    def _triggered_rules(self, scan: ScanText) -> list[tuple[_Rule, CompiledPattern]]:
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


def _trigger_set(rules: Sequence[_Rule]) -> tuple[Any, list[frozenset[int]]]:
    """An RE2 set with one entry per distinct literal or keyword alternation, and per rule the entries
    it needs; (None, ...) without google-re2."""
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
    return compile_set(list(entries)), needs


def _compile_extra(kind: str, source: str, engine: Engine) -> tuple[str, Any, int]:
    try:
        compiled = compile_user_pattern(source, engine)
    except ValueError as error:
        raise ValueError(f"extra secret pattern {kind!r} does not compile: {error}") from None
    return kind, compiled, compiled.groupindex.get("secret", 0)
