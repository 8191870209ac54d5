"""The HTTP/1.1 response reader: framing split anywhere, and unfinished bodies told apart."""

from __future__ import annotations

import pytest

from streamslo.stream.http1 import HTTPProtocolError, ResponseReader

CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n"
)


def feed_all(data: bytes, step: int) -> tuple[ResponseReader, bytes]:
    r = ResponseReader()
    body = b""
    for i in range(0, len(data), step):
        body += r.feed(data[i : i + step])
    return r, body


@pytest.mark.parametrize("step", [1, 2, 3, 7, 1000])
def test_chunked_split_anywhere(step):
    r, body = feed_all(CHUNKED, step)
    assert r.head is not None and r.head.status == 200
    assert r.head.content_type == "text/event-stream"
    assert body == b"hello world"
    assert r.complete


def test_unfinished_chunked_body_is_not_complete():
    r, _ = feed_all(CHUNKED[:-10], 1000)
    assert not r.complete
    assert not r.framed_by_close


def test_content_length_and_close_framing():
    r, body = feed_all(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcdef", 2)
    assert body == b"abc" and r.complete
    r, body = feed_all(b"HTTP/1.1 200 OK\r\n\r\nabc", 2)
    assert body == b"abc" and not r.complete and r.framed_by_close


@pytest.mark.parametrize(
    "bad",
    [b"HTTX/1.1 200 OK\r\n\r\n", b"HTTP/1.1 2x0 OK\r\n\r\n", b"HTTP/1.1 200 OK\r\nnocolon\r\n\r\n"],
)
def test_bad_heads(bad):
    with pytest.raises(HTTPProtocolError):
        ResponseReader().feed(bad)


def test_bad_chunk_size():
    r = ResponseReader()
    with pytest.raises(HTTPProtocolError):
        r.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")


def test_interim_responses_are_skipped():
    data = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\n" + CHUNKED
    for step in (1, 5, 1000):
        r, body = feed_all(data, step)
        assert r.head is not None and r.head.status == 200
        assert body == b"hello world" and r.complete


@pytest.mark.parametrize("step", [1, 5, 1000])
def test_obsolete_line_folding_reads_as_one_space(step):
    """RFC 9112 5.2: a user agent reads an obs-fold as SP (a server may still send one)."""
    data = b"HTTP/1.1 200 OK\r\nX-A: one \r\n  two\r\n\tthree\r\nContent-Length: 2\r\n\r\nok"
    r, body = feed_all(data, step)
    assert r.head is not None and r.head.headers["x-a"] == "one two three"
    assert body == b"ok" and r.complete


@pytest.mark.parametrize("fold", [b" x-a: 1", b"\tx-a: 1"])
def test_a_fold_with_no_header_before_it_is_an_error(fold):
    with pytest.raises(HTTPProtocolError, match="no header before it"):
        ResponseReader().feed(b"HTTP/1.1 200 OK\r\n" + fold + b"\r\nContent-Length: 0\r\n\r\n")
