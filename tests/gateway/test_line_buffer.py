"""Newline-delimited JSON over stdio: cutting a byte stream into lines, however it is chunked, and parsing them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_interceptors.gateway.jsonrpc.framing import LineBuffer, LineTooLongError, encode_line, loads


@given(st.lists(st.sampled_from([b"a", b"bc", b"\n", b"", b"{}", b"\n\n"]), max_size=30), st.data())
def test_lines_do_not_depend_on_how_the_stream_is_chunked(pieces: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(pieces)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    buffer = LineBuffer()
    lines = [line for chunk in chunks if chunk for line in buffer.feed(chunk)]
    assert lines == stream.split(b"\n")[:-1]  # the unterminated tail waits for its newline


def test_a_long_line_arrives_whole_once_its_newline_does() -> None:
    buffer = LineBuffer()
    body = b"x" * (1 << 16)
    assert all(buffer.feed(body) == [] for _ in range(64))  # 4 MB without a newline: nothing yet
    assert buffer.feed(b'"}\n{"next') == [body * 64 + b'"}']
    assert buffer.feed(b'": 1}\n') == [b'{"next": 1}']


@pytest.mark.parametrize("number", [2**64 + 1, -(2**63) - 1, 10**400])
def test_a_line_keeps_every_integer_exact(number: int) -> None:
    """JSON numbers have no size limit: what the client sent is what goes upstream, digit for digit."""
    line = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"n":%d}}' % number
    message = loads(line)
    assert message["params"]["n"] == number
    assert encode_line(message) == line + b"\n"


def test_a_line_nested_past_200_levels_is_still_parsed() -> None:
    """The gateway answers a payload nested too deep itself (-32602 naming the field): it must parse."""
    assert loads(b"[" * 300 + b"]" * 300) is not None


@pytest.mark.parametrize("line", [b"{not json", b'{"n": NaN}', b'{"n": Infinity}', b"\xff"])
def test_a_line_that_is_not_json_is_a_value_error(line: bytes) -> None:
    with pytest.raises(ValueError):
        loads(line)


def test_a_line_over_the_limit_raises_before_more_is_held() -> None:
    """A peer that never sends a newline once grew the gateway's memory without bound."""
    buffer = LineBuffer(max_line_bytes=1000)
    assert buffer.feed(b"x" * 600) == []
    with pytest.raises(LineTooLongError) as caught:
        buffer.feed(b"x" * 600)
    assert caught.value.limit == 1000
    assert caught.value.lines == []
    assert str(caught.value) == "a message longer than the limit of 1000 bytes"


def test_the_lines_before_one_over_the_limit_are_kept() -> None:
    buffer = LineBuffer(max_line_bytes=10)
    with pytest.raises(LineTooLongError) as caught:
        buffer.feed(b'{"a":1}\n' + b"y" * 11 + b"\n{}\n")
    assert caught.value.lines == [b'{"a":1}']
    assert LineBuffer(max_line_bytes=10).feed(b"y" * 10 + b"\n" + b"z" * 10) == [b"y" * 10]  # at the limit: fine
