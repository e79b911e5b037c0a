"""RFC 8785 (JCS) canonical JSON: the bytes that audit records and signed validation results are hashed over.

Pure: no IO, no keys. `audit` hashes records with it and `signatures` signs interceptor results with it, so
both layers (and any third-party verifier following RFC 8785) agree byte for byte. The bytes come from
orjson with RFC 8785's key order and number rules, cross-checked against the `rfc8785` package by the tests.
"""

from __future__ import annotations

from typing import Any, Final

import orjson
import rfc8785

from mcp_interceptors.protocol.errors import InterceptorsError

_MAX_SAFE_INT: Final = 2**53 - 1


class CanonicalizationError(InterceptorsError, ValueError):
    """A value has no RFC 8785 form (NaN, infinity, an integer beyond the doubles, a non-JSON type or a
    non-string key). `path` holds the keys and indexes that lead to it (empty for the value itself)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.path: list[str | int] = []

    @property
    def field(self) -> str | None:
        """The path as dotted text (`params.arguments.x`, list indexes as numbers), or None at the top."""
        return ".".join(str(part) for part in self.path) or None


def canonical_json(value: Any) -> bytes:
    """RFC 8785 bytes for a JSON value; tuples count as arrays, integers beyond 2**53 as IEEE doubles."""
    try:
        return orjson.dumps(_prepare(value), option=orjson.OPT_SORT_KEYS)
    except _AstralKeyError:
        # orjson sorts keys by code point; RFC 8785 sorts by UTF-16 unit. They differ only past U+FFFF.
        return _canonical_slow(value)
    except orjson.JSONEncodeError as exc:
        raise CanonicalizationError(str(exc)) from exc


class _AstralKeyError(Exception):
    pass


def _prepare(value: Any) -> Any:
    """Return `value` unchanged when orjson already emits RFC 8785 bytes for it, else a patched copy."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return value
    if kind is int:
        return value if -_MAX_SAFE_INT <= value <= _MAX_SAFE_INT else _number_fragment(_as_double(value))
    if kind is float:
        return _number_fragment(value)
    if kind is dict:
        patched: dict[str, Any] | None = None
        for key, item in value.items():
            if type(key) is not str:
                raise CanonicalizationError(f"object key {key!r} is not a string")
            if not key.isascii() and max(key) > "\uffff":
                raise _AstralKeyError
            leaf = type(item)
            # Inline, not a call: most of a payload is leaves orjson already writes as RFC 8785 does.
            if leaf is str or item is None or leaf is bool or (leaf is int and -_MAX_SAFE_INT <= item <= _MAX_SAFE_INT):
                continue
            try:
                new = _prepare(item)
            except CanonicalizationError as exc:
                exc.path.insert(0, key)
                raise
            if new is not item:
                patched = patched if patched is not None else dict(value)
                patched[key] = new
        return value if patched is None else patched
    if kind is list or kind is tuple:
        items: list[Any] | None = None
        for index, item in enumerate(value):
            leaf = type(item)
            if leaf is str or item is None or leaf is bool or (leaf is int and -_MAX_SAFE_INT <= item <= _MAX_SAFE_INT):
                continue
            try:
                new = _prepare(item)
            except CanonicalizationError as exc:
                exc.path.insert(0, index)
                raise
            if new is not item:
                items = items if items is not None else list(value)
                items[index] = new
        return value if items is None else items
    raise CanonicalizationError(f"{kind.__name__} is not a JSON value")


def _as_double(value: int) -> float:
    """The IEEE double nearest to `value`; past the largest double there is none (JavaScript sees Infinity)."""
    try:
        return float(value)
    except OverflowError:
        raise CanonicalizationError(
            f"an integer of {value.bit_length()} bits is beyond the largest IEEE double (about 1.8e308)"
        ) from None


def _number_fragment(number: float) -> orjson.Fragment:
    if 1e-4 <= abs(number) < 1e16:
        # Here repr() already gives ECMAScript's shortest round-trip digits in plain notation,
        # except that it keeps a ".0" on integral values.
        text = repr(number)
        return orjson.Fragment(text[:-2] if text.endswith(".0") else text)
    try:
        return orjson.Fragment(rfc8785.dumps(number))
    except rfc8785.CanonicalizationError as exc:
        raise CanonicalizationError(str(exc)) from exc


def _coerce_big_ints(value: Any) -> Any:
    if type(value) is int and not -_MAX_SAFE_INT <= value <= _MAX_SAFE_INT:
        return _as_double(value)
    if isinstance(value, dict | list | tuple):
        pairs = value.items() if isinstance(value, dict) else enumerate(value)
        coerced: dict[Any, Any] = {}
        for key, item in pairs:
            try:
                coerced[key] = _coerce_big_ints(item)
            except CanonicalizationError as exc:
                exc.path.insert(0, key)
                raise
        return coerced if isinstance(value, dict) else list(coerced.values())
    return value


def _canonical_slow(value: Any) -> bytes:
    try:
        return rfc8785.dumps(_coerce_big_ints(value))
    except rfc8785.CanonicalizationError as exc:
        raise CanonicalizationError(str(exc)) from exc
