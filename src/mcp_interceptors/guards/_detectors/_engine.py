"""The regex seam under both scanners: google-re2 when importable (linear time, 10-100x faster on large
text), stdlib `re` otherwise, with char offsets either way.

Patterns given to `CompiledPattern` must be valid in both engines: no lookarounds, no backreferences,
scoped flags only (`(?i:...)`). Boundary checks that would need lookarounds are done by the callers.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Literal, TypeAlias

try:
    import re2  # type: ignore[import-untyped, import-not-found, unused-ignore]
except ImportError:  # pragma: no cover - re2 is installed in dev and CI
    re2 = None

# google-re2's `finditer` runs a Python generator and builds a match object per match, which costs as much
# as RE2's own matching on the short candidates scanners look for. Its C++ binding, one call per match,
# returns the spans directly. It is an implementation module of the package, so the wrapper stays the
# fallback if a release moves it (tests check that both agree and that this path is the one in use).
try:
    from re2 import _re2 as re2_binding  # type: ignore[import-untyped, import-not-found, unused-ignore]

    _UNANCHORED = re2_binding.RE2.Anchor.UNANCHORED
except (ImportError, AttributeError):  # pragma: no cover - present in google-re2 1.x
    re2_binding = None

__all__ = [
    "DEFAULT_ENGINE",
    "CompiledPattern",
    "Engine",
    "PatternRefusedError",
    "ScanText",
    "compile_prefilter",
    "compile_set",
    "compile_user_pattern",
    "engine_for",
    "re2",
    "re2_escape",
    "resolve_engine",
]

Engine: TypeAlias = Literal["re2", "re"]
DEFAULT_ENGINE: Engine = "re2" if re2 is not None else "re"

# bytes.translate(None, _NOT_CONTINUATION) keeps only UTF-8 continuation bytes, so its length is how many
# bytes in a chunk do not start a character.
_NOT_CONTINUATION = bytes(b for b in range(256) if not 0x80 <= b < 0xC0)


def resolve_engine(engine: Literal["auto", "re2", "re"]) -> Engine:
    """Turn "auto" into the best available engine; refuse "re2" when google-re2 is not installed."""
    if engine == "auto":
        return DEFAULT_ENGINE
    if engine == "re2" and re2 is None:
        raise ValueError('engine="re2" needs the google-re2 package; install it or use engine="re"')
    return engine


def engine_for(preferred: Engine, requested: Literal["auto", "re2", "re"]) -> Engine:
    """The engine one pattern runs on: the requested one, or under "auto" its preferred one if installed."""
    if requested != "auto":
        return resolve_engine(requested)
    return preferred if preferred == "re" or re2 is not None else "re"


class ScanText:
    """One text being scanned: the str and its UTF-8 bytes (what re2 and the RE2 sets read)."""

    __slots__ = ("data", "is_ascii", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.is_ascii = text.isascii()
        # Encoded at once: every scan reads it (the sets do), and an attribute is cheaper than a property.
        self.data = text.encode("utf-8", "surrogatepass")

    @staticmethod
    def of(text: str) -> ScanText:
        """The `ScanText` of `text`, shared with the scan just before when it read the same str (a payload's
        strings go through the secrets scanner, then the PII scanner)."""
        last = _last_scanned[0]
        if last is not None and last.text is text:
            return last
        scan = _last_scanned[0] = ScanText(text)
        return scan

    def char_spans(self, byte_spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """`byte_spans` (offsets into `data`) as char offsets into `text`.

        One pattern's spans come in text order, so counting the UTF-8 continuation bytes between
        consecutive offsets converts them all in one pass over the text; a smaller offset restarts the
        count from the beginning.
        """
        data = self.data
        last_byte = last_char = 0
        char_spans = []
        for start, end in byte_spans:
            if start < last_byte:
                last_byte = last_char = 0
            # Most chunks are ASCII: tested inline, they cost no call.
            before = data[last_byte:start]
            last_char += len(before) if before.isascii() else len(before) - _continuation_bytes(before)
            start_char = last_char
            inside = data[start:end]
            last_char += len(inside) if inside.isascii() else len(inside) - _continuation_bytes(inside)
            last_byte = end
            char_spans.append((start_char, last_char))
        return char_spans


# One slot, replaced whole: a thread reading it holds its own reference, so sharing it needs no lock.
_last_scanned: list[ScanText | None] = [None]


def _continuation_bytes(chunk: bytes) -> int:
    """How many bytes of `chunk` continue a UTF-8 char rather than start one."""
    try:  # bytes less chars, when the chunk holds whole chars (decoding beats building a translate table)
        return len(chunk) - len(chunk.decode("utf-8", "surrogatepass"))
    except UnicodeDecodeError:
        return len(chunk.translate(None, _NOT_CONTINUATION))


class CompiledPattern:
    """A pattern compiled for one engine; `spans` yields char spans of the first participating group."""

    __slots__ = ("_compiled", "_match", "engine", "source")

    def __init__(self, source: str, engine: Engine = DEFAULT_ENGINE, *, re_fence: str = "") -> None:
        """`re_fence` is a lookbehind put before the pattern on stdlib `re` only: it stops a pattern with
        an unbounded run from re-scanning that run from every position inside it (quadratic time),
        which re2 never does."""
        self.source = source
        self.engine: Engine = engine
        self._compiled: Any
        self._match: Any = None  # the binding's `Match(anchor, data, pos, endpos)`, when available
        if engine == "re2":
            self._compiled = re2.compile(source.encode("utf-8"))
            if re2_binding is not None:
                binding = re2_binding.RE2(source.encode("utf-8"), re2.Options())
                self._match = binding.Match if binding.ok() else None
        else:
            self._compiled = re.compile(f"{re_fence}(?:{source})" if re_fence else source, re.ASCII)

    def spans(self, scan: ScanText, groups: tuple[int, ...] = (0,)) -> list[tuple[int, int]]:
        """The `(start, end)` in chars of the first of `groups` that took part in each match."""
        match = self._match
        if match is None:
            if self.engine == "re":
                return _spans_of(self._compiled.finditer(scan.text), groups)
            found = _spans_of(self._compiled.finditer(scan.data), groups)
            return found if scan.is_ascii or not found else scan.char_spans(found)
        # What `_spans_of` gives for the pattern's `finditer` on the text, through the binding (inline: this
        # runs once per rule and text). Each call gives the byte spans of all groups of the leftmost match at
        # or after `pos` ((-1, -1) for a group that took no part); the search resumes at the match's end (at
        # the next char after an empty match).
        data = scan.data
        found = []
        pos, endpos = 0, len(data)
        first_only = groups == (0,)
        while pos <= endpos:
            spans = match(_UNANCHORED, data, pos, endpos)
            start, end = whole = spans[0]
            if start < 0:
                break
            if not first_only:
                for group in groups:
                    if spans[group][0] >= 0:
                        whole = spans[group]
                        break
            found.append(whole)
            pos = end
            if end == start:  # an empty match: go on from the next char, as `finditer` on the str does
                pos += 1
                while pos < endpos and 0x80 <= data[pos] < 0xC0:
                    pos += 1
        return found if scan.is_ascii or not found else scan.char_spans(found)

    def occurs_in(self, scan: ScanText) -> bool:
        """True when the pattern matches somewhere in the text (one call, no spans converted)."""
        if self._match is not None:
            return bool(self._match(_UNANCHORED, scan.data, 0, len(scan.data))[0][0] >= 0)
        return self._compiled.search(scan.text if self.engine == "re" else scan.data) is not None


def _spans_of(matches: Iterator[Any], groups: tuple[int, ...]) -> list[tuple[int, int]]:
    # A list, not a generator, and no call per match for the common group 0: this runs once per match.
    if groups == (0,):
        return [match.span() for match in matches]
    return [_first_span(match, groups) for match in matches]


def _first_span(match: Any, groups: tuple[int, ...]) -> tuple[int, int]:
    for group in groups:
        start, end = match.span(group)
        if start >= 0:
            return start, end
    return match.span(0)  # type: ignore[no-any-return]


def re2_escape(literal: str) -> str:
    """`literal` as a pattern both engines read literally."""
    return "".join(f"\\x{ord(c):02x}" if c.isascii() and not (c.isalnum() or c == "_") else c for c in literal)


def compile_set(sources: list[str]) -> Any:
    """An RE2 set searching for all `sources` in one pass (`.Match(data)` gives the indices of those found,
    empty or None when there are none), or None without google-re2. A set has no NFA to fall back on:
    when its DFA outgrows its memory, `Match` reports nothing. A non-empty answer is complete; an empty
    one is final only for literal alternations (a literal trie stays a few hundred states), else it means
    "unknown"."""
    if re2 is None or not sources:
        return None
    options = re2.Options()
    options.max_mem = 32 << 20
    if re2_binding is None:  # pragma: no cover - see re2_binding
        compiled = re2.Set.SearchSet(options)
        for source in sources:
            compiled.Add(source)
        compiled.Compile()
        return compiled
    # The binding's set, as for patterns: the wrapper's `Match` is one more Python call per text.
    binding = re2_binding.Set(_UNANCHORED, options)
    for source in sources:
        if binding.Add(source.encode("utf-8")) < 0:
            raise re2.error(f"failed to add {source!r} to an RE2 set")
    if not binding.Compile():
        raise re2.error("failed to compile an RE2 set")
    return binding


def compile_prefilter(sources: list[str]) -> Any:
    """One RE2 regex matching wherever any of `sources` does (`.search(data)` on UTF-8 bytes), or None
    without google-re2. Unlike a set, a regex that outgrows its DFA budget falls back to the NFA, so a
    "no match" from it is always true."""
    if re2 is None or not sources:
        return None
    options = re2.Options()
    options.max_mem = 32 << 20
    return re2.compile("|".join(f"(?:{source})" for source in sources).encode("utf-8"), options)


class PatternRefusedError(ValueError):
    """A configured pattern stdlib `re` compiles but RE2 does not (a lookaround, a backreference)."""


def compile_user_pattern(source: str, *, ignore_case: bool = False) -> Any:
    """Compile a configured pattern on re2, whose matching takes linear time whatever the input. Its
    result has `search` and `finditer(str)` with char spans, and `groupindex`.

    Raises ValueError saying why when re2 rejects the pattern (a lookaround, a backreference) or is not
    installed: stdlib `re` backtracks, and a pattern such as `(?!z)(a+)+$` then holds the event loop for
    seconds on a 28-character input, which no deadline can interrupt (the match never yields).
    """
    if re2 is None:
        raise PatternRefusedError("configured patterns need the google-re2 package (linear-time matching)")
    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = not ignore_case
    try:
        return re2.compile(source, options)
    except re2.error as error:
        try:
            re.compile(source)
        except re.error as syntax:
            raise ValueError(str(syntax)) from None
        reason = error.args[0].decode() if error.args and isinstance(error.args[0], bytes) else str(error)
        raise PatternRefusedError(
            f"RE2 rejects it ({reason}); only RE2 syntax is accepted (no lookarounds or backreferences), "
            "since a backtracking pattern can block the event loop on hostile input; rewrite it, or check "
            "boundaries in the pattern itself (e.g. [^A-Za-z0-9] instead of a lookbehind)"
        ) from None
