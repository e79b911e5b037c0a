"""Rules a payload of many strings out whole, for the scanners of `_scanning`: its `_walk.verbatim_json`
text, and one RE2 pass over it for both what the scanner's patterns and what any reading need.

A scanner may offer `may_find(ScanText)`: False only when no rule's pattern matches anywhere in the text
(the patterns alone, before any check), so `scan` finds nothing in any part of it. Strings stand in the
text as they are, bounded by quotes as a joined scan bounds them by separators; the text holds more
(keys, numbers, punctuation), which can only make `may_find` say yes where the strings alone would not.
Its `clean_text_filter` folds that test and the readings' (`_READING_SOURCES`) into one regex: where
that regex matches nowhere, both tests say no; where it matches, they are run one by one, as they were.
"""

from __future__ import annotations

import re
from typing import Any

from mcp_interceptors.executor.memo import memo_for, plan_notes
from mcp_interceptors.guards._detectors._engine import ScanText, compile_prefilter
from mcp_interceptors.guards._walk import verbatim_json_bytes

__all__ = ["rules_out"]

#: A reading (`_readings`) starts from a run of 16 blob characters (base64, base64url, hex, and the line
#: breaks of wrapped base64): in the JSON text mapped through `_BLOB_CHARS`, a run of `_BLOB_RUN`.
_BLOB_ALPHABET = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-\r\n")
_BLOB_CHARS = bytes(ord("a") if byte in _BLOB_ALPHABET else byte if byte in b'":' else 32 for byte in range(256))
_BLOB_RUN = b"a" * 16
_RUN = re.compile(b"a+")
#: A number written with an exponent (its digits are not in the text), in the text mapped through `_NUMBER_CHARS`.
_NUMBER_CHARS = bytes(
    ord("0") if byte in b"0123456789" else ord("e") if byte in b"eE" else ord("+") if byte in b"+-" else 32
    for byte in range(256)
)
_EXPONENTS = (b"0e0", b"0e+0")

#: What `_readable` looks for, as RE2 sources matching where it says yes: a percent sign or an ampersand;
#: a blob run (one not followed by `":`, a mapping key's end, unless keys are read too); a digit, an `e`
#: and a digit, with a sign between or not (with `integers`). Keyed by `(keys, integers)`.
_BLOB = r"[A-Za-z0-9+/=_\-\r\n]"
_NOT_BLOB_NOR_QUOTE = r'[^A-Za-z0-9+/=_\-\r\n"]'
_READING_SOURCES = {
    (keys, integers): (
        "[%&]",
        f"{_BLOB}{{16}}" if keys else f'{_BLOB}{{16,}}(?:{_NOT_BLOB_NOR_QUOTE}|"[^:]|"?$)',
        *(["[0-9][eE][+\\-]?[0-9]"] if integers else []),
    )
    for keys in (False, True)
    for integers in (False, True)
}


def rules_out(payload: Any, scanner: Any, *, keys: bool, integers: bool) -> bool:
    """True when `scanner` finds nothing in any string of `payload` (and its keys, with `keys`; its integers'
    digits, with `integers`), read as sent or through any reading; False means "read the strings"."""
    may_find = getattr(scanner, "may_find", None)
    if (
        may_find is None
        or not isinstance(payload, dict)  # a dict's JSON ends in `}`: a value's closing quote has a char after it
        or (data := verbatim_json_bytes(payload)) is None
    ):
        return False
    clean_text_filter = getattr(scanner, "clean_text_filter", None)
    combined = clean_text_filter(_READING_SOURCES[keys, integers]) if clean_text_filter is not None else None
    if combined is not None and not _matches(combined, payload, data):
        return True
    return not _readable(data, keys, integers) and not may_find(ScanText(data.decode("ascii")))


def _matches(pattern: Any, payload: Any, data: bytes) -> bool:
    """Whether the clean-text filter `pattern` matches anywhere in `data`, the verbatim JSON of `payload`.

    In a chain run, the filters its plan's last run asked of one payload (`secrets`' and `pii`'s, say) are
    searched as one regex by the first of them asked: where it matches nowhere, none of them does; where it
    first matches at `m`, none matches before `m`, and each searches on from there (RE2 reads the text
    before `m` as context, so `^` and `\\b` mean what they mean from the start)."""
    memo = memo_for(payload)
    notes = plan_notes()
    if memo is None or notes is None:
        return pattern.search(data) is not None
    asked: list[Any] = memo.setdefault(_ASKED, [])
    if pattern not in asked:
        asked.append(pattern)
        if len(asked) > 1 and notes.get(_ASKED) != tuple(asked):
            notes[_ASKED] = tuple(asked)  # what the next run's first filter searches for all of them
    start = memo.get((_CLEAN_BEFORE, pattern))
    if start is None:
        start = 0
        peers = notes.get(_ASKED)
        if peers is not None and len(asked) == 1 and pattern in peers:
            found = _union_of(peers).search(data)
            start = _NOWHERE if found is None else found.start()
            for peer in peers:
                memo[_CLEAN_BEFORE, peer] = start
    return start != _NOWHERE and pattern.search(data, start) is not None


#: In a run's memo and its plan's notes: the clean-text filters asked of a payload, in turn; where, in a
#: payload's verbatim JSON, a filter matches nowhere before (`_NOWHERE`: nowhere at all).
_ASKED, _CLEAN_BEFORE, _NOWHERE = "clean_text_filters", "clean_before", -1
#: One regex per group of filters asked together, by the filters (a few per configuration of the guards).
_UNIONS: dict[tuple[Any, ...], Any] = {}
_MAX_UNIONS = 64


def _union_of(filters: tuple[Any, ...]) -> Any:
    union = _UNIONS.get(filters)
    if union is None:
        if len(_UNIONS) >= _MAX_UNIONS:
            _UNIONS.clear()
        union = _UNIONS[filters] = compile_prefilter([each.pattern.decode("utf-8") for each in filters])
    return union


def _readable(data: bytes, keys: bool, integers: bool) -> bool:
    """Whether any string of a `verbatim_json` text may hold a reading. The text is ASCII with no backslash:
    with no percent sign or ampersand, `may_hide` is false."""
    return b"%" in data or b"&" in data or _may_hold_readings(data, keys=keys, integers=integers)


def _may_hold_readings(data: bytes, *, keys: bool, integers: bool) -> bool:
    """Whether any string of the JSON text `data` (from `verbatim_json`) may hold a reading: a blob run
    that is not in a mapping key (`..."` then `:`), unless `keys` are scanned too; with `integers`, also
    a number written with an exponent. Two byte translations and searches, all in C."""
    mapped = data.translate(_BLOB_CHARS)
    start = mapped.find(_BLOB_RUN)
    while start >= 0:
        run = _RUN.match(mapped, start)
        end = run.end() if run is not None else start + len(_BLOB_RUN)
        if keys or mapped[end : end + 2] != b'":':
            return True
        start = mapped.find(_BLOB_RUN, end)
    if integers:
        numbers = data.translate(_NUMBER_CHARS)
        return any(exponent in numbers for exponent in _EXPONENTS)
    return False
