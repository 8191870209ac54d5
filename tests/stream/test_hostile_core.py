"""Hostile bytes against the Sans-I/O core: each known defect of the reader, the decoder and
the tracker, with the outcome it must end in (docs/outcomes.md, "Hostile input").

Every case here froze, raised or grew memory before the hardening; each now ends in one
outcome (or a :class:`~streamslo.errors.ProtocolError` from the reader), in bounded time.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Iterator

import pytest

from streamslo.errors import ProtocolError
from streamslo.stream.http1 import HTTPProtocolError, ResponseReader
from streamslo.stream.sse import SSEDecoder
from streamslo.stream.timing import StreamExpectations, StreamRecord
from streamslo.stream.tracker import StreamTracker
from tests.stream.feed import Feed

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
CHUNKED = HEAD + b"Transfer-Encoding: chunked\r\n\r\n"


@contextlib.contextmanager
def within(seconds: float) -> Iterator[None]:
    """Fail (instead of hanging the suite) when the block runs longer than ``seconds``."""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"still running after {seconds} s: the code loops")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def feed(data: bytes, step: int = 1 << 16) -> tuple[ResponseReader, bytes]:
    reader = ResponseReader()
    body = b""
    for i in range(0, len(data), step):
        body += reader.feed(data[i : i + step])
    return reader, body


# --- HTTP/1.1: numbers, framing, heads ------------------------------------------------------


@pytest.mark.parametrize(
    "size", [b"-6", b"0x10", b"+1", b"1_0", b" 1", b"1 1", b"", b"g", b"1" * 17]
)
def test_chunk_size_is_1_star_hexdig(size):
    """``int(size, 16)`` took all of these; a negative size moved the reader backwards for
    ever (every greenlet of the process froze)."""
    with within(2.0), pytest.raises(HTTPProtocolError, match="chunk"):
        feed(CHUNKED + size + b"\r\nabcdef\r\n0\r\n\r\n")


def test_chunk_sizes_and_extensions_that_are_valid():
    data = (
        CHUNKED + b"A;name=value\r\n0123456789\r\n00000005 ;x\r\nhello\r\n0\r\nTrailer: t\r\n\r\n"
    )
    for step in (1, 3, 1000):
        reader, body = feed(data, step)
        assert body == b"0123456789hello" and reader.complete


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        (b"Content-Length: -5\r\n", "Content-Length"),
        (b"Content-Length: +5\r\n", "Content-Length"),
        (b"Content-Length: 0x5\r\n", "Content-Length"),
        (b"Content-Length: 5\r\nContent-Length: 7\r\n", "Content-Length"),
        (b"Content-Length: 5\r\nContent-Length: 5\r\n", "Content-Length"),
        (b"Content-Length: 5, 5\r\n", "Content-Length"),
        (b"Content-Length: " + b"9" * 40 + b"\r\n", "Content-Length"),
        (b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", "Transfer-Encoding"),
        (b"Transfer-Encoding: gzip, chunked\r\n", "Transfer-Encoding"),
        (b"Transfer-Encoding: chunked, chunked\r\n", "Transfer-Encoding"),
        (b"X-A: a\x00b\r\n", "header"),
        (b"X-A: a\rb\r\n", "header"),
        (b"X-A : 1\r\n", "header"),
        (b"\r\n", ""),  # an empty line ends the head early: the head itself is fine
    ],
)
def test_bad_headers_are_protocol_errors(headers, why):
    data = HEAD + headers + b"\r\nhello"
    if not why:
        reader, _ = feed(data)
        assert reader.head is not None
        return
    with pytest.raises(HTTPProtocolError, match=why):
        feed(data)


@pytest.mark.parametrize(
    "line",
    [
        b"HTTP/1.1 " + b"2" * 5000 + b" OK",
        b"HTTP/1.1 0200 OK",
        b"HTTP/1.1 20 OK",
        b"HTTP/1.1 +20 OK",
        b"HTTP/1.1 2_00 OK",
        b"HTTP/2 200 OK",
        b"HTTP/1.1 200 O\x00K",
        b"\x16\x03\x01\x02\x00",
    ],
)
def test_status_line_is_strict(line):
    """A 5,000-digit code raised ValueError out of the reader (and so out of the user)."""
    with pytest.raises(HTTPProtocolError, match="status line"):
        feed(line + b"\r\n\r\n")


def test_status_line_without_reason_is_accepted():
    reader, _ = feed(b"HTTP/1.1 204\r\n\r\n")
    assert reader.head is not None and reader.head.status == 204 and reader.complete


def test_a_thousand_interim_heads_in_one_read_are_capped():
    """Each interim head recursed once: ~1,000 in one read raised RecursionError."""
    data = b"HTTP/1.1 100 Continue\r\n\r\n" * 1000 + CHUNKED + b"0\r\n\r\n"
    with within(2.0), pytest.raises(HTTPProtocolError, match="interim"):
        feed(data)


def test_a_few_interim_heads_are_skipped():
    data = b"HTTP/1.1 100 Continue\r\n\r\n" * 5 + CHUNKED + b"2\r\nok\r\n0\r\n\r\n"
    reader, body = feed(data, 7)
    assert reader.head is not None and reader.head.status == 200 and body == b"ok"


def test_head_is_capped():
    with pytest.raises(HTTPProtocolError, match="head"):
        feed(HEAD + b"X-Pad: " + b"a" * 70_000 + b"\r\n\r\n")


def test_head_drip_is_linear():
    """One byte per read: the reader rescanned and copied its whole buffer on every read."""
    data = HEAD + b"X-Pad: " + b"a" * 60_000 + b"\r\n\r\n"
    reader = ResponseReader()
    t0 = time.process_time()
    for i in range(len(data)):
        reader.feed(data[i : i + 1])
    cpu = time.process_time() - t0
    assert reader.head is not None
    assert cpu < 0.5, f"{len(data)} one-byte reads of a head cost {cpu:.2f} s of CPU"


# --- SSE decoder ---------------------------------------------------------------------------


def test_sse_drip_is_linear():
    """40k one-byte reads of one line cost 1.2 s (the pending buffer was copied per read)."""
    dec = SSEDecoder(max_event_bytes=1 << 20)
    data = b"data: " + b"x" * 120_000
    t0 = time.process_time()
    for i in range(len(data)):
        assert dec.feed(data[i : i + 1]) == []
    cpu = time.process_time() - t0
    assert dec.pending_bytes == len(data)
    assert cpu < 1.0, f"120k one-byte reads cost {cpu:.2f} s of CPU"


def test_retry_field_with_5000_digits_is_ignored():
    dec = SSEDecoder()
    events = dec.feed(b"retry: " + b"9" * 5000 + b"\ndata: x\n\n")
    assert [e.data for e in events] == ["x"]
    assert events[0].retry is None


def test_line_cap_holds_without_a_line_end():
    dec = SSEDecoder(max_event_bytes=1000)
    with pytest.raises(ProtocolError):
        for _ in range(100):
            dec.feed(b"x" * 64)
    assert dec.pending_bytes <= 1000 + 64


# --- the tracker: nothing raises, everything ends in one outcome ----------------------------


def chunk_bytes(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def tracker(protocol: str = "sse", max_tokens: int = 3) -> tuple[StreamTracker, StreamRecord]:
    rec = StreamRecord("s", protocol, "T", 1000.0, 10.0)
    tr = Feed(StreamTracker(rec, StreamExpectations(max_tokens=max_tokens)))
    if protocol == "sse":
        tr.on_response(10.01, 200, "text/event-stream")
    else:
        tr.on_ws_accepted(10.01)
    return tr, rec


def test_deep_json_is_malformed_not_recursion_error():
    tr, rec = tracker()
    tr.on_sse_bytes(10.1, b"data: " + b"[" * 100_000 + b"]" * 100_000 + b"\n\n")
    assert rec.outcome == "malformed"
    assert "deep" in rec.error


def test_deep_json_in_an_error_body_is_still_an_http_error():
    tr, rec = tracker()
    tr.on_http_error(10.1, 500, b"[" * 50_000)
    assert rec.outcome == "http_5xx"


@pytest.mark.parametrize("const", ["Infinity", "-Infinity", "NaN", "1e400"])
def test_non_finite_numbers_never_overflow(const):
    """``int(float('inf'))`` raised OverflowError out of the tracker (the user died)."""
    for protocol in ("sse", "ws"):
        tr, rec = tracker(protocol)
        text = '{"error": {"message": "x", "code": ' + const + "}}"
        if protocol == "sse":
            tr.on_sse_bytes(10.1, b"data: " + text.encode() + b"\n\n")
        else:
            tr.on_ws_text(10.1, text)
        assert rec.outcome is not None
        if const == "1e400":  # valid JSON: an error whose code is no status
            assert rec.outcome in ("error_event", "http_5xx")
        else:
            assert rec.outcome == "malformed", rec.error


def test_flood_after_done_is_capped_and_malformed():
    """After [DONE] a size error was ignored and the decoder's buffer grew at line rate."""
    tr, rec = tracker()
    ok = b"".join(
        chunk_bytes(
            {
                "choices": [
                    {"delta": {"content": f"t{i}"}, "finish_reason": "length" if i == 2 else None}
                ]
            }
        )
        for i in range(3)
    )
    tr.on_sse_bytes(10.1, ok + b"data: [DONE]\n\n")
    assert rec.outcome == "ok" and tr.done
    for _ in range(500):  # 32 MB offered; the tracker must stop wanting more long before
        tr.on_sse_bytes(10.2, b"y" * 65536)
        if tr.finished and not tr.reading_after_done:
            break
    assert rec.outcome == "malformed" and "after [DONE]" in rec.error
    assert tr.pending_bytes <= 65536


def test_invalid_utf8_in_a_ws_text_message_is_malformed():
    tr, rec = tracker("ws")
    tr.on_ws_message(10.1, b'{"choices": [{"delta": {"content": "\xff\xfe"}}]}', text=True)
    assert rec.outcome == "malformed" and "UTF-8" in rec.error


# --- the stall rule: progress is a complete line (or head, or message), not a byte ----------


def test_a_dripped_line_that_never_ends_is_stalled():
    """Every byte used to reset the stall timer: a byte every 100 ms kept a stream alive
    until the request deadline. Now only a complete line is progress."""
    from tests.stream.drive import STALL, Burst, drive_sse

    head = HEAD + b"\r\n"
    bursts = [
        Burst(
            0.01, [head + b"data: " + chunk_bytes({"choices": [{"delta": {"content": "a"}}]})[6:]]
        )
    ]
    bursts += [Burst(0.1 + i * 0.1, [b"x"]) for i in range(100)]  # 10 s of one byte per 100 ms
    rec = drive_sse(bursts, None)
    assert rec.outcome == "stalled"
    assert rec.e2e_s == pytest.approx(0.01 + STALL)  # the last progress was the first chunk
    assert rec.open_gap and rec.gap_s[-1] == pytest.approx(STALL)


def test_complete_lines_are_not_progress():
    """Comments keep a connection alive, not a stream: only tokens restart the stall clock."""
    from tests.stream.drive import STALL, Burst, drive_sse

    ok = b"".join(
        chunk_bytes(
            {
                "choices": [
                    {"delta": {"content": f"t{i}"}, "finish_reason": "length" if i == 2 else None}
                ]
            }
        )
        for i in range(3)
    )
    bursts = [Burst(0.01, [HEAD + b"\r\n"])]
    bursts += [Burst(0.5 + i * 0.5, [b": keep-alive\n"]) for i in range(10)]  # 5 s of comments
    bursts += [Burst(5.5, [ok + b"data: [DONE]\n\n"])]  # 0.5 s after the last comment
    rec = drive_sse(bursts, 5.51)
    assert rec.outcome == "stalled"
    assert rec.e2e_s == pytest.approx(0.01 + STALL)
    assert (
        rec.error
        == "no first token for 1s after the stream began; 2 SSE comments kept the connection alive"
    )


def test_hostile_streams_leave_no_reference_cycles():
    """A protocol error kept in a local made a cycle (exception, traceback, frame) that held a
    stream's 1 MiB buffers until a full GC; the load generator raises gen-0's threshold to
    50,000, so a flood of endless lines grew it to about 1 GB."""
    import gc

    from streamslo.stream.exchange import SSEExchange

    hostile = [
        HEAD + b"\r\ndata: " + b"x" * 70_000,  # endless line (cap lowered below)
        HEAD + b"\r\n" + b"data: y\n" * 10_000,  # endless event
        b"HTTP/1.1 200 OK\r\n" + b"X-F: z\r\n" * 10_000,  # head flood
        CHUNKED + b"-6\r\nabcdef\r\n",  # bad chunk size
        CHUNKED + b"5\r\ndata:\r\n0x5\r\n",  # bad chunk size after a payload
        HEAD + b"\r\ndata: " + b"[" * 1000 + b"\n\n",  # deep JSON
    ]
    gc.collect()
    gc.disable()
    try:
        for data in hostile:
            rec = StreamRecord("c", "sse", "T", 0.0, 0.0)
            ex = SSEExchange(
                StreamTracker(rec, StreamExpectations(max_tokens=3), max_event_bytes=65536),
                1.0,
                30.0,
            )
            for i in range(0, len(data), 4096):
                ex.receive(0.1, data[i : i + 4096])
            assert rec.outcome == "malformed", (data[:40], rec.outcome)
            del ex, rec
        unreachable = gc.collect()
    finally:
        gc.enable()
    assert unreachable == 0
