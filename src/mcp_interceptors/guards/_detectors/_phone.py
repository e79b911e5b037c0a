"""Decides whether a digit run found by the PII regexes is a phone number, validating with `phonenumbers`.

`PhoneNumberMatcher` walks every character and gets slow on big text, so the scanner finds candidates with
a regex and this module rejects cheap shapes (dates, decimals, dotted quads, glued ids, odd groupings),
then checks each configured region's numbering plan and validates as `phonenumbers.is_valid_number` does,
from its metadata compiled once per country code; a trunk "0" after the country code ("+44 (0) 20 ...") is
stripped as `parse` strips it (`parse` itself only for leading-zero plans and rewriting rules). `+`/`00`
numbers are international.
"""

from __future__ import annotations

import re

import phonenumbers

__all__ = ["CONTEXT_PATTERN", "CONTEXT_SEARCH", "FORMATTED_PATTERN", "PhoneJudge"]

# A formatted candidate: international (+... or 00...); national groups joined by separators with at least
# 7 digits in a phone-like layout (US 3-3-4, UK 3-4-4 and 5-6, DE 3-7), optionally after a NANP "1-"; or
# the French 0X XX XX XX XX. Word boundaries keep ids and units out ("578ms", "v1-2-3"). Dates (4-2-2),
# SSNs (3-2-4) and bare digit runs never become candidates; bare runs are only considered after a
# phone keyword (CONTEXT_PATTERN).
FORMATTED_PATTERN = (
    r"(?:\+|\b00)[0-9]{1,3}(?:[ .-]?\(?[0-9]{1,10}\)?){1,6}"
    r"|(?:\b1[ .-])?(?:\([0-9]{2,5}\)[ .-]?|\b[0-9]{2,5}[ ./-])"
    r"(?:[0-9]{3,4}[ ./-][0-9]{2,10}|[0-9]{5,10})(?:[ ./-][0-9]{2,10}){0,3}\b"
    r"|\b0[1-9](?:[ .-][0-9]{2}){4}\b"
)
CONTEXT_PATTERN = (
    r"(?i:phone|tel|mobile|cell|fax|whatsapp|sms|call)[^0-9+(\r\n]{0,20}"
    r"(\+?\(?[0-9]{1,10}\)?(?:[ ./-]?\(?[0-9]{1,10}\)?){0,6})"
)
#: CONTEXT_PATTERN without its group, whose span costs RE2 a second, slower pass over every match: the group
#: is where the match's first "+", "(" or digit is (neither a keyword nor the gap after it holds one, and the
#: number starts with one), to the match's end (`PhoneJudge.judge_after_keyword`).
CONTEXT_SEARCH = CONTEXT_PATTERN.replace("(\\+?", "(?:\\+?", 1)
_NUMBER_START = re.compile(r"[0-9+(]")

_GLUED_BEFORE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-/+@$%&")
_GLUED_AFTER = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_%")
# Dates, dotted quads and SSN-shaped runs, which the candidate patterns admit: one match for the three.
_NOT_PHONE_SHAPE = re.compile(
    r"(?:[0-9]{4}[-/.][0-9]{1,2}[-/.][0-9]{1,2}|[0-9]{1,2}[-/.][0-9]{1,2}[-/.][0-9]{2,4})(?:$|[ T])"
    r"|[0-9]{1,3}(?:\.[0-9]{1,3}){3}"
    r"|[0-9]{3}-[0-9]{2}-[0-9]{4}$"
)
# An ASCII candidate's digits and its other chars, each by one `str.translate`. The tables map every ASCII
# char (to itself or to nothing): a char missing from a table costs the lookup a raised KeyError.
_ASCII_DIGITS_ONLY = {code: chr(code) if chr(code) in "0123456789" else None for code in range(128)}
_ASCII_NON_DIGITS_ONLY = {code: None if chr(code) in "0123456789" else chr(code) for code in range(128)}
# What the candidate patterns put between digits.
_PUNCTUATION = " ./()-"
_NON_SPACE = re.compile(r"\S+")
_DIGIT_GROUPS = re.compile(r"[0-9]+")
_MAX_CACHE = 65536
_MAX_PARSES = 6


class PhoneJudge:
    """Validates phone candidates for a set of default regions; remembers recent verdicts."""

    def __init__(self, regions: tuple[str, ...]) -> None:
        unknown = [r for r in regions if r not in phonenumbers.SUPPORTED_REGIONS]
        if unknown:
            raise ValueError(f"unknown phone regions {unknown}; use ISO 3166 alpha-2 codes such as 'US'")
        self.regions = regions
        self._shapes = [_NationalShape(region) for region in regions]
        self._cache: dict[str, bool] = {}

    def judge(self, text: str, start: int, end: int, *, in_context: bool) -> tuple[int, int] | None:
        """Return the span of the phone number in `text[start:end]`, or None if it is not one."""
        if (start and text[start - 1] in _GLUED_BEFORE) or _is_glued_after(text, end):
            return None
        candidate = text[start:end]
        if self._is_phone(candidate, in_context):
            return start, end
        if " " not in candidate or candidate.replace(" ", "").isdigit():
            return None  # one group, or groups of digits only: `_group_windows` offers nothing to try
        # A number next to another digit group ("415-555-2671 2 items"): try narrower runs of groups.
        for left, right in _group_windows(candidate)[:_MAX_PARSES]:
            if self._is_phone(candidate[left:right], in_context):
                return start + left, start + right
        return None

    def judge_after_keyword(self, text: str, start: int, end: int) -> tuple[int, int] | None:
        """`judge` of the number in a `CONTEXT_SEARCH` match `text[start:end]` (CONTEXT_PATTERN's group)."""
        number = _NUMBER_START.search(text, start, end)
        if number is None:  # never, in a match of the pattern
            return None
        return self.judge(text, number.start(), end, in_context=True)

    def forget(self) -> None:
        """Drop the remembered verdicts."""
        self._cache.clear()

    def _is_phone(self, candidate: str, in_context: bool) -> bool:
        # A keyword before it only changes the verdict on a bare digit run (see `_decide`): other candidates
        # share one verdict, which the two patterns, both finding a number after "phone:", ask for in turn.
        key = ("\0" + candidate) if in_context and candidate.isdigit() else candidate
        verdict = self._cache.get(key)
        if verdict is None:
            if len(self._cache) >= _MAX_CACHE:
                self._cache.clear()
            verdict = self._cache[key] = self._decide(candidate, in_context)
        return verdict

    def _decide(self, candidate: str, in_context: bool) -> bool:
        if candidate.isascii():  # always, from the candidate patterns
            digits = candidate.translate(_ASCII_DIGITS_ONLY)
        else:
            digits = "".join(_DIGIT_GROUPS.findall(candidate))
        if not 7 <= len(digits) <= 15:
            return False
        separators = _separators(candidate)
        if candidate[0] == "+" or candidate.startswith("00"):
            if separators == ("+." if candidate[0] == "+" else "."):
                return False  # a signed decimal: +35236450.6
            if candidate[0] == "+":
                return _is_valid_international(digits, "+" + digits if _is_plain(separators[1:]) else candidate)
            return _is_valid_international(digits[2:], "+" + (digits[2:] if _is_plain(separators) else candidate[2:]))
        formatted = len(digits) != len(candidate)
        if not (formatted or in_context) or not _has_phone_shape(candidate, separators):
            return False
        for shape in self._shapes:  # noqa: SIM110 - any() over a generator costs ~0.5 % of a first-sight scan
            if shape.is_valid(digits, candidate):
                return True
        return False


class _NationalShape:
    """A region's numbering plan from phonenumbers' metadata: national lengths and pattern as a cheap
    pre-check, then validation of the national number without `parse` (3x faster)."""

    def __init__(self, region: str) -> None:
        metadata = phonenumbers.PhoneMetadata.metadata_for_region(region)
        general = metadata.general_desc if metadata else None
        if metadata is None or general is None or not general.national_number_pattern or not metadata.country_code:
            raise ValueError(f"phonenumbers has no numbering plan for region {region!r}")
        self.region = region
        self._country_code = metadata.country_code
        self._trunk = metadata.national_prefix or ""
        # Where the trunk prefix is "0" (GB, DE, FR, ...), national formats always write it, which
        # rules out ids, decimals and dates that do not start with 0.
        self._trunk_required = self._trunk == "0"
        self._lengths = frozenset(general.possible_length or ())
        self._pattern = re.compile(general.national_number_pattern)

    def is_valid(self, digits: str, candidate: str) -> bool:
        if self._trunk and digits.startswith(self._trunk):
            digits = digits[len(self._trunk) :]
        elif self._trunk_required:
            return False
        if len(digits) not in self._lengths or self._pattern.fullmatch(digits) is None:
            return False
        if digits[0] == "0":  # a significant leading zero (Italy and others): let parse() handle it
            return _is_valid(candidate, self.region)
        if self._country_code == 1 and not _is_nanp_grouping(candidate):
            return False
        return _is_valid_number(self._country_code, digits)


def _is_valid_international(digits: str, candidate: str) -> bool:
    """Validate +CC... digits; country codes are prefix-free, so at most one split is a known code."""
    for size in (1, 2, 3):
        code = int(digits[:size])
        if code in phonenumbers.COUNTRY_CODE_TO_REGION_CODE:
            national = digits[size:]
            if national[:1] in ("0", ""):  # "+49 (0)30 ..." or a leading-zero plan
                trunk = _TRUNK.get(code)
                if trunk is None:
                    trunk = _TRUNK[code] = _TrunkPrefix(code)
                verdict = trunk.verdict(national)
                return _is_valid(candidate, None) if verdict is None else verdict
            if code == 1 and not _is_nanp_grouping(candidate):
                return False
            return _is_valid_number(code, national)
    return False


class _TrunkPrefix:
    """What `parse` does with "+CC 0...": strip the country's national (trunk) prefix from the national
    digits, as its `_maybe_strip_national_prefix_carrier_code` and `_test_number_length` do, from the main
    region's metadata compiled once. `parse` costs ~25 µs a number; "+44 (0) 20 ..." is a common way to
    write one."""

    def __init__(self, country_code: int) -> None:
        region = phonenumbers.region_code_for_country_code(country_code)
        metadata = phonenumbers.PhoneMetadata.metadata_for_region(region, None)
        general = metadata.general_desc if metadata is not None else None
        pattern = general.national_number_pattern if general is not None else None
        # Non-geographic codes, and plans without a general pattern and lengths: `parse` decides.
        self._usable = False
        if region == phonenumbers.REGION_CODE_FOR_NON_GEO_ENTITY or metadata is None or general is None:
            return
        if not pattern or not general.possible_length:
            return
        self._usable = True
        self._country_code = country_code
        prefix = metadata.national_prefix_for_parsing
        self._prefix = re.compile(prefix) if prefix else None
        self._transform = metadata.national_prefix_transform_rule
        self._general = re.compile(pattern)
        self._lengths = tuple(general.possible_length)
        self._local_lengths = tuple(general.possible_length_local_only or ())

    def verdict(self, national: str) -> bool | None:
        """Whether "+CC" and these national digits are a valid number, or None where `parse` must decide."""
        if not self._usable:
            return None
        prefix = self._prefix.match(national) if self._prefix is not None else None
        if prefix is not None:
            if self._transform and prefix.groups() and prefix.groups()[-1] is not None:
                return None  # a transform rule rewrites the number
            stripped = national[prefix.end() :]
            keep = self._general.fullmatch(national) and not self._general.fullmatch(stripped)
            if not keep and self._length_allows(stripped):
                national = stripped
        if not 2 <= len(national) <= 17:
            return False  # parse() raises: too short or too long
        if len(national) > 1 and national[0] == "0":
            return None  # an Italian-style leading zero
        return _is_valid_number(self._country_code, national)

    def _length_allows(self, national: str) -> bool:
        """`_test_number_length` answers neither too short, nor possible only locally, nor an invalid length."""
        size, lengths = len(national), self._lengths
        if size in self._local_lengths or size < lengths[0]:
            return False
        return size == lengths[0] or size > lengths[-1] or size in lengths[1:]


_TRUNK: dict[int, _TrunkPrefix] = {}


def _is_nanp_grouping(candidate: str) -> bool:
    """North American numbers are written 3-3-4 or ungrouped (after an optional 1), never 5-5 or 3-7:
    page ranges ("26966-26979") and protocol lines ("223 3000234") are valid numbers otherwise."""
    groups = [len(g) for g in _DIGIT_GROUPS.findall(candidate)]
    if groups[:1] == [1]:
        groups = groups[1:]
    return groups in ([3, 3, 4], [10], [11], [])


def _is_valid_number(country_code: int, national: str) -> bool:
    """`phonenumbers.is_valid_number` for `+country_code national`, from its metadata compiled once per
    country code (a few regex calls instead of ~40 Python calls: 1-3 µs instead of 11-19)."""
    rules = _VALIDITY.get(country_code)
    if rules is None:
        rules = _VALIDITY[country_code] = _validity_rules(country_code)
    if not rules:  # no plan of our own (non-geographic codes): ask phonenumbers
        number = phonenumbers.PhoneNumber(country_code=country_code, national_number=int(national))
        return bool(phonenumbers.is_valid_number(number))
    significant = str(int(national))
    if len(rules) == 1:
        return rules[0].knows(significant)
    # As `region_code_for_number`: the first region whose leading digits match, or (without leading digits)
    # that knows the number; validity is then that region's verdict.
    for rule in rules:
        if rule.leading is not None:
            if rule.leading.match(significant):
                return rule.knows(significant)
        elif rule.knows(significant):
            return True
    return False


class _RegionValidity:
    """What `is_valid_number` asks of one region's metadata: the general description, then any one number
    type (premium rate ... mobile), each a possible length and a pattern matched in full."""

    def __init__(self, metadata: phonenumbers.PhoneMetadata) -> None:
        self.leading = re.compile(metadata.leading_digits) if metadata.leading_digits is not None else None
        general = metadata.general_desc
        self._general_lengths = frozenset(general.possible_length or ()) if general is not None else frozenset()
        self._general = _compiled(general)
        descs = [getattr(metadata, name) for name in _NUMBER_TYPES]
        if metadata.same_mobile_and_fixed_line_pattern:
            descs.pop()  # phonenumbers never tries `mobile` then
        # One pattern per length: the types that admit numbers of that length (or set no lengths).
        typed = [
            (frozenset(desc.possible_length or ()), desc.national_number_pattern) for desc in descs if desc is not None
        ]
        lengths = {length for allowed, source in typed if source for length in allowed}
        self._types_for_length = {
            length: _alternation([source for allowed, source in typed if source and (not allowed or length in allowed)])
            for length in lengths
        }
        self._types_any_length = _alternation([source for allowed, source in typed if source and not allowed])

    def knows(self, significant: str) -> bool:
        size = len(significant)
        if self._general is None or (self._general_lengths and size not in self._general_lengths):
            return False
        if not self._general.fullmatch(significant):
            return False
        types = self._types_for_length.get(size, self._types_any_length)
        return types is not None and types.fullmatch(significant) is not None


# The number types `phonenumbers` checks, in its order; `mobile` last (see `same_mobile_and_fixed_line_pattern`).
_NUMBER_TYPES = (
    "premium_rate",
    "toll_free",
    "shared_cost",
    "voip",
    "personal_number",
    "pager",
    "uan",
    "voicemail",
    "fixed_line",
    "mobile",
)
_VALIDITY: dict[int, list[_RegionValidity]] = {}


def _compiled(desc: phonenumbers.PhoneNumberDesc | None) -> re.Pattern[str] | None:
    return re.compile(desc.national_number_pattern) if desc and desc.national_number_pattern else None


def _alternation(sources: list[str]) -> re.Pattern[str] | None:
    return re.compile("|".join(f"(?:{source})" for source in sources)) if sources else None


def _validity_rules(country_code: int) -> list[_RegionValidity]:
    """The regions of a country code, in phonenumbers' order; empty where it has a non-geographic plan."""
    regions = phonenumbers.COUNTRY_CODE_TO_REGION_CODE.get(country_code, ())
    rules = []
    for region in regions:
        metadata = phonenumbers.PhoneMetadata.metadata_for_region(region.upper(), None)
        if region == phonenumbers.REGION_CODE_FOR_NON_GEO_ENTITY:
            return []
        if metadata is not None:
            rules.append(_RegionValidity(metadata))
    return rules


def _is_glued_after(text: str, end: int) -> bool:
    if end >= len(text):
        return False
    char = text[end]
    if char in _GLUED_AFTER:
        return True
    return char in ".-/:" and end + 1 < len(text) and text[end + 1].isdigit()


def _separators(candidate: str) -> str:
    """The candidate's chars that are not digits (`str.isdigit`), in order."""
    if candidate.isascii():
        return candidate.translate(_ASCII_NON_DIGITS_ONLY)
    return "".join(c for c in candidate if not c.isdigit())


def _is_plain(separators: str) -> bool:
    """True when a "+" number's separators after the "+" are the candidate patterns' punctuation only: `parse`
    then reads it as it reads "+" and the digits alone (nothing is an extension, a letter or a second number),
    which it parses a third faster."""
    return not separators.strip(_PUNCTUATION)


def _has_phone_shape(candidate: str, separators: str) -> bool:
    """False for dates, decimals, dotted quads and SSN-shaped runs, which the candidate regex admits."""
    if _NOT_PHONE_SHAPE.match(candidate):
        return False
    # A lone "." is a decimal; "." mixed with other separators is a table of decimals ("1.520 993 1551")
    # or a timestamp ("06.111111-0400"): dotted numbers use dots only.
    return separators != "." and not (
        "." in separators and (" " in separators or "-" in separators or "/" in separators)
    )


def _group_windows(candidate: str) -> list[tuple[int, int]]:
    """Narrower runs of space-separated groups, longest first, that carry their own punctuation.

    "12 415-555-0123" yields "415-555-0123"; runs formatted with spaces only are skipped, since any
    slice of a spaced digit table (IBAN or card groups) would otherwise pass for some region's number.
    """
    bounds = [(m.start(), m.end()) for m in _NON_SPACE.finditer(candidate)]
    count = len(bounds)
    windows = [
        (bounds[i][0], bounds[i + size - 1][1]) for size in range(count - 1, 0, -1) for i in range(count - size + 1)
    ]
    return [(left, right) for left, right in windows if not candidate[left:right].replace(" ", "").isdigit()]


def _is_valid(candidate: str, region: str | None) -> bool:
    try:
        number = phonenumbers.parse(candidate, region)
    except phonenumbers.NumberParseException:
        return False
    if number.italian_leading_zero or number.country_code is None or number.national_number is None:
        return bool(phonenumbers.is_valid_number(number))  # its leading zeros are part of what is checked
    return _is_valid_number(number.country_code, str(number.national_number))
