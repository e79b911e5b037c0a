"""The prompt-injection heuristics: phrase checks (one RE2 pass for all of them when google-re2 is
installed), Unicode checks, images and links that carry data, base64 that decodes to phrases; the `Signal`
they report and the `Detector` protocol a plugged-in detector follows. `injection` runs them in a guard.

The phrase checks read each string as sent and as a model reads it (`fold`): compatibility forms folded,
combining marks dropped, Cyrillic and Greek look-alikes read as Latin, invisible format characters removed.
"""

from __future__ import annotations

import base64
import binascii
import re
import unicodedata
import urllib.parse
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from mcp_interceptors.guards._detectors._engine import compile_user_pattern
from mcp_interceptors.guards._names import Glob
from mcp_interceptors.guards._scanning import SEPARATOR

try:
    import re2 as _re2  # type: ignore[import-untyped]
except ImportError:  # pragma: no cover - optional: linear-time matching, one pass for all phrases
    _re2 = None

__all__ = ["CHECKS", "Detector", "HeuristicDetector", "Signal", "combine", "fold"]

CHECKS = ("override", "role", "concealment", "unicode", "exfil_link", "encoded")


@dataclass(frozen=True, slots=True)
class Signal:
    """One injection marker: which check, how strongly (0..1), and what it saw (never the raw text)."""

    kind: str
    score: float
    detail: str


@runtime_checkable
class Detector(Protocol):
    """Scores one string. `detect` may be sync or async (return an awaitable) for model-backed detectors."""

    def detect(self, text: str) -> Sequence[Signal] | Awaitable[Sequence[Signal]]: ...


_WS = r"[\s\"'*_`]+"
#: (check, score, detail, regex, keywords). Regexes are valid for both re2 and stdlib `re` (no lookarounds)
#: and are matched case-insensitively; the keywords (lower case) let stdlib `re` skip most texts.
_PHRASES: tuple[tuple[str, float, str, str, tuple[str, ...]], ...] = (
    (
        "override",
        0.9,
        "instruction-override phrase",
        r"\b(?:ignore|disregard|forget|override|bypass|skip)"
        + _WS
        + r"(?:(?:all|any|the|your|of|everything)"
        + _WS
        + r")*(?:previous|prior|above|earlier|preceding|original|system|initial|safety)"
        + _WS
        + r"(?:instructions?|prompts?|rules|directions|guidelines|directives|context|messages?)\b",
        ("ignore", "disregard", "forget", "override", "bypass", "skip"),
    ),
    (
        "override",
        0.5,
        "replacement instructions",
        r"(?:^|[\n.!:])\s*(?:new|updated|real|actual)\s+(?:system\s+)?instructions?\s*:"
        r"|\bfrom now on,?\s+you\s+(?:will|must|are|shall)\b",
        ("instruction", "from now on"),
    ),
    (
        "role",
        0.7,
        "system-prompt marker or request",
        r"<\|im_start\|>\s*system\b|<\|system\|>|</?system>|\[/?(?:system|inst)\]"
        r"|\b(?:reveal|print|show|repeat|output)\s+(?:your|the)\s+(?:system|initial|hidden)\s+prompt\b",
        ("<|", "system>", "[system", "[/system", "[inst", "[/inst", "prompt"),
    ),
    (
        "role",
        0.6,
        "role-play instruction",
        r"\byou\s+are\s+now\s+(?:a|an|the|in|dan|my)\b|\bpretend\s+(?:to\s+be|you\s+are)\b|\broleplay\s+as\b"
        r"|\b(?:enable|enter|activate)\s+developer\s+mode\b|\bjailbreak(?:ed|ing)?\b",
        ("you are now", "pretend", "roleplay", "developer mode", "jailbreak"),
    ),
    (
        "concealment",
        0.7,
        "instruction to hide actions or send data",
        r"\b(?:do\s+not|don'?t|never)\s+(?:tell|inform|mention|reveal|show|alert)\s+(?:this\s+to\s+|it\s+to\s+)?"
        r"(?:the\s+)?user(?:[^'\w]|$)|\bwithout\s+(?:telling|informing|asking)\s+the\s+user\b"
        r"|\bsend\s+(?:the|all|your|any)\s+(?:\w+\s+)?(?:conversation|chat|history|secrets?|credentials?|"
        r"api\s+keys?|passwords?|tokens?|files?)\s+to\b",
        ("not", "don", "never", "without", "send"),
    ),
)
_TAGS = re.compile("[\U000e0000-\U000e007f]")
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")
# Zero-width joiner (emoji sequences) and non-joiner (Persian, Indic scripts) are normal text: not counted.
_INVISIBLE = re.compile("[\u200b\u2060-\u2064\u180e\ufeff]")
_IMAGE = re.compile(
    r"!\[[^\]\n]{0,200}\]\(\s*(?:<((?:https?:)?//[^>\n]+)>|<?((?:https?:)?//[^)\s>]+))"
    r"|<(?:img|source)\b[^>]{0,200}?\bsrc(?:set)?\s*=\s*[\"']?((?:https?:)?//[^\"'\s>]+)",
    re.IGNORECASE,
)
_LINK = re.compile(r"(!?)\[[^\]\n]{0,200}\]\(\s*<?((?:https?:)?//[^)\s>]+)")
# Reference-style images (`![alt][ref]`, `![ref][]`, `![ref]`) take their URL from a definition line
# (`[ref]: https://...`) anywhere in the text: a renderer fetches it as it fetches an inline image.
_REF_IMAGE = re.compile(r"!\[([^\]\n]{0,200})\](?!\()(?:\[([^\]\n]{0,200})\])?")
_REF_DEFINITION = re.compile(r"^[ \t]{0,3}\[([^\]\n]{1,200})\]:[ \t]*<?((?:https?:)?//[^\s>]+)", re.MULTILINE)
_IMG_TAG = re.compile(r"<(?:img|source)\b", re.IGNORECASE)
_BASE64_SOURCE = r"[A-Za-z0-9+/]{40,}={0,2}"
_LONG_VALUE = 24
# Long character-class runs are slow on stdlib `re` (it retries at every letter); re2 scans them in one pass.
_BASE64_TOKEN: Any = _re2.compile(_BASE64_SOURCE) if _re2 is not None else re.compile(_BASE64_SOURCE)


class _PhraseMatcher:
    """The phrase checks: one combined re2 pass when google-re2 is installed, else keyword-gated `re`."""

    def __init__(self, phrases: Sequence[tuple[str, float, str, str, tuple[str, ...]]]) -> None:
        # A configured phrase runs on re2 only (`check_patterns` refused any other): on stdlib `re` a
        # pattern such as `(a+)+$` backtracks for seconds on a short hostile text.
        self._each: list[tuple[Signal, Any, tuple[str, ...]]] = [
            (
                Signal(kind, score, detail),
                compile_user_pattern(source, ignore_case=True) if kind == "phrase" else re.compile(source, re.I),
                keywords,
            )
            for kind, score, detail, source, keywords in phrases
        ]
        self.any: Any = None
        if _re2 is not None and phrases:
            options = _re2.Options()
            options.case_sensitive = False
            options.log_errors = False  # a configured phrase re2 rejects (lookaround) falls back to `re`
            try:
                self.any = _re2.compile("|".join(f"(?:{source})" for _, _, _, source, _ in phrases), options)
            except _re2.error:
                self.any = None

    def search(self, text: str) -> list[Signal]:
        if self.any is not None:
            if self.any.search(text) is None:
                return []
            return [signal for signal, pattern, _ in self._each if pattern.search(text)]
        low = text.lower()
        return [
            signal
            for signal, pattern, keywords in self._each
            if (not keywords or any(k in low for k in keywords)) and pattern.search(text)
        ]


class HeuristicDetector:
    """The built-in detector: compiled regexes and Unicode checks; `allowed_hosts` are globs."""

    def __init__(
        self,
        allowed_hosts: Sequence[str] = (),
        extra_phrases: Sequence[str] = (),
        disabled: Sequence[str] = (),
    ) -> None:
        self.allowed_hosts = Glob(h.lower() for h in allowed_hosts)
        self.enabled = frozenset(CHECKS) - frozenset(disabled)
        phrases = [p for p in _PHRASES if p[0] in self.enabled]
        phrases += [("phrase", 0.8, f"configured phrase #{i}", p, ()) for i, p in enumerate(extra_phrases)]
        self._extra = bool(extra_phrases)
        self._phrases = _PhraseMatcher(phrases)

    def is_clean(self, texts: Sequence[str]) -> bool:
        """True when no check can fire on any of `texts`, decided on them joined (one RE2 pass for the
        phrases). The separator starts and ends with a newline, which the built-in phrases accept where
        they accept a text's start or end; configured phrases may not, so with any, this says False."""
        if self._extra or self._phrases.any is None:
            return False
        if not texts:
            return True
        joined = SEPARATOR.join(texts)
        enabled = self.enabled
        if self._phrases.any.search(joined) is not None:
            return False
        if not joined.isascii() and self._phrases.any.search(fold(joined)) is not None:
            return False
        if "unicode" in enabled and not joined.isascii():
            return False
        if "exfil_link" in enabled and _may_link(joined):
            return False
        return "encoded" not in enabled or _BASE64_TOKEN.search(joined) is None

    def detect(self, text: str) -> list[Signal]:
        signals = self.phrases(text)
        enabled = self.enabled
        if "unicode" in enabled and not text.isascii():
            signals.extend(_unicode_signals(text))
        if "exfil_link" in enabled and _may_link(text):
            signals.extend(self._link_signals(text))
        if "encoded" in enabled and len(text) >= 40:
            signals.extend(self._encoded_signals(text))
        return signals

    def phrases(self, text: str) -> list[Signal]:
        """The phrase signals of the text as sent and, when it differs, of its `fold` (as a model reads it)."""
        signals = self._phrases.search(text)
        if not text.isascii() and (folded := fold(text)) != text:
            signals += self._phrases.search(folded)
        if len(signals) > 1:  # two patterns of one check count once, at the higher score
            best: dict[str, Signal] = {}
            for signal in signals:
                if signal.kind not in best or signal.score > best[signal.kind].score:
                    best[signal.kind] = signal
            signals = list(best.values())
        return signals

    def _link_signals(self, text: str) -> list[Signal]:
        signals = []
        for url in _image_urls(text):
            if not self._is_allowed(url):
                carries = _carries_data(url)
                signals.append(Signal("exfil_link", 0.8 if carries else 0.2, f"image from {_host(url)}"))
        for match in _LINK.finditer(text):
            url = match.group(2)
            if match.group(1) != "!" and not self._is_allowed(url) and _carries_data(url):
                signals.append(Signal("exfil_link", 0.4, f"link carrying data to {_host(url)}"))
        return signals

    def _encoded_signals(self, text: str) -> list[Signal]:
        for match in _BASE64_TOKEN.finditer(text):
            blob = match.group(0)
            try:
                decoded = base64.b64decode(blob + "=" * (-len(blob) % 4), validate=False).decode("utf-8")
            except (binascii.Error, UnicodeDecodeError):
                continue
            if decoded.isprintable() or "\n" in decoded:
                inner = self.phrases(decoded)
                if inner:
                    return [Signal("encoded", max(s.score for s in inner), "base64 text with injection phrases")]
        return []

    def _is_allowed(self, url: str) -> bool:
        return self.allowed_hosts.matches(_host(url))


#: Format characters (zero-width, soft hyphen, joiners, bidi controls, tags) a reader never sees: they split
#: a phrase for a regex without changing what a model reads.
_FORMAT = re.compile("[\u00ad\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\U000e0000-\U000e007f]")


#: Combining marks (a model reads `ïgnore` or `i\u0307gnore` as `ignore`), after a compatibility decomposition.
_MARKS = re.compile("[\u0300-\u036f\u0483-\u0489\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")
#: Cyrillic and Greek letters drawn as Latin ones: a phrase written with Cyrillic i, a and e reads as English.
_LOOK_ALIKES = str.maketrans(
    "\u0430\u0432\u0435\u04bb\u0456\u0458\u043a\u043c\u043d\u043e\u0440\u051b\u0441\u0455\u0442\u0443\u0445\u0501"
    "\u051d\u04cf\u0261\u0131\u0410\u0412\u0415\u041d\u0406\u0408\u041a\u041c\u041e\u0420\u0421\u0405\u0422\u0425"
    "\u03b1\u03b2\u03b5\u03b9\u03ba\u03bd\u03bf\u03c1\u03c4\u03c5\u03c7\u0391\u0392\u0395\u0396\u0397\u0399\u039a"
    "\u039c\u039d\u039f\u03a1\u03a4\u03a5\u03a7",
    "abehijkmhopqcstyxdwlgiABEHIJKMOPCSTXabeiknoptuxABEZHIKMNOPTYX",
)
_HAS_LOOK_ALIKE = re.compile("[\u0370-\u03ff\u0400-\u052f\u0261\u0131]")


def fold(text: str) -> str:
    """The text as a model reads it: compatibility forms (fullwidth letters are ASCII letters), combining marks,
    Cyrillic/Greek look-alikes of Latin letters, and format characters folded away."""
    decomposed = unicodedata.normalize("NFKD", text)
    if _MARKS.search(decomposed) is not None:
        decomposed = _MARKS.sub("", decomposed)
    folded = unicodedata.normalize("NFC", decomposed)
    if _HAS_LOOK_ALIKE.search(folded) is not None:
        folded = folded.translate(_LOOK_ALIKES)
    return _FORMAT.sub("", folded)


def _may_link(text: str) -> bool:
    """Whether `text` may hold a markdown image or link, or an HTML image (`<img`, `<Img`, `<source`)."""
    return "](" in text or "]:" in text or ("<" in text and _IMG_TAG.search(text) is not None)


def _image_urls(text: str) -> list[str]:
    """The URLs of the images in `text`: inline markdown, HTML `<img src>`, and reference-style markdown."""
    urls = [match.group(1) or match.group(2) or match.group(3) for match in _IMAGE.finditer(text)]
    if "]:" in text and "![" in text:
        definitions: dict[str, str] = {}
        for match in _REF_DEFINITION.finditer(text):
            definitions.setdefault(_label(match.group(1)), match.group(2))  # the first definition wins
        for match in _REF_IMAGE.finditer(text):
            url = definitions.get(_label(match.group(2) or match.group(1)))
            if url is not None:
                urls.append(url)
    return urls


def _label(label: str) -> str:
    """A link label as CommonMark matches it: case-insensitive, runs of whitespace as one space."""
    return " ".join(label.split()).casefold()


def _host(url: str) -> str:
    """The host a browser fetches `url` from: it reads `\\` as `/` in http(s) URLs, so the host of
    `https://evil.test\\@cdn.example.com/` is `evil.test`, not the `cdn.example.com` urlsplit reads."""
    return (urllib.parse.urlsplit(url.replace("\\", "/")).hostname or "").lower()


def _carries_data(url: str) -> bool:
    """Query values (together: data split over several parameters counts whole) or a path segment long
    enough to smuggle something out."""
    parts = urllib.parse.urlsplit(url)
    values = [v for _, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)]
    segments = parts.path.split("/")
    return (
        sum(map(len, values)) >= _LONG_VALUE
        or any(len(segment) >= _LONG_VALUE for segment in segments)
        or "{" in url
        or "%7B" in url.upper()
    )


def _unicode_signals(text: str) -> list[Signal]:
    signals = []
    if _TAGS.search(text):
        signals.append(Signal("unicode", 0.95, "Unicode tag characters (hidden text)"))
    if _BIDI.search(text):
        signals.append(Signal("unicode", 0.6, "bidirectional override characters"))
    invisible = len(_INVISIBLE.findall(text)) - text.startswith("\ufeff")  # a leading BOM is normal
    if invisible >= 3:
        signals.append(Signal("unicode", 0.5, f"{invisible} invisible characters"))
    return signals


def combine(scores: Sequence[float]) -> float:
    """Noisy-OR: 1 - prod(1 - s)."""
    remaining = 1.0
    for score in scores:
        remaining *= 1.0 - min(max(score, 0.0), 1.0)
    return round(1.0 - remaining, 4)
