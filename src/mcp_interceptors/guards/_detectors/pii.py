"""Finds personal data in a string: emails, phone numbers, payment cards, IBANs, US SSNs, IP addresses.

Regexes (see `_engine`) only propose candidates; each is then validated the way its format is defined:
Luhn and issuer prefixes for cards, mod-97 for IBANs, SSA exclusions for SSNs, `ipaddress` for IPs and
`phonenumbers` for phones. Version strings such as `v1.2.3.4`, `version 1.2.3.4` or `==1.2.3.4` are not
IPs; any other valid dotted quad is reported, since text alone cannot tell `1.2.3.4` apart from an address.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Sequence
from functools import cache, partial
from itertools import accumulate
from typing import Any, Literal

from ._checksums import IBAN_LENGTHS, is_card_number, is_iban, is_us_ssn
from ._engine import CompiledPattern, ScanText, compile_prefilter, compile_set, engine_for, re2, resolve_engine
from ._phone import CONTEXT_SEARCH, FORMATTED_PATTERN, PhoneJudge
from .findings import Finding, ends_escape, inside_any, merge_spans

__all__ = ["DEFAULT_PHONE_REGIONS", "PII_KINDS", "PiiScanner"]

PII_KINDS: tuple[str, ...] = ("email", "phone", "credit_card", "iban", "us_ssn", "ip_address")
DEFAULT_PHONE_REGIONS: tuple[str, ...] = ("US", "GB", "DE", "FR")
# No kind matches fewer characters than this ("a@b.io").
_SHORTEST = 6
#: Decimal digits of other scripts (fullwidth, Arabic-Indic, Devanagari...), which a reader and a
#: model take for digits: folded one character for one to ASCII before matching, so spans stay valid.
_OTHER_DIGITS = re.compile(r"[^\D0-9]")
# On the UTF-8 bytes the scan has anyway, RE2's DFA looks for one 4x faster than `re` on the str.
_OTHER_DIGITS_UTF8 = CompiledPattern(r"[^\P{Nd}0-9]", "re2") if re2 is not None else None


def _has_other_digits(scan: ScanText) -> bool:
    if _OTHER_DIGITS_UTF8 is not None:
        return _OTHER_DIGITS_UTF8.occurs_in(scan)
    return _OTHER_DIGITS.search(scan.text) is not None


@cache
def _digit_fold() -> dict[int, str]:
    """The translation table, built on first need (it takes ~50 ms to find every decimal digit)."""
    return {code: str(int(chr(code))) for code in range(0x80, 0x110000) if chr(code).isdecimal()}


# Same-length ties: checksummed kinds beat IPs, which beat the most heuristic kind, phone.
_RANK = {"ip_address": 1, "phone": 2}

Check = Callable[[str, int, int], "tuple[int, int] | None"]
# (index in the set, kind, pattern, groups, check, char needed, digits needed)
_PlanEntry = tuple[int, str, CompiledPattern, tuple[int, ...], Check, str, int]

_EMAIL_DOMAIN = r"@[A-Za-z0-9][A-Za-z0-9-]*(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,24}"
# `icon@2x.png` is an asset name, not an address.
_FILE_SUFFIXES = frozenset({"png", "jpg", "jpeg", "gif", "svg", "webp", "ico", "bmp", "tiff"})

_CARD = r"[0-9](?:[ .-]?[0-9]){12,18}"
_CARD_RUN = re.compile(r"[0-9]+(?:[ -][0-9]+)*")
# A card printed with dots (`4111.1111.1111.1111`): dots only, in a printed layout, the run taken whole
# (a dotted run is otherwise a decimal, a version or an address).
_DOTTED_CARD_RUN = re.compile(r"[0-9]+(?:\.[0-9]+)+")
_DIGIT_GROUP = re.compile(r"[0-9]+")
_CARD_RUN_CAP = 48
# Printed card layouts: groups of four (the last may be shorter), or Amex/Diners 4-6-5 and 4-6-4.
_CARD_LAYOUTS = ((4, 6, 5), (4, 6, 4))
_IBAN = r"[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30}"
_SSN = r"[0-9]{3}[- ][0-9]{2}[- ][0-9]{4}"
_SSN_CONTEXT = r"(?i:ssn|social security(?: number)?|ss#)[^0-9\r\n]{0,20}([0-9]{9})"
_IPV4 = r"[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}"
_H16 = r"[0-9A-Fa-f]{1,4}"
_V4 = r"[0-9]{1,3}(?:\.[0-9]{1,3}){3}"
# Every part bounded (an address is at most 45 chars): an unbounded run would make re2 look ahead to the
# end of a long hex/colon run for every candidate, which is quadratic on hostile input.
_IPV6 = (
    rf"(?:{_H16}:){{7}}{_H16}"
    rf"|(?:{_H16}:){{6}}{_V4}"
    rf"|(?:{_H16}(?::{_H16}){{0,6}})?::(?:(?:{_H16}:){{0,5}}{_V4}|{_H16}(?::{_H16}){{0,6}})?"
)
_VERSION_BEFORE = re.compile(r"(?:version|ver\.?|release|build|[Vv]|[=<>~!]=)[ :=]*$", re.IGNORECASE)
_V6_GROUP_SPLIT = re.compile(r"[:.]")
# ~1,900 RE2 instructions make a DFA state of at most ~8 KB; 32 MB holds ~3,800 of them.
_SET_FINAL_BYTES = 1024
_NOT_DIGITS = bytes(b for b in range(256) if not 0x30 <= b <= 0x39)
_WORD = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
# What may not touch a candidate, per kind (built once: the checks run once per candidate).
_WORD_DOT_DASH = _WORD | {".", "-"}
_WORD_DASH = _WORD | {"-"}
_WORD_DOT = _WORD | {"."}
_WORD_DOT_COLON = _WORD | {".", ":"}
_WORD_COLON = _WORD | {":"}
# What an email's local part (before the "@") is made of.
_EMAIL_LOCAL_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._%+-"
# A valid dotted quad: no octet above 255 or with a leading zero (what `ipaddress` accepts of _IPV4's shape).
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_QUAD = rf"{_OCTET}(?:\.{_OCTET}){{3}}"
_VALID_IPV4 = re.compile(_QUAD)


def _valid_ipv6_pattern() -> str:
    """What `ipaddress.IPv6Address` accepts, as one pattern: eight groups, or six and a dotted quad; or a
    "::" standing for at least one group, with the groups (a dotted quad counting two) on either side."""
    group, quad = "[0-9A-Fa-f]{1,4}", _QUAD
    forms = [rf"(?:{group}:){{7}}{group}", rf"(?:{group}:){{6}}{quad}"]
    for before in range(8):
        left = rf"(?:{group}:){{{before - 1}}}{group}" if before else ""
        room = 7 - before  # groups after the "::"
        rights = [rf"(?:{group}:){{0,{room - 1}}}{group}"] if room >= 1 else []
        rights += [rf"(?:{group}:){{0,{room - 2}}}{quad}"] if room >= 2 else []
        forms.append(left + "::" + (f"(?:{'|'.join(rights)})?" if rights else ""))
    return "|".join(f"(?:{form})" for form in forms)


# Checked with fullmatch instead of building an `IPv6Address` (5x slower) when only validity matters.
_VALID_IPV6 = re.compile(_valid_ipv6_pattern())


def _is_glued(text: str, start: int, end: int, before: frozenset[str], after: frozenset[str]) -> bool:
    """True when the span touches `before` chars on its left (but for the end of an escape such as `%3D`
    or `\\t`) or `after` chars on its right."""
    if start and text[start - 1] in before and not ends_escape(text, start):
        return True
    return end < len(text) and text[end] in after


def _digit_follows(text: str, end: int, joiners: str) -> bool:
    """True when the span is followed by a joiner and a digit, i.e. it is the head of a longer token."""
    return end + 1 < len(text) and text[end] in joiners and text[end + 1].isdigit()


def _check_email(text: str, start: int, end: int) -> tuple[int, int] | None:
    # The run of local-part chars just before the "@", up to 65 of them.
    window = text[max(0, start - 65) : start]
    local = window[len(window.rstrip(_EMAIL_LOCAL_CHARS)) :].lstrip(".")
    if local[:1] in "nrt" and len(window) > len(local) and window[-len(local) - 1] == "\\":
        local = local[1:]  # after an escaped newline or tab (`line1\\njane@...`): the escape is not the address
    if not local or len(local) > 64 or local.endswith(".") or ".." in local:
        return None
    local_start = start - len(local)
    domain = text[start + 1 : end]
    # Some label is empty or starts or ends with "-".
    if ".." in domain or domain[:1] in ("", ".", "-") or domain[-1] in ".-" or "-." in domain or ".-" in domain:
        return None
    if domain[domain.rfind(".") + 1 :].lower() in _FILE_SUFFIXES:
        return None
    # `git@github.com:org/repo.git` is an SSH remote.
    if end + 1 < len(text) and text[end] == ":" and text[end + 1] not in " \t\r\n":
        return None
    return local_start, end


def _check_card(text: str, start: int, end: int) -> tuple[int, int] | None:
    # The run of digit groups from here, capped: a card prints in at most 23 chars, and a longer run
    # (a table of numbers) must not cost more than a constant per candidate.
    if start and text[start - 1] in _WORD_DOT_DASH and not ends_escape(text, start):
        return None  # glued on the left (a slack token's digits, an id): decided before reading the run
    if "." in text[start:end]:
        return _check_dotted_card(text, start)
    run = _CARD_RUN.match(text, start, start + _CARD_RUN_CAP)
    run_end = run.end() if run else end
    if (run_end < len(text) and text[run_end] in _WORD) or _digit_follows(text, run_end, ". -"):
        return None
    run_text = text[start:run_end]
    if run_text.isdigit():  # one group (the run holds ASCII digits, spaces and dashes): the loop's only window
        return (start, run_end) if 14 <= len(run_text) <= 16 and is_card_number(run_text) else None
    groups = [m.span() for m in _DIGIT_GROUP.finditer(text, start, run_end)]
    sizes = [end - start for start, end in groups]
    # Digits before each group, so a window's digit count is known before its layout is looked at.
    before = [0, *accumulate(sizes)]
    # Longest window of whole groups first: the full run, then runs that drop leading/trailing groups.
    for size in range(min(len(groups), 5), 0, -1):
        # Ungrouped, only the common 14-16-digit lengths: other long integers (seeds, ids) pass Luhn
        # and an issuer prefix by chance about once in thirty.
        lengths = range(14, 17) if size == 1 else range(13, 20)
        for i in range(len(groups) - size + 1):
            if before[i + size] - before[i] not in lengths or not _is_card_layout(sizes[i : i + size]):
                continue
            digits = "".join(text[s:e] for s, e in groups[i : i + size])
            if is_card_number(digits):
                return groups[i][0], groups[i + size - 1][1]
    return None


def _check_dotted_card(text: str, start: int) -> tuple[int, int] | None:
    run = _DOTTED_CARD_RUN.match(text, start, start + _CARD_RUN_CAP)
    if run is None or (run.end() < len(text) and text[run.end()] in _WORD) or _digit_follows(text, run.end(), ". -"):
        return None
    sizes = [len(group) for group in run.group().split(".")]
    if len(sizes) < 3 or not _is_card_layout(sizes):
        return None
    digits = run.group().replace(".", "")
    return (start, run.end()) if 13 <= len(digits) <= 19 and is_card_number(digits) else None


def _is_card_layout(lengths: list[int]) -> bool:
    if len(lengths) == 1:
        return True
    return tuple(lengths) in _CARD_LAYOUTS or (all(n == 4 for n in lengths[:-1]) and lengths[-1] <= 4)


def _check_iban(text: str, start: int, end: int) -> tuple[int, int] | None:
    length = IBAN_LENGTHS.get(text[start : start + 2])
    if length is None or (start and text[start - 1].isalnum() and not ends_escape(text, start)):
        return None
    span = text[start:end]
    compact = span.replace(" ", "")
    if len(compact) < length:
        return None
    stop = end
    if len(compact) > length:
        # The regex ran on into the next word ("DE89 ... 00 EUR"): cut after the length-th character.
        seen = 0
        for offset, char in enumerate(span):
            seen += char != " "
            if seen == length:
                stop = start + offset + 1
                break
        compact = compact[:length]
    if stop < len(text) and text[stop].isalnum():
        return None
    return (start, stop) if is_iban(compact) else None


def _check_ssn(text: str, start: int, end: int) -> tuple[int, int] | None:
    if _is_glued(text, start, end, _WORD_DASH, _WORD_DASH):
        return None
    span = text[start:end]
    if len(span) == 11 and span[3] != span[6]:
        return None
    return (start, end) if is_us_ssn(span.replace("-", "").replace(" ", "")) else None


def _ip_check(include_private: bool) -> tuple[Check, Check]:
    def check_v4(text: str, start: int, end: int) -> tuple[int, int] | None:
        if _is_glued(text, start, end, _WORD_DOT, _WORD) or _digit_follows(text, end, "."):
            return None
        if _VERSION_BEFORE.search(text, max(0, start - 12), start):
            return None
        candidate = text[start:end]
        if not _VALID_IPV4.fullmatch(candidate):
            return None
        return (start, end) if include_private or ipaddress.IPv4Address(candidate).is_global else None

    def check_v6(text: str, start: int, end: int) -> tuple[int, int] | None:
        while end > start and text[end - 1] in ".:" and not text[start:end].endswith("::"):
            end -= 1  # a sentence-ending "." or a "key:" after the address
        candidate = text[start:end]
        groups = [g for g in _V6_GROUP_SPLIT.split(candidate) if g]
        # Two short groups are a slice or a scope (`a[1::2]`, `"a::bc"`), not an address; `fe80::1` passes.
        if len(groups) < 2 or (len(groups) == 2 and max(map(len, groups)) < 3):
            return None
        if _is_glued(text, start, end, _WORD_DOT_COLON, _WORD_COLON) or not _VALID_IPV6.fullmatch(candidate):
            return None
        return (start, end) if include_private or ipaddress.IPv6Address(candidate).is_global else None

    return check_v4, check_v6


class PiiScanner:
    """Scans strings for personal data; `scan` returns merged, non-overlapping findings sorted by start.

    `kinds` limits the scan to some of `PII_KINDS`. `phone_regions` are the regions whose national
    formats are accepted (numbers written with `+` or `00` are accepted from any country).
    `include_private_ips=False` skips addresses that are not globally routable (private, loopback,
    link-local, documentation ranges).
    """

    def __init__(
        self,
        kinds: Iterable[str] | None = None,
        phone_regions: Sequence[str] = DEFAULT_PHONE_REGIONS,
        include_private_ips: bool = True,
        *,
        engine: Literal["auto", "re2", "re"] = "auto",
    ) -> None:
        wanted = set(PII_KINDS if kinds is None else kinds)
        unknown = wanted - set(PII_KINDS)
        if unknown:
            raise ValueError(f"unknown PII kinds {sorted(unknown)}; choose from {list(PII_KINDS)}")
        resolve_engine(engine)  # fail early on engine="re2" without google-re2
        judge = self._phone_judge = PhoneJudge(tuple(phone_regions))
        check_v4, check_v6 = _ip_check(include_private_ips)
        # Each rule with what a match needs in the text (a character, a number of digits): checking that
        # first skips most rules for most strings, which matters for the many short ones in a payload.
        rules: list[tuple[str, str, tuple[int, ...], Check, str, int]] = [
            ("email", _EMAIL_DOMAIN, (0,), _check_email, "@", 0),
            ("credit_card", _CARD, (0,), _check_card, "", 13),
            ("iban", _IBAN, (0,), _check_iban, "", 4),
            ("us_ssn", _SSN, (0,), _check_ssn, "", 9),
            ("us_ssn", _SSN_CONTEXT, (1,), _check_ssn, "", 9),
            ("ip_address", _IPV4, (0,), check_v4, ".", 4),
            ("ip_address", _IPV6, (0,), check_v6, ":", 0),
            ("phone", FORMATTED_PATTERN, (0,), partial(judge.judge, in_context=False), "", 7),
            ("phone", CONTEXT_SEARCH, (0,), judge.judge_after_keyword, "", 7),
        ]
        # Email's literal "@" is found fastest by stdlib `re`; the digit-led rest runs faster on re2.
        self._rules = [
            (
                kind,
                CompiledPattern(
                    pattern,
                    engine_for("re" if kind == "email" else "re2", engine),
                    re_fence=r"(?<![0-9A-Fa-f:.])" if pattern is _IPV6 else "",
                ),
                groups,
                check,
            )
            for kind, pattern, groups, check, _, _ in rules
            if kind in wanted
        ]
        needs = [(char, digits) for kind, _, _, _, char, digits in rules if kind in wanted]
        # What `scan` loops over for every text: each rule with its index in the set and its needs.
        self._plan: list[_PlanEntry] = [
            (index, kind, pattern, groups, check, char, min_digits)
            for index, ((kind, pattern, groups, check), (char, min_digits)) in enumerate(
                zip(self._rules, needs, strict=True)
            )
        ]
        self._plan_for_answer: dict[frozenset[int], list[_PlanEntry]] = {}
        patterns = [pattern for kind, pattern, *_ in rules if kind in wanted]
        self._patterns = patterns
        self._any = compile_prefilter(patterns)
        self._which = compile_set(patterns)
        self._clean_filters: dict[tuple[str, ...], Any] = {}
        # The set runs RE2 on the text's UTF-8 bytes, as the re2 rules do. A rule on stdlib `re` agrees
        # with it on any text only if it is made of ASCII literals and classes (email's); case folding
        # and negated classes treat non-ASCII chars (and lone surrogates) differently in the two.
        self._set_fits_any_text = all(
            pattern.engine == "re2" or pattern.source is _EMAIL_DOMAIN for _, pattern, _, _ in self._rules
        )

    def _active_plan(self, scan: ScanText) -> list[_PlanEntry] | None:
        """The plan entries of the rules whose pattern matches somewhere in the text, or None for "unknown".

        Only where every rule's engine agrees with RE2 on where a pattern can match: on ASCII text, and on
        any text when the rules run on re2 (see `_set_fits_any_text`). The RE2 set answers in one DFA
        pass; its answer is final when it names rules, or when the text is short (each byte adds at most
        one DFA state, and _SET_FINAL_BYTES states fit its memory several times over). On a longer text
        an empty answer could mean the DFA ran out of memory, so a regex pass (which falls back to the
        NFA) goes first there: most long texts hold nothing, and it says so in one pass; when it finds
        something, the set names the rules, and an empty answer from it means "unknown".
        """
        if self._which is None or self._any is None or not (scan.is_ascii or self._set_fits_any_text):
            return None
        data = scan.data
        long = len(data) > _SET_FINAL_BYTES
        if long and self._any.search(data) is None:
            return []
        matched = self._which.Match(data)
        if matched:
            answer = frozenset(matched)
            plan = self._plan_for_answer.get(answer)
            if plan is None:  # at most one entry per subset of the rules
                plan = self._plan_for_answer[answer] = [entry for entry in self._plan if entry[0] in answer]
            return plan
        return None if long else []

    def may_find(self, scan: ScanText) -> bool:
        """False only when RE2 says no rule's pattern matches anywhere in the text (see
        `_active_plan`; "unknown" counts as a maybe). Any part of the text then scans clean."""
        plan = self._active_plan(scan)
        return plan is None or bool(plan)

    def clean_text_filter(self, more: tuple[str, ...]) -> Any:
        """One RE2 regex over an ASCII text's bytes matching wherever any rule's pattern or any of the `more`
        patterns does, or None without google-re2. Its "no match" means `may_find` is False and no `more`
        pattern matches: one pass for what the rules' pass and `more`'s own passes would say."""
        if self._which is None or self._any is None:
            return None
        compiled = self._clean_filters.get(more)
        if compiled is None:
            compiled = self._clean_filters[more] = compile_prefilter([*self._patterns, *more])
        return compiled

    def forget_verdicts(self) -> None:
        """Drop the remembered phone verdicts, so the next scans judge every number as seen for the first
        time (what a benchmark of new traffic wants; the memory is bounded either way)."""
        self._phone_judge.forget()

    def scan(self, text: str) -> list[Finding]:
        """Return the personal data found in `text`."""
        if len(text) < _SHORTEST:
            return []
        scan = ScanText.of(text)
        if not scan.is_ascii and _has_other_digits(scan):
            text = text.translate(_digit_fold())  # same length: the findings' spans are the original's
            scan = ScanText(text)
        plan = self._active_plan(scan)
        if plan is None:
            # Without the set's answer, the char and digits a rule needs are the cheap test. UTF-8 bytes
            # hold ASCII digits only as themselves; past 64 KB nearly every text has enough.
            digits = len(scan.data.translate(None, _NOT_DIGITS)) if len(text) <= 65536 else len(text)
            plan = [entry for entry in self._plan if digits >= entry[6] and (not entry[5] or entry[5] in text)]
        found: list[tuple[int, int, str]] = []
        for _, kind, pattern, groups, check, _, _ in plan:
            # Phones rank last and their judge answers the candidate or part of it: one inside a finding
            # already made (an IBAN's or a card's digit groups, a number both phone patterns find) is not
            # worth judging.
            inside = inside_any(found) if kind == "phone" and found else None
            for start, end in pattern.spans(scan, groups):
                if inside is not None and inside(start, end):
                    continue
                span = check(text, start, end)
                if span is not None:
                    found.append((*span, kind))
        return merge_spans(found, _RANK)
