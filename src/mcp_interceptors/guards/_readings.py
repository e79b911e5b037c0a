"""How a string may hide what it carries, undone, for `_scanning`: escapes (percent, HTML entities,
backslash), invisible and look-alike characters, and base64, base64url or hex blobs. Each `Reading` maps
what is found in it back to the string it was read from, and redaction goes back the same way.

Readings cost nothing for most strings: a payload's strings get them only when a cheap test on them all
joined finds a `%`, `&`, backslash or non-ASCII character, and only the strings holding one are looked at
further. Blobs are looked for in values without spaces (a whole value, or a run in a URL or `key=...`),
which the scanners' per-string loop visits anyway; a blob inside prose is not decoded.
"""

from __future__ import annotations

import base64
import binascii
import html
import re
import unicodedata
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache

from mcp_interceptors.guards._detectors._engine import CompiledPattern, ScanText, re2

__all__ = [
    "Edit",
    "Reading",
    "apply_edits",
    "decoded_base64",
    "edits_on_string",
    "encoded_like",
    "may_hide",
    "read_in_place",
    "readings_of",
    "span_on_string",
]

#: Readings of readings (base64 of base64 of percent-encoded text) go this deep, and a string gets at most
#: this many: a hostile string cannot make the scan grow beyond a few passes over its own length.
_MAX_DEPTH = 3
_MAX_READINGS = 16
#: The shortest blob decoded (12 bytes: the shortest credential a scanner knows).
_MIN_BLOB = 16
#: Hex shorter than this is an id or a colour, not an encoded value (12 bytes again).
_MIN_HEX = 24

# Opening with the literal lets `re` skip to the next `%` (a leading group cost 10x the scan on a lone `%`).
_PERCENT = re.compile(r"%[0-9A-Fa-f]{2}(?:%[0-9A-Fa-f]{2})*")
_ENTITY = re.compile(r"&(?:#[0-9]{1,7};?|#[xX][0-9A-Fa-f]{1,6};?|[A-Za-z][A-Za-z0-9]{1,31};)")
_BACKSLASH = re.compile(r"\\(?:u[0-9A-Fa-f]{4}|x[0-9A-Fa-f]{2}|[nrtbf\"'/\\])")
_BACKSLASH_CHARS = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f", '"': '"', "'": "'", "/": "/", "\\": "\\"}

#: Characters a reader never sees (zero-width, soft hyphen, joiners, bidi controls, variation selectors,
#: fillers, tags): removed, so one inside a token does not split it for a regex.
INVISIBLE = (
    "\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u2064"
    "\u2066-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\U000e0000-\U000e0fff"
)
#: Combining marks of the blocks used with Latin letters (`e\u0301`): removed, as a model reads past them.
MARKS = "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
#: Look-alikes of ASCII letters, digits and `@`: fullwidth forms, mathematical alphanumerics, circled
#: letters, small forms; read as the ASCII character their compatibility form is.
_FOLDED = "\uff01-\uff5e\ufe50-\ufe6b\u24b6-\u24e9\U0001d400-\U0001d7ff"
_UNICODE_SOURCE = f"[{INVISIBLE}{MARKS}{_FOLDED}]|[^\\P{{Nd}}0-9]"
_UNICODE_RE = re.compile(f"[{INVISIBLE}{MARKS}{_FOLDED}]|[^\\D0-9]")
# On the UTF-8 bytes RE2 finds them several times faster than `re` on the str.
_UNICODE_RE2 = CompiledPattern(_UNICODE_SOURCE, "re2") if re2 is not None else None
_REMOVED = re.compile(f"[{INVISIBLE}{MARKS}]")

_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+={0,2}")
_HEX = re.compile(r"[0-9A-Fa-f]+")
#: Wrapped in lines (76 wide from MIME and the `base64` tool, 64 in PEM), ended by `\n` or `\r\n`.
_BASE64_LINES = re.compile(r"(?:[A-Za-z0-9+/]+\r?\n)+[A-Za-z0-9+/]*={0,2}(?:\r?\n)?")
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
#: A blob inside a value without spaces (`?d=...`, `key=...`): a run of either alphabet.
_BLOB_RUN = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")

#: A change to a text: `(start, end, kind, replacement)`; None stands for the kind's placeholder.
Edit = tuple[int, int, str, "str | None"]


@dataclass(frozen=True, slots=True)
class _Codec:
    """How a blob was written, to write a redacted one the same way."""

    alphabet: str  # "base64", "base64url" or "hex"
    padded: bool = True
    upper: bool = False  # hex
    layout: str = ""  # base64 wrapped in lines: the original, whose line width and ending are kept

    def encode(self, text: str) -> str:
        data = text.encode("utf-8", "surrogatepass")
        if self.alphabet == "hex":
            return data.hex().upper() if self.upper else data.hex()
        if self.alphabet == "base64url":
            encoded = base64.urlsafe_b64encode(data).decode("ascii")
        else:
            encoded = base64.b64encode(data).decode("ascii")
            if self.layout:
                return encoded_like(self.layout, text)
        return encoded if self.padded else encoded.rstrip("=")


@dataclass(frozen=True, slots=True)
class Reading:
    """One way of reading a string (or an outer reading's text): `text`, and how it maps back.

    Either `units` (sorted `(start, end, out_start, out_end)`: each stretch of the source undone in place,
    the rest copied), or `blob` (`(start, end, codec)`: that stretch of the source decoded).
    """

    text: str
    parent: Reading | None
    units: tuple[tuple[int, int, int, int], ...] = ()
    blob: tuple[int, int, _Codec] | None = None

    def edits_on_source(self, edits: Sequence[Edit], fill: Callable[[str], str]) -> list[Edit]:
        """`edits` on this reading's text as edits on the text it was read from."""
        if self.blob is not None:
            start, end, codec = self.blob
            kind = edits[0][2]
            return [(start, end, kind, codec.encode(apply_edits(self.text, edits, fill)))]
        out_starts = [unit[2] for unit in self.units]
        return [(self._source_start(out_starts, s), self._source_end(out_starts, e), k, r) for s, e, k, r in edits]

    def _source_start(self, out_starts: list[int], position: int) -> int:
        k = bisect_right(out_starts, position) - 1
        if k < 0:
            return position
        start, end, _, out_end = self.units[k]
        return start if position < out_end else end + position - out_end

    def _source_end(self, out_starts: list[int], position: int) -> int:
        if position <= 0:
            return position
        last = position - 1
        k = bisect_right(out_starts, last) - 1
        if k < 0:
            return position
        end, out_end = self.units[k][1], self.units[k][3]
        return end if last < out_end else end + last - out_end + 1


def edits_on_string(groups: Iterable[tuple[Reading | None, list[Edit]]], fill: Callable[[str], str]) -> list[Edit]:
    """Edits on readings' texts (`(reading, edits)`; None for the string as sent) carried back to the string.

    Deepest readings first, each reading's edits gathered before it maps them to its source: a blob is
    written again once, with every edit found in it or in the readings of it.
    """
    final: list[Edit] = []
    pending: dict[int, tuple[Reading, list[Edit]]] = {}
    for reading, edits in groups:
        if reading is None:
            final.extend(edits)
        else:
            pending.setdefault(id(reading), (reading, []))[1].extend(edits)
    while pending:
        reading, edits = max(pending.values(), key=lambda entry: _depth(entry[0]))
        del pending[id(reading)]
        mapped = reading.edits_on_source(edits, fill)
        if reading.parent is None:
            final.extend(mapped)
        else:
            pending.setdefault(id(reading.parent), (reading.parent, []))[1].extend(mapped)
    return final


def span_on_string(reading: Reading | None, start: int, end: int) -> tuple[int, int, tuple[tuple[int, int], ...]]:
    """Where `start:end` of a reading's text sits in the string: its span there, and for a blob on the way
    its span inside each blob (innermost first), so two findings in one blob stay apart."""
    inner: list[tuple[int, int]] = []
    while reading is not None:
        if reading.blob is not None:
            inner.append((start, end))
            start, end = reading.blob[0], reading.blob[1]
        else:
            out_starts = [unit[2] for unit in reading.units]
            start, end = reading._source_start(out_starts, start), reading._source_end(out_starts, end)
        reading = reading.parent
    return start, end, tuple(inner)


def _depth(reading: Reading | None) -> int:
    depth = 0
    while reading is not None:
        depth, reading = depth + 1, reading.parent
    return depth


def apply_edits(text: str, edits: Sequence[Edit], fill: Callable[[str], str]) -> str:
    """`text` with each edit made; overlapping edits become one over their union (the longest one's
    replacement if it covers the union, else its kind's placeholder), so nothing found is left in part."""
    pieces: list[str] = []
    cursor = 0
    for start, end, kind, replacement in _fused(edits):
        pieces.append(text[cursor:start])
        pieces.append(fill(kind) if replacement is None else replacement)
        cursor = end
    pieces.append(text[cursor:])
    return "".join(pieces)


def _fused(edits: Sequence[Edit]) -> Iterator[Edit]:
    ordered = sorted(edits, key=lambda edit: (edit[0], -edit[1]))
    if not ordered:
        return
    start, end, kind, replacement = ordered[0]
    longest = end - start
    for edit in ordered[1:]:
        if edit[0] >= end:
            yield start, end, kind, replacement
            start, end, kind, replacement = edit
            longest = end - start
            continue
        if edit[1] - edit[0] > longest:
            kind, longest = edit[2], edit[1] - edit[0]
        if edit[1] > end:
            end, replacement = edit[1], None
    yield start, end, kind, replacement


def may_hide(joined: str) -> bool:
    """Whether any string of `joined` may need a reading other than for blobs: one test per character."""
    return "%" in joined or "\\" in joined or "&" in joined or not joined.isascii()


def readings_of(text: str, *, in_place: bool = True) -> list[Reading]:
    """Every reading of `text` that differs from it: text undone in place, and blobs decoded, then the
    readings of those in turn (to `_MAX_DEPTH`). `in_place=False` skips the first kind (the caller's
    joined test found nothing for it)."""
    out: list[Reading] = []
    pending: list[tuple[str, Reading | None, int, bool]] = [(text, None, 0, in_place)]
    while pending and len(out) < _MAX_READINGS:
        source, parent, depth, undo = pending.pop()
        found = _blob_readings(source, parent)
        if undo and (undone := _undone(source, parent)) is not None:
            found.insert(0, undone)
        for reading in found[: _MAX_READINGS - len(out)]:
            out.append(reading)
            if depth + 1 < _MAX_DEPTH:
                pending.append((reading.text, reading, depth + 1, True))
    return out


def read_in_place(text: str, *, percent: bool = True) -> str | None:
    """`text` with its escapes decoded (percent-escapes only with `percent`) and its invisible and
    look-alike characters read as a reader sees them, or None when nothing changes."""
    if not may_hide(text):
        return None
    reading = _undone(text, None, percent=percent)
    return reading.text if reading is not None else None


def _undone(text: str, parent: Reading | None, *, percent: bool = True) -> Reading | None:
    """`text` with its escapes decoded and its invisible and look-alike characters read as a reader sees
    them, or None when nothing changes."""
    changes: list[tuple[int, int, str]] = []
    if percent and "%" in text:
        changes.extend(_percent_changes(text))
    if "&" in text:
        for match in _ENTITY.finditer(text):
            decoded = html.unescape(match.group())
            if decoded != match.group():
                changes.append((match.start(), match.end(), decoded))
    if "\\" in text:
        changes.extend((m.start(), m.end(), _unescaped(m.group())) for m in _BACKSLASH.finditer(text))
    if not text.isascii():
        changes.extend(_unicode_changes(text))
    if not changes:
        return None
    changes.sort()
    pieces: list[str] = []
    units: list[tuple[int, int, int, int]] = []
    cursor = out_length = 0
    for start, end, replacement in changes:
        if start < cursor:  # overlaps the change before (cannot happen across kinds; kept safe)
            continue
        pieces.append(text[cursor:start])
        out_length += start - cursor
        units.append((start, end, out_length, out_length + len(replacement)))
        pieces.append(replacement)
        out_length += len(replacement)
        cursor = end
    pieces.append(text[cursor:])
    return Reading("".join(pieces), parent, tuple(units))


def _percent_changes(text: str) -> Iterator[tuple[int, int, str]]:
    for match in _PERCENT.finditer(text):
        run = match.group()
        decoded = bytes.fromhex(run.replace("%", "")).decode("utf-8", "replace")
        if len(decoded) * 3 == len(run):  # one byte per char: each escape is a unit, so spans stay exact
            for offset, char in enumerate(decoded):
                yield match.start() + 3 * offset, match.start() + 3 * offset + 3, char
        else:
            yield match.start(), match.end(), decoded


def _unescaped(escape: str) -> str:
    if escape[1] in "ux":
        return chr(int(escape[2:], 16))
    return _BACKSLASH_CHARS[escape[1]]


def _unicode_changes(text: str) -> list[tuple[int, int, str]]:
    if _UNICODE_RE2 is not None:
        spans = _UNICODE_RE2.spans(ScanText(text))
    else:
        spans = [match.span() for match in _UNICODE_RE.finditer(text)]
    return [(start, end, _folded(text[start:end])) for start, end in spans]


@cache
def _folded(char: str) -> str:
    """What a reader takes `char` for: nothing (invisible chars and marks), an ASCII digit, or the
    ASCII character its compatibility form is; else the char itself."""
    if _REMOVED.fullmatch(char):
        return ""
    if char.isdecimal():
        return str(unicodedata.decimal(char))
    compatible = unicodedata.normalize("NFKC", char)
    return compatible if compatible.isascii() else char


def _blob_readings(text: str, parent: Reading | None) -> list[Reading]:
    """The text decoded when it is wholly a blob; else each blob run in it, when it has no spaces."""
    if len(text) < _MIN_BLOB or " " in text:
        return []
    whole = _decoded_blob(text, whole=True)
    if whole is not None:
        decoded, codec = whole
        return [Reading(decoded, parent, blob=(0, len(text), codec))]
    if len(text) > 65536:  # a space-free run that long is data, not a value with a blob in it
        return []
    out = []
    for match in _BLOB_RUN.finditer(text):
        run = match.group()
        if (run.islower() or run.isupper()) and not _HEX.fullmatch(run):
            continue  # ids and names: blobs of text mix cases (hex aside)
        blob = _decoded_blob(run, whole=False)
        if blob is not None:
            out.append(Reading(blob[0], parent, blob=(match.start(), match.end(), blob[1])))
            if len(out) >= _MAX_READINGS:
                break
    return out


def _decoded_blob(text: str, *, whole: bool) -> tuple[str, _Codec] | None:
    """`(decoded text, codec)` when `text` is hex, base64 or base64url of UTF-8 text, else None. A whole
    string in the standard alphabet needs only be UTF-8 (as before); anything else must read as text."""
    if len(text) >= _MIN_HEX and len(text) % 2 == 0 and _HEX.fullmatch(text):
        decoded = _text_of(bytes.fromhex(text))
        return (decoded, _Codec("hex", upper=text.isupper())) if decoded is not None and _is_text(decoded) else None
    if whole and (decoded := decoded_base64(text)) is not None:
        return decoded, _Codec("base64", layout=text if "\n" in text else "")
    stripped = text.rstrip("=")
    if len(stripped) % 4 == 1 or len(text) - len(stripped) > 2:
        return None
    padding = "=" * (-len(stripped) % 4)
    if _BASE64URL.fullmatch(text) and ("-" in text or "_" in text or not text.endswith("=")):
        try:
            data = base64.urlsafe_b64decode(stripped + padding)
        except (binascii.Error, ValueError):
            return None
        codec = _Codec("base64url", padded=text.endswith("="))
    elif _BASE64.fullmatch(text):
        try:
            data = base64.b64decode(stripped + padding, validate=True)
        except (binascii.Error, ValueError):
            return None
        codec = _Codec("base64", padded=text.endswith("="))
    else:
        return None
    decoded = _text_of(data)
    return (decoded, codec) if decoded is not None and _is_text(decoded) else None


def _text_of(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _is_text(decoded: str) -> bool:
    """No control characters but line breaks and tabs: random bytes that happen to be UTF-8 rarely pass,
    and text with invisible characters in it (a disguised token) does."""
    return _CONTROL.search(decoded) is None


def decoded_base64(text: str) -> str | None:
    """`text` decoded, when it is wholly base64 of UTF-8 text, on one line or wrapped in lines (as MIME and
    the `base64` tool write it); else None (binary data, or not base64)."""
    if len(text) < _MIN_BLOB or " " in text:  # no space in either layout: prose is spared the regex
        return None
    if len(text) % 4 or not _BASE64.fullmatch(text):
        if "\n" not in text or not _BASE64_LINES.fullmatch(text):
            return None
        text = text.replace("\r", "").replace("\n", "")
        if len(text) % 4:
            return None
    try:
        return base64.b64decode(text, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def encoded_like(original: str, text: str) -> str:
    """`text` base64-encoded as `original` was: on one line, or in lines as wide as its first, with its
    line ending (and its final line break, if it had one)."""
    encoded = base64.b64encode(text.encode("utf-8", "surrogatepass")).decode("ascii")
    first_break = original.find("\n")
    if first_break < 0:
        return encoded
    crlf = original[first_break - 1 : first_break] == "\r"
    width = first_break - crlf
    newline = "\r\n" if crlf else "\n"
    wrapped = newline.join(encoded[i : i + width] for i in range(0, len(encoded), width))
    return wrapped + newline if original.endswith("\n") else wrapped
