"""The credential rules `SecretScanner` runs: each kind's engine-neutral regex (see `_engine`) and the
Python check for what regexes cannot say cheaply (boundaries, JWT headers, entropy), plus the AWS
documentation keys the checks skip on purpose (`example_keys`).

Rule shapes follow detect-secrets' and gitleaks' published patterns, tightened to exact lengths, with
`github_pat_` added.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from ._engine import Engine
from ._entropy import has_entropy_at_least, is_placeholder, is_random_value
from .findings import ends_escape

__all__ = ["RANK", "RULES", "SECRET_KINDS", "SHORTEST", "Rule", "example_keys"]

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
SHORTEST = 10
# Ties between same-length findings go to the specific kind, not the generic one.
RANK = {"generic_secret": 1}

Check = Callable[[str, int, int], "tuple[int, int] | None"]


@dataclass(frozen=True, slots=True)
class Rule:
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
    """A check that rejects spans glued to `chars` on either side (what a lookaround would do); a char
    before the span that ends an escape (`%3D`, `\\n`) glues nothing."""
    fence = frozenset(chars)

    def check(text: str, start: int, end: int) -> tuple[int, int] | None:
        if (start and text[start - 1] in fence and not ends_escape(text, start)) or (
            end < len(text) and text[end] in fence
        ):
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


#: AWS's documented example keys, which the checks skip: access keys ending in EXAMPLE, secret keys in EXAMPLEKEY.
_EXAMPLE_KEY = re.compile(r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{9}EXAMPLE|[A-Za-z0-9+/]{30}EXAMPLEKEY")


def example_keys(text: str) -> list[tuple[int, int]]:
    """The spans of AWS documentation keys in `text` (`AKIAIOSFODNN7EXAMPLE`): skipped by the rules, and
    worth telling a user who tries one why nothing was found."""
    if "EXAMPLE" not in text:
        return []
    return [m.span() for m in _EXAMPLE_KEY.finditer(text) if _fence_alnum(text, m.start(), m.end()) is not None]


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

RULES: tuple[Rule, ...] = (
    Rule(
        "aws_access_key",
        r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}",
        ("A3T", "AKIA", "ASIA", "ABIA", "ACCA"),
        check=_check_aws_access_key,
        prefer="re",
    ),
    Rule(
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
    Rule(
        "github_token",
        r"gh[pousr]_[A-Za-z0-9]{36}",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        check=_fenced(_ALNUM + "_"),
        prefer="re",
    ),
    Rule(
        "github_fine_grained_token",
        r"github_pat_[A-Za-z0-9_]{82}",
        ("github_pat_",),
        check=_fenced(_ALNUM + "_"),
        prefer="re",
    ),
    Rule("stripe_key", r"[rs]k_live_[A-Za-z0-9]{24,247}", ("k_live_",), check=_fenced(_ALNUM + "_")),
    Rule(
        "slack_token",
        r"xox[abposr]-(?:[0-9]{1,20}-){1,4}[A-Za-z0-9]{8,64}",
        ("xox",),
        check=_fenced(_ALNUM + "-"),
        prefer="re",
    ),
    Rule(
        "slack_webhook",
        r"https:(?:\\?/){2}hooks\.slack\.com\\?/(?:services|workflows|triggers)\\?/(?:[A-Za-z0-9_+-]|\\?/){20,}",
        ("hooks.slack.com",),
        prefer="re",
    ),
    Rule("google_api_key", r"AIza[A-Za-z0-9_-]{35}", ("AIza",), check=_fenced(_ALNUM + "_-"), prefer="re"),
    Rule(
        "private_key",
        r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----",
        ("PRIVATE KEY",),
        check=_check_private_key,
        prefer="re",
    ),
    Rule(
        "jwt",
        r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*",
        ("eyJ",),
        check=_check_jwt,
        re_fence=r"(?<![A-Za-z0-9_-])",
    ),
    Rule(
        "generic_secret",
        _GENERIC_NAMES + _ASSIGN + _VALUE,
        (),
        ("passw", "passphrase", "secret", "token", "key", "credential"),
        groups=(1, 2, 3),
        check=_check_generic,
    ),
    Rule(
        "generic_secret",
        r"(?i:bearer)[ \t]+([A-Za-z0-9._~+/-]{16,512}=*)",
        (),
        ("bearer",),
        groups=(1,),
        check=_check_generic,
    ),
    Rule(
        "generic_secret",
        r"://[^/\s:@\"']{0,64}:([^/\s:@\"']{1,128})@",
        ("://",),
        groups=(1,),
        check=_check_url_password,
        prefer="re",
    ),
)
