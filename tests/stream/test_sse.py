"""The SSE decoder against the HTML standard's rules, with input split at every boundary."""

from __future__ import annotations

import pytest

from streamslo.stream.sse import SSEDecoder, SSEProtocolError


def decode(data: bytes, splits: list[int] | None = None) -> list[tuple[str, str, str | None]]:
    dec = SSEDecoder()
    pieces = []
    if splits is None:
        pieces = [data]
    else:
        prev = 0
        for s in splits:
            pieces.append(data[prev:s])
            prev = s
        pieces.append(data[prev:])
    out = []
    for p in pieces:
        out += [(e.event, e.data, e.id) for e in dec.feed(p)]
    return out


STREAMS = {
    "lf": b"data: a\n\ndata: b\n\n",
    "crlf": b"data: a\r\n\r\ndata: b\r\n\r\n",
    "cr": b"data: a\r\rdata: b\r\r",
    "mixed": b"data: a\r\n\ndata: b\r\r\n",
}


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_line_endings_split_everywhere(name):
    data = STREAMS[name]
    expected = [("message", "a", None), ("message", "b", None)]
    assert decode(data) == expected
    for i in range(len(data) + 1):
        assert decode(data, [i]) == expected, f"split at {i}"
    assert decode(data, list(range(1, len(data)))) == expected  # one byte at a time


def test_crlf_split_between_cr_and_lf_is_one_line_end():
    # "data: a\r" | "\n\r\n": without the pending-CR rule this would dispatch twice.
    assert decode(b"data: a\r\n\r\n", [8]) == [("message", "a", None)]
    assert decode(b"data: x\r\ndata: y\r\n\r\n", [8]) == [("message", "x\ny", None)]


def test_multiline_data_comments_fields():
    data = b": comment\nevent: tick\nid: 7\nretry: 100\ndata: {\"a\":\ndata:  1}\n\n"
    assert decode(data) == [("tick", '{"a":\n 1}', "7")]


def test_field_without_space_and_without_colon():
    assert decode(b"data:x\n\ndata\n\n") == [("message", "x", None), ("message", "", None)]


def test_event_without_data_is_not_dispatched_and_fields_reset():
    assert decode(b"event: a\n\ndata: b\n\n") == [("message", "b", None)]


def test_unfinished_event_at_end_is_not_dispatched():
    dec = SSEDecoder()
    assert dec.feed(b"data: partial\n") == []
    assert dec.in_event


def test_bom_is_skipped_even_when_split():
    assert decode(b"\xef\xbb\xbfdata: a\n\n", [1]) == [("message", "a", None)]
    assert decode(b"\xef\xbb\xbfdata: a\n\n", [2]) == [("message", "a", None)]


def test_other_unicode_line_breaks_are_not_line_ends():
    data = "data: a\x0bb\u2028c\x85d\x0ce\n\n".encode()
    assert decode(data) == [("message", "a\x0bb\u2028c\x85d\x0ce", None)]


def test_utf8_split_inside_a_character():
    data = "data: héllo €\n\n".encode()
    for i in range(len(data) + 1):
        assert decode(data, [i]) == [("message", "héllo €", None)]


def test_id_with_nul_is_ignored():
    assert decode(b"id: 1\ndata: a\n\nid: x\x00y\ndata: b\n\n") == [("message", "a", "1"), ("message", "b", "1")]


def test_endless_line_is_bounded():
    dec = SSEDecoder(max_event_bytes=1000)
    with pytest.raises(SSEProtocolError):
        for _ in range(100):
            dec.feed(b"x" * 100)
    assert dec.pending_bytes <= 1100


def test_giant_event_is_refused():
    dec = SSEDecoder(max_event_bytes=1000)
    with pytest.raises(SSEProtocolError):
        dec.feed(b"data: " + b"y" * 600 + b"\ndata: " + b"y" * 600 + b"\n")
