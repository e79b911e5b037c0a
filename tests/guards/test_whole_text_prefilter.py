"""The whole-payload test (`_scanning._nothing_to_find` on `_walk.verbatim_json`) only ever skips payloads
in which reading the strings one by one finds nothing.

Each case runs `redact_payload` and `find_in_payload` twice, with the test and with it switched off, and
both must agree: redacted payload, counts, paths and hits. The payloads are big enough (many strings)
for the test to be tried, and hold what it must not miss: values cut across string edges, keys, blobs,
escapes, integers and floats that carry card numbers.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcp_interceptors.guards import _scanning, _whole_text
from mcp_interceptors.guards._detectors import PiiScanner, SecretScanner
from mcp_interceptors.guards._detectors._engine import ScanText, re2
from mcp_interceptors.guards._scanning import TextScanner, find_in_payload, redact_payload
from mcp_interceptors.guards._walk import string_values, verbatim_json, verbatim_json_bytes

pytestmark = pytest.mark.skipif(re2 is None, reason="the whole-text test needs google-re2")

AWS = "AKIAQYLPMN5HHHFPZAM2"
CARD = "4111111111111111"
SCANNERS = {
    "secrets": TextScanner(SecretScanner(), min_length=12),
    "pii": TextScanner(PiiScanner(), min_length=6, integers=True),
}
TRICKY: list[Any] = [
    f"key {AWS} here",
    "mail jane.roe@example.org now",
    f"card {CARD}",
    "call +44 20 7946 0958",
    "host 10.0.0.1 up",
    base64.b64encode(f"the key is {AWS}".encode()).decode(),
    base64.b64encode(b"write to jane.roe@example.org please").decode(),
    base64.encodebytes(f"wrapped {AWS} in lines".encode()).decode(),
    "jane.roe%40example.org",
    "jane.roe&#64;example.org",
    f"line one\n{AWS}\tafter a tab\r\n",
    'a "quoted" AKIAQYLPMN5HHHFPZAM2',
    "back\\slash jane.roe@example.org",
    "caf\u00e9 jane.roe@example.org",
    "AKIAQYLPMN5HHHFPZAM2"[:10],
    int(CARD),
    float(CARD),
    4.111111111111111e15,
    1e16,
    -int(CARD),
    "password = 'Zx8kq2LmP9wR4tYvB7nQ'",
    "0123456789abcdef0123456789abcdef",
]
PLAIN = ["row-1", "lorem ipsum dolor sit amet", "tools/call", "ok", 12, 3.5, True, None, "the server config value"]


@contextmanager
def whole_text_test(enabled: bool) -> Iterator[None]:
    original = _scanning._nothing_to_find
    if not enabled:
        _scanning._nothing_to_find = lambda *args: False  # type: ignore[assignment]
    try:
        yield
    finally:
        _scanning._nothing_to_find = original


def outcomes(payload: Any, scanner: TextScanner, *, keys: bool) -> tuple[Any, ...]:
    new, counts, paths = redact_payload(payload, scanner, "[{kind}]")
    hits = [(hit.path, hit.kind, hit.value) for hit in find_in_payload(payload, scanner, include_keys=keys)]
    return new, dict(counts), paths, hits


def assert_same_either_way(payload: Any) -> None:
    for scanner in SCANNERS.values():
        for keys in (False, True):
            with whole_text_test(True):
                fast = outcomes(payload, scanner, keys=keys)
            with whole_text_test(False):
                plain = outcomes(payload, scanner, keys=keys)
            assert fast == plain


def rows(extra: Any = "plain words", at: int = 17, key: str = "note") -> dict[str, Any]:
    items: list[dict[str, Any]] = [{"id": i, "name": f"row-{i}", "note": "lorem ipsum"} for i in range(60)]
    items[at][key] = extra
    return {"method": "tools/call", "params": {"name": "echo", "arguments": {"rows": items}}}


def test_a_clean_payload_of_many_strings_is_ruled_out_whole() -> None:
    payload = rows()
    payload["params"]["structuredContentAsALongName"] = "x"  # a long key is no blob
    for name, scanner in SCANNERS.items():
        assert _scanning._nothing_to_find(payload, scanner, False), name
        assert redact_payload(payload, scanner, "[{kind}]")[0] is payload


@pytest.mark.parametrize("value", TRICKY, ids=lambda v: repr(v)[:40])
def test_each_tricky_value_among_many_strings_is_found_as_the_string_walk_finds_it(value: Any) -> None:
    assert_same_either_way(rows(value))


@pytest.mark.parametrize("value", [AWS, CARD, "jane.roe@example.org", base64.b64encode(AWS.encode()).decode()])
def test_a_value_in_a_key_is_found_when_keys_are_scanned(value: str) -> None:
    payload = rows()
    payload["params"]["arguments"]["rows"][3][value] = "x"
    assert_same_either_way(payload)


def test_a_float_with_an_exponent_is_read_as_its_digits() -> None:
    payload = rows(4.111111111111111e15)
    assert "e+" in (verbatim_json(rows(1e16)) or "")  # orjson writes the exponent's sign
    with whole_text_test(True):
        new, counts, _ = redact_payload(payload, SCANNERS["pii"], "[{kind}]")
    assert counts == {"credit_card": 1}
    assert new["params"]["arguments"]["rows"][17]["note"] == "[credit_card]"


def test_verbatim_json_holds_every_string_as_it_is_or_gives_up() -> None:
    payload = rows("tab\there\nand a line")
    text = verbatim_json(payload)
    assert text is not None
    for value in string_values(payload, include_keys=True, include_integers=True):
        assert value in text
    for hostile in ['a "quote"', "a \\ backslash", "caf\u00e9", "bell\x07", "\ud800", b"bytes", {1: "int key"}]:
        assert verbatim_json({"v": hostile}) is None


json_values = st.recursive(
    st.sampled_from([*TRICKY, *PLAIN]) | st.text(max_size=12) | st.integers() | st.floats(allow_nan=False),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.sampled_from(["a", "b", "note", AWS]), inner),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(st.lists(json_values, min_size=1, max_size=4), st.integers(0, 59))
def test_any_payload_is_found_as_the_string_walk_finds_it(values: list[Any], at: int) -> None:
    payload = rows(values, at=at)
    payload["params"]["arguments"]["more"] = values
    assert_same_either_way(payload)


def assert_one_pass_says_no_only_where_each_test_does(payload: Any) -> None:
    """The scanner's one combined regex (`clean_text_filter`) matches nowhere only where the readings test and
    `may_find`, run one by one, both say no: so `rules_out` gives the same answer either way."""
    data = verbatim_json_bytes(payload)
    if data is None:
        return
    scan = ScanText(data.decode("ascii"))
    for name, scanner in SCANNERS.items():
        for keys in (False, True):
            for integers in (False, True):
                combined = scanner.scanner.clean_text_filter(_whole_text._READING_SOURCES[keys, integers])
                if combined.search(data) is None:
                    assert not _whole_text._readable(data, keys, integers), (name, keys, integers)
                    assert not scanner.scanner.may_find(scan), (name, keys, integers)


@pytest.mark.parametrize("value", [*TRICKY, *PLAIN, "x" * 16, "k" * 15, "1e5", "2E-3", "a%b", "a&b"], ids=repr)
def test_the_one_pass_says_no_only_where_each_test_does(value: Any) -> None:
    assert_one_pass_says_no_only_where_each_test_does(rows(value))
    assert_one_pass_says_no_only_where_each_test_does({"k": value, "run" * 6: 1})
    if isinstance(value, str):
        assert_one_pass_says_no_only_where_each_test_does({value: "x", "n": 1})


@settings(max_examples=150, deadline=None)
@given(st.lists(json_values, min_size=1, max_size=4), st.text('ab1e+-":%&=/\n ', max_size=40))
def test_the_one_pass_says_no_only_where_each_test_does_on_any_payload(values: list[Any], noise: str) -> None:
    assert_one_pass_says_no_only_where_each_test_does({"values": values, "noise": noise, noise: noise})


def test_a_clean_payload_is_ruled_out_in_one_pass() -> None:
    data = verbatim_json_bytes(rows())
    assert data is not None
    for scanner in SCANNERS.values():
        for keys in (False, True):
            assert scanner.scanner.clean_text_filter(_whole_text._READING_SOURCES[keys, True]).search(data) is None


@pytest.mark.parametrize("limit", [0, 1, 5, 32])
def test_string_values_within_gives_all_strings_up_to_the_limit_and_none_past_it(limit: int) -> None:
    from mcp_interceptors.guards._walk import string_values_within

    for count in range(0, 40, 3):
        payload: dict[str, Any] = {"n": 7, "items": [{"s": f"s{i}", "i": i} for i in range(count)]}
        for integers in (False, True):
            everything = string_values(payload, include_integers=integers)
            within = string_values_within(payload, limit, include_integers=integers)
            assert within == (everything if len(everything) <= limit else None)
    assert string_values_within("one string", 1) == ["one string"]
    deep: Any = "leaf"
    for _ in range(200):
        deep = [deep]
    assert string_values_within({"deep": deep}, 5) is None


LONG_PROSE = "lorem ipsum dolor sit amet " * 80  # past `_LONG_TEXT`: a few long strings are read whole first


@pytest.mark.parametrize("value", TRICKY, ids=lambda v: repr(v)[:40])
def test_a_long_text_of_few_strings_is_found_as_the_string_walk_finds_it(value: Any) -> None:
    assert_same_either_way({"content": [{"type": "text", "text": f"{LONG_PROSE}{value} {LONG_PROSE}"}]})
    assert_same_either_way({"text": LONG_PROSE, "value": value})


def test_a_clean_long_text_of_few_strings_is_ruled_out_whole() -> None:
    payload = {"content": [{"type": "text", "text": LONG_PROSE}], "isError": False}
    for name, scanner in SCANNERS.items():
        assert _scanning._strings_to_scan(payload, scanner, False) is None, name
    short = {"content": [{"type": "text", "text": LONG_PROSE[:200]}]}
    assert _scanning._strings_to_scan(short, SCANNERS["pii"], False) == ["text", LONG_PROSE[:200]]
