"""Pure: what of a chain's payloads an audit record may hold, and what it withholds.

A record keeps each mutation as the new values of its diff, and each validator's messages. Two rules keep a
value that a mutation took out of the payload from coming back through the trail:

1. A value a mutation wrote is kept where the chain's final payload holds it at the same place (for a
   shadow mutation, also what it would have put there itself); text a later mutation changed is withheld.
2. Text that any mutation of the call removed (active or shadow, in this leg or an earlier one) is
   withheld from everything the record keeps: diff values and paths, messages, errors.

A leg that was not allowed has no final payload (nothing went on), so its mutations keep their operations
and paths and no values. Text with no letter or digit in it is never withheld (no secret is only spaces and
punctuation). Aligning two strings is a patience diff over words, linear in practice: an alignment that
finds too little only withholds more.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from difflib import SequenceMatcher
from typing import Any, Final

import orjson

from mcp_interceptors.protocol.results import same_json

#: What stands where text was withheld.
WITHHELD: Final = "[withheld]"
#: Words, runs of other letters (a script without spaces), whitespace, or one other character.
_TOKEN: Final = re.compile(r"[0-9A-Za-z_]+|[^\W0-9A-Za-z_]+|\s+|.", re.DOTALL)
_WORD_CHAR: Final = re.compile(r"[^\W_]")
#: Gaps between anchors up to this many token pairs are aligned exactly (difflib); larger ones by anchors.
_EXACT_CELLS: Final = 4096
_MAX_DEPTH: Final = 24
#: Longer middles (what differs between two strings, from the first change to the last) are not aligned: all
#: of it counts as changed (`removed_text` then takes the words whose count fell).
_MAX_ALIGNED: Final = 256 * 1024
#: Removed text shorter than this is withheld as a whole word only (`a` must not blank every "a").
_SUBSTRING_MIN: Final = 4
#: No value at that place (a pointer into nothing).
ABSENT: Final = object()


def has_word(text: str) -> bool:
    return _WORD_CHAR.search(text) is not None


# -- aligning two strings ----------------------------------------------------------------------------------


def matched_spans(a: str, b: str) -> list[tuple[int, int, int]]:
    """Blocks `(start in a, start in b, length)` of text `a` and `b` share, in order, not overlapping."""
    if a == b:
        return [(0, 0, len(a))] if a else []
    head = _common_prefix(a, b)
    tail = _common_suffix(a, b, len(a) - head, len(b) - head)
    blocks = [(0, 0, head)] if head else []
    middle_a, middle_b = a[head : len(a) - tail], b[head : len(b) - tail]
    if middle_a and middle_b and len(middle_a) + len(middle_b) <= _MAX_ALIGNED:
        tokens_a, starts_a = _tokenize(middle_a)
        tokens_b, starts_b = _tokenize(middle_b)
        for i, j, n in _token_blocks(tokens_a, tokens_b):
            size = starts_a[i + n] - starts_a[i]
            blocks.append((head + starts_a[i], head + starts_b[j], size))
    if tail:
        blocks.append((len(a) - tail, len(b) - tail, tail))
    return blocks


def _common_prefix(a: str, b: str) -> int:
    low, high = 0, min(len(a), len(b))
    while low < high:  # halving with slice compares: C speed on long strings
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def _common_suffix(a: str, b: str, room_a: int, room_b: int) -> int:
    low, high = 0, min(room_a, room_b)
    while low < high:
        mid = (low + high + 1) // 2
        if a[len(a) - mid :] == b[len(b) - mid :]:
            low = mid
        else:
            high = mid - 1
    return low


def _tokenize(text: str) -> tuple[list[str], list[int]]:
    tokens = _TOKEN.findall(text)
    return tokens, [0, *itertools.accumulate(map(len, tokens))]


def _token_blocks(a: Sequence[str], b: Sequence[str]) -> list[tuple[int, int, int]]:
    blocks: list[tuple[int, int, int]] = []
    _align(a, b, 0, len(a), 0, len(b), blocks, 0)
    return blocks


def _align(
    a: Sequence[str],
    b: Sequence[str],
    alo: int,
    ahi: int,
    blo: int,
    bhi: int,
    out: list[tuple[int, int, int]],
    depth: int,
) -> None:
    head = 0
    while alo + head < ahi and blo + head < bhi and a[alo + head] == b[blo + head]:
        head += 1
    if head:
        out.append((alo, blo, head))
        alo, blo = alo + head, blo + head
    tail = 0
    while alo < ahi - tail and blo < bhi - tail and a[ahi - 1 - tail] == b[bhi - 1 - tail]:
        tail += 1
    ahi, bhi = ahi - tail, bhi - tail
    if alo < ahi and blo < bhi:
        if (ahi - alo) * (bhi - blo) <= _EXACT_CELLS:
            matcher = SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False)
            out.extend((alo + i, blo + j, n) for i, j, n in matcher.get_matching_blocks() if n)
        elif depth < _MAX_DEPTH:
            at_a, at_b = alo, blo
            for i, j in _anchors(a, b, alo, ahi, blo, bhi):
                if at_a < i and at_b < j:
                    _align(a, b, at_a, i, at_b, j, out, depth + 1)
                last = out[-1] if out else None
                if last is not None and last[0] + last[2] == i and last[1] + last[2] == j:
                    out[-1] = (
                        last[0],
                        last[1],
                        last[2] + 1,
                    )  # the run an anchor continues
                else:
                    out.append((i, j, 1))
                at_a, at_b = i + 1, j + 1
            if alo < at_a < ahi and at_b < bhi:  # no anchor at all: the whole gap counts as changed
                _align(a, b, at_a, ahi, at_b, bhi, out, depth + 1)
    if tail:
        out.append((ahi, bhi, tail))


def _anchors(a: Sequence[str], b: Sequence[str], alo: int, ahi: int, blo: int, bhi: int) -> list[tuple[int, int]]:
    """Tokens that occur as often in each range, the k-th occurrence in one paired with the k-th in the other,
    and of those pairs the longest run in the same order in both (patience diff, generalised past unique
    tokens: text a guard edited keeps most of its words, spaces and punctuation as often as before)."""
    count_a, count_b = Counter(a[alo:ahi]), Counter(b[blo:bhi])
    places: dict[str, list[int]] = {}
    for j in range(blo, bhi):
        token = b[j]
        if count_a[token] == count_b[token]:
            places.setdefault(token, []).append(j)
    next_place = {token: iter(where).__next__ for token, where in places.items()}
    pairs = [(i, next_place[token]()) for i, token in enumerate(a[alo:ahi], alo) if token in next_place]
    if all(left[1] < right[1] for left, right in itertools.pairwise(pairs)):
        return pairs  # in the same order already: the common case, an edit that moved nothing
    # The longest increasing run of b positions (patience sorting), walked back from its end.
    tops: list[int] = []
    top_index: list[int] = []
    previous: list[int] = []
    for index, (_, j) in enumerate(pairs):
        pile = bisect.bisect_left(tops, j)
        previous.append(top_index[pile - 1] if pile else -1)
        if pile == len(tops):
            tops.append(j)
            top_index.append(index)
        else:
            tops[pile], top_index[pile] = j, index
    chosen: list[tuple[int, int]] = []
    index = top_index[-1] if top_index else -1
    while index >= 0:
        chosen.append(pairs[index])
        index = previous[index]
    chosen.reverse()
    return chosen


def _unmatched(text: str, spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The runs of `text` outside `spans` (start, end), in order."""
    runs, at = [], 0
    for start, end in sorted(spans):
        if start > at:
            runs.append((at, start))
        at = max(at, end)
    if at < len(text):
        runs.append((at, len(text)))
    return runs


# -- rule 2: what mutations removed ------------------------------------------------------------------------


def removed_by(ops: Iterable[Mapping[str, Any]], before: Any, into: set[str]) -> None:
    """Add to `into` the text a mutation took out of `before` with the diff `ops` (`json_diff`'s, whose
    `remove` and `replace` paths are places in `before`): the keys and leaves it removed or replaced, and
    the runs of words taken out of a string it rewrote."""
    for op in ops:
        kind, path = op.get("op"), str(op.get("path", ""))
        if kind not in ("remove", "replace"):
            continue
        old = at_pointer(before, path)
        if old is ABSENT:
            continue
        if kind == "remove":
            if isinstance(at_pointer(before, path.rpartition("/")[0]), dict):
                _add_text(path.rpartition("/")[2].replace("~1", "/").replace("~0", "~"), into)
            leaves_of(old, into)
        elif isinstance(old, str) and isinstance(op.get("value"), str):
            removed_from(old, op["value"], into)
        else:
            kept: set[str] = set()
            leaves_of(op.get("value"), kept)
            gone: set[str] = set()
            leaves_of(old, gone)
            into.update(gone - kept)


def removed_from(before: str, after: str, into: set[str]) -> None:
    """Add to `into` the runs of `before` that `after` does not share (each stripped of spaces)."""
    if len(before) + len(after) > _MAX_ALIGNED:  # too long to align: the words it has fewer of
        for word in Counter(_TOKEN.findall(before)) - Counter(_TOKEN.findall(after)):
            _add_text(word, into)
        return
    spans = ((i, i + n) for i, _, n in matched_spans(before, after))
    for start, end in _unmatched(before, spans):
        _add_text(before[start:end], into)


def leaves_of(value: Any, into: set[str]) -> None:
    """The strings, keys and numbers (as JSON text) in `value`."""
    if isinstance(value, str):
        _add_text(value, into)
    elif isinstance(value, dict):
        for key, item in value.items():
            _add_text(str(key), into)
            leaves_of(item, into)
    elif isinstance(value, list | tuple):
        for item in value:
            leaves_of(item, into)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _add_text(_number_text(value), into)


def _add_text(text: str, into: set[str]) -> None:
    text = text.strip()
    if text and has_word(text):
        into.add(text)


def _number_text(value: float) -> str:
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:  # an integer past 64 bits
        return str(value)


class Masker:
    """Withholds every occurrence of the given texts from strings (rule 2)."""

    def __init__(self, texts: Iterable[str]) -> None:
        self.texts = frozenset(texts)
        parts = [re.escape(t) for t in sorted(self.texts, key=len, reverse=True) if len(t) >= _SUBSTRING_MIN]
        parts += [rf"(?<![^\W_]){re.escape(t)}(?![^\W_])" for t in self.texts if len(t) < _SUBSTRING_MIN]
        self._pattern = re.compile("|".join(parts)) if parts else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def text(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(WITHHELD, text)

    def value(self, value: Any) -> Any:
        """`value` with every string (keys too) masked, and a number whose JSON text was removed withheld."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(key)): self.value(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(item) for item in value]
        if isinstance(value, int | float) and not isinstance(value, bool) and _number_text(value) in self.texts:
            return WITHHELD
        return value


# -- rule 1: what a mutation wrote that the final payload still holds --------------------------------------


def kept_value(value: Any, final: Any, before: Any = ABSENT, *, shadow: bool = False) -> Any:
    """`value` (what a mutation wrote) with what `final` (the payload at the same place) does not hold
    withheld; a `shadow` mutation also keeps what it put in itself (what `before`, its input there, lacks)."""
    if isinstance(value, str):
        own = (before if isinstance(before, str) else "") if shadow else None
        return kept_text(value, final if isinstance(final, str) else "", own)
    if isinstance(value, dict):
        finals = final if isinstance(final, dict) else {}
        befores = before if isinstance(before, dict) else {}
        return {
            key: kept_value(item, finals.get(key, ABSENT), befores.get(key, ABSENT), shadow=shadow)
            for key, item in value.items()
        }
    if isinstance(value, list | tuple):
        finals_list = final if isinstance(final, list | tuple) else ()
        befores_list = before if isinstance(before, list | tuple) else ()
        return [
            kept_value(
                item,
                _item(finals_list, index),
                _item(befores_list, index),
                shadow=shadow,
            )
            for index, item in enumerate(value)
        ]
    if value is None or isinstance(value, bool):
        return value
    if final is not ABSENT and same_json(value, final):
        return value
    if shadow and (before is ABSENT or not same_json(value, before)):
        return value
    return WITHHELD


def _item(items: Sequence[Any], index: int) -> Any:
    return items[index] if index < len(items) else ABSENT


def kept_text(text: str, final: str, before: str | None = None) -> str:
    """`text` with the runs that `final` does not share withheld (runs `before` lacks are kept: inserted)."""
    if text == final or not text:
        return text
    spans = [(i, i + n) for i, _, n in matched_spans(text, final)]
    if before is not None:
        shared = [(i, i + n) for i, _, n in matched_spans(text, before)]
        spans += _unmatched(text, shared)
    parts, at = [], 0
    for start, end in _unmatched(text, spans):
        parts.append(text[at:start])
        run = text[start:end]
        parts.append(run if not has_word(run) else WITHHELD)
        at = end
    parts.append(text[at:])
    return "".join(parts)


def at_pointer(document: Any, pointer: str) -> Any:
    """The value at an RFC 6901 pointer, or `ABSENT`."""
    if pointer == "":
        return document
    for token in pointer[1:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(document, dict):
            if token not in document:
                return ABSENT
            document = document[token]
        elif isinstance(document, list | tuple) and token.isdigit() and int(token) < len(document):
            document = document[int(token)]
        else:
            return ABSENT
    return document


def withhold_diff(
    ops: Sequence[Mapping[str, Any]],
    final: Any,
    masker: Masker,
    before: Any = ABSENT,
    *,
    shadow: bool = False,
) -> list[dict[str, Any]]:
    """A mutation's diff as the record keeps it: rule 1 against `final` (`None` for a leg that went nowhere:
    every value withheld), then rule 2 on values and paths. A `shadow` mutation's `before` is its input."""
    kept: list[dict[str, Any]] = []
    for op in ops:
        entry = dict(op)
        if "path" in entry:
            entry["path"] = masker.text(str(entry["path"]))
        if "value" in op:
            path = str(op.get("path", ""))
            if final is None:
                entry["value"] = WITHHELD
            else:
                own = at_pointer(before, path) if shadow else ABSENT
                entry["value"] = masker.value(kept_value(op["value"], at_pointer(final, path), own, shadow=shadow))
        kept.append(entry)
    return kept
