"""A read that is one whole chunk holding one data event skips the chunked reader and the SSE
decoder (:mod:`streamslo.stream.lane`); it must read exactly as they read it.

Three properties, each of which fails if a shortcut takes a read the general path reads otherwise:

* on generated reads (size lines in every form: either case, leading zeros, extensions, wrong
  sizes; payloads: ``data: ``/``data:``, other field names, CR and CRLF line ends, a second
  line, a comment, a named event, a CR or LF inside the value, a missing blank line; short, long
  and trailing bytes), where :func:`chunk_event` answers a value, a fresh chunked reader gives
  one payload and stays between chunks, and the SSE decoder gives one ``message`` event with
  that value and stays between events;
* the SSE decoder's own shortcut (:meth:`SSEDecoder.one_event`, for a body not framed by chunks)
  holds the same rule on generated events;
* whole responses of chat chunks (tokens, stop reasons, usage, ``[DONE]``, the general
  generator's odd chunks), written in those forms and cut into reads a chunk each, or merged,
  or split, end in the same record with the lane on and with it off.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamslo.stream import exchange as exchange_module
from streamslo.stream._framing import ChunkedReader
from streamslo.stream.exchange import SSEExchange
from streamslo.stream.lane import chunk_data_size, chunk_event
from streamslo.stream.sse import SSEDecoder
from streamslo.stream.timing import StreamExpectations, StreamRecord
from streamslo.stream.tracker import StreamTracker
from tests.stream.drive import Burst, drive_sse
from tests.stream.test_chunkjson_fast import chat_chunk

SETTINGS = settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)
TOKEN = b'{"choices":[{"index":0,"delta":{"content":"tok"},"finish_reason":null}]}'
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


@st.composite
def event(draw: st.DrawFn, value: bytes | None = None) -> bytes:
    """One SSE event's bytes, usually the common form, sometimes any other."""
    if value is None:
        value = draw(
            st.sampled_from(
                (TOKEN, b"[DONE]", b"", b" x", TOKEN + b"\ra", TOKEN + b"\na", TOKEN + b"\xff")
            )
        )
    form = draw(
        st.sampled_from(
            ("common",) * 6
            + ("nospace", "nospace", "crlf", "cr", "two", "named", "cut", "open", "field")
        )
    )
    if form == "nospace":
        return b"data:" + value + b"\n\n"
    if form == "field":  # another field, or none: no event
        return draw(st.sampled_from((b"datax:", b"data ", b"data;", b"Data:", b"data"))) + (
            value + b"\n\n"
        )
    if form == "crlf":
        return b"data: " + value + b"\r\n\r\n"
    if form == "cr":
        return b"data: " + value + b"\r\r"
    if form == "two":
        return b"data: " + value + b"\ndata: more\n\n"
    if form == "named":
        return draw(st.sampled_from((b"event: ping\n", b": keep\n", b"id: 7\n"))) + (
            b"data: " + value + b"\n\n"
        )
    if form == "cut":
        return b"data: " + value + b"\n"
    if form == "open":
        return b"data: " + value + b"\nx"
    return b"data: " + value + b"\n\n"


@st.composite
def chunk(draw: st.DrawFn, payload: bytes) -> bytes:
    """``payload`` as one chunk, its size line in any legal form (sometimes a wrong size)."""
    n = len(payload)
    if draw(st.integers(0, 9)) == 0:
        n = max(0, n + draw(st.sampled_from((-1, 1, 16))))
    line = draw(st.sampled_from((b"%x", b"%X", b"0%x", b"00%X"))) % n
    if draw(st.integers(0, 9)) == 0:
        line += draw(st.sampled_from((b";ext=1", b" ", b"\t;x")))
    return line + b"\r\n" + payload + b"\r\n"


@st.composite
def read(draw: st.DrawFn) -> bytes:
    """A read: one chunk of one event, sometimes padded to a size past 255 or 4 KiB, sometimes
    cut short or followed by more bytes."""
    pad = draw(st.sampled_from((0,) * 6 + (300, 4090, 5000)))
    value = b'{"p":"' + b"p" * pad + b'"}' if pad else None
    data = draw(chunk(draw(event(value))))
    tail = draw(st.sampled_from((b"",) * 6 + (b"0\r\n\r\n", b"\r\n", b"x")))
    if tail == b"x":
        return data[: draw(st.integers(0, len(data)))]
    return data + tail


def read_alike(data: bytes) -> None:
    """Where the lane takes ``data``, the chunked reader and the SSE decoder read it alike."""
    value = chunk_event(data)
    if value is None:
        return
    chunks = ChunkedReader()
    payload = chunks.feed(data)
    assert chunks.between_chunks and not chunks.done
    assert len(payload) == chunk_data_size(data)
    decoder = primed()
    assert decoder.lane_ready
    events = decoder.feed(payload)
    assert [(e.data, e.event) for e in events] == [(value.decode("utf-8", "replace"), "message")]
    assert decoder.lane_ready


@SETTINGS
@given(read())
def test_the_lane_takes_only_what_the_framing_and_decoder_read_the_same(data: bytes) -> None:
    read_alike(data)


def _one(payload: bytes, line: bytes = b"%x") -> bytes:
    return line % len(payload) + b"\r\n" + payload + b"\r\n"


NEAR_MISSES = [
    _one(b"data: " + TOKEN[:20] + b"\r" + TOKEN[20:] + b"\n\n"),  # a CR ends the line there
    _one(b"data: " + TOKEN[:20] + b"\n" + TOKEN[20:] + b"\n\n"),  # so does an LF
    _one(b"data: " + TOKEN + b"\nx"),  # an unfinished second line
    _one(b"data: " + TOKEN + b"\r\n\r\n"),
    _one(b"data: " + TOKEN + b"\r\r"),
    _one(b"data: " + TOKEN + b"\n"),  # no blank line yet
    _one(b"event: ping\ndata: " + TOKEN + b"\n\n"),
    _one(b"datax: " + TOKEN + b"\n\n"),  # another field (ignored: no event)
    _one(b"datax: " + TOKEN + b" " * 300 + b"\n\n"),  # the same, three size digits
    _one(b"data " + TOKEN + b" " * 300 + b"\n\n"),
    _one(b": keep\n\n"),
    _one(b"data: " + TOKEN + b"\n\n", b"0%x"),  # a leading zero
    _one(b"data: " + TOKEN + b"\n\n", b"%x;ext=1"),
    _one(b"data: " + TOKEN + b"\n\n")[:-1],  # the chunk's CRLF not all read
    _one(b"data: " + TOKEN + b"\n\n") + b"0\r\n\r\n",  # more in the same read
    b"%x\r\ndata: %s\n\n\r\n" % (len(TOKEN) + 7, TOKEN),  # a size one short
    _one(b"data: " + b"p" * 4200 + b"\n\n"),  # past the sizes the lane covers
]


@pytest.mark.parametrize("data", NEAR_MISSES)
def test_the_lane_leaves_near_misses_to_the_general_path(data: bytes) -> None:
    assert chunk_event(data) is None
    read_alike(data)


def primed() -> SSEDecoder:
    decoder = SSEDecoder()
    decoder.feed(b": primed\n\ndata: x\n\n")  # between events, as after a stream's first event
    return decoder


@SETTINGS
@given(event())
def test_one_event_takes_only_what_feed_reads_the_same(payload: bytes) -> None:
    """The SSE decoder's own one-event read (a body not framed by chunks) holds the same rule."""
    value = primed().one_event(payload)
    if value is None:
        return
    decoder = primed()
    assert [(e.data, e.event) for e in decoder.feed(payload)] == [
        (value.decode("utf-8", "replace"), "message")
    ]
    assert decoder.lane_ready


@pytest.mark.parametrize(
    "payload",
    [
        b"data: a\rb\n\n",
        b"data: a\nb\n\n",
        b"data: a\r\n\r\n",
        b"data:\r\n\n",
        b"data: a\n",
        b"data: a\nx",
        b"event: e\ndata: a\n\n",
    ],
)
def test_one_event_leaves_near_misses_to_feed(payload: bytes) -> None:
    assert primed().one_event(payload) is None


@pytest.mark.parametrize("field", [b"data: ", b"data:"])
@pytest.mark.parametrize("size", [16, 255, 256, 4095])
def test_the_lane_takes_the_common_read_at_every_size_it_covers(size: int, field: bytes) -> None:
    value = b'{"p":"' + b"p" * (size - len(field) - 2 - 8) + b'"}'
    for form in (b"%x", b"%X"):
        data = form % size + b"\r\n" + field + value + b"\n\n\r\n"
        assert chunk_event(data) == value
        assert chunk_data_size(data) == size
    assert chunk_event(b"%x\r\n%s%s\n\n\r\n" % (size, field, value) + b"0\r\n\r\n") is None


@pytest.mark.parametrize(
    ("payload", "value"),
    [
        (b"data:" + TOKEN + b"\n\n", TOKEN),  # axum's form (TGI): no space after the colon
        (b"data: " + TOKEN + b"\n\n", TOKEN),
        (b"data:  " + TOKEN + b"\n\n", b" " + TOKEN),  # only the first space is dropped
        (b"data:\t" + TOKEN + b"\n\n", b"\t" + TOKEN),  # a tab is the value's
    ],
)
def test_the_lane_drops_one_space_after_the_colon(payload: bytes, value: bytes) -> None:
    for line in (b"%x", b"%X"):
        data = _one(payload, line)
        assert chunk_event(data) == value
        read_alike(data)
    padded = payload.replace(TOKEN, TOKEN + b" " * 300)  # three size digits
    assert chunk_event(_one(padded)) == value + b" " * 300
    read_alike(_one(padded))


def ended(reads: list[bytes], lane: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    with monkeypatch.context() as m:
        if not lane:
            m.setattr(exchange_module, "chunk_event", lambda data: None)
        bursts = [Burst(0.1 + 0.01 * i, [r]) for i, r in enumerate(reads)]
        rec = drive_sse(bursts, 0.1 + 0.01 * len(reads), StreamExpectations(max_tokens=6))
    out = dataclasses.asdict(rec)
    out["gap_s"], out["gap_t"] = list(rec.gap_s), list(rec.gap_t)
    return out


@st.composite
def response(draw: st.DrawFn) -> list[bytes]:
    """One streaming response, as reads."""
    values = draw(
        st.lists(
            st.one_of(st.just(TOKEN), st.just(TOKEN), chat_chunk().map(str.encode)),
            max_size=8,
        )
    )
    if draw(st.booleans()):
        values.append(b"[DONE]")
    chunks = [draw(chunk(draw(event(v)))) for v in values]
    if draw(st.booleans()):
        chunks.append(b"0\r\n\r\n")
    how = draw(st.sampled_from(("a chunk a read", "a chunk a read", "merged", "cut")))
    if how == "a chunk a read":
        return [HEAD, *chunks]
    whole = HEAD + b"".join(chunks)
    cuts = sorted(draw(st.lists(st.integers(1, max(1, len(whole) - 1)), max_size=6)))
    return [whole[a:b] for a, b in zip([0, *cuts], [*cuts, len(whole)], strict=True) if b > a]


@SETTINGS
@given(response())
def test_responses_end_the_same_with_the_lane_on_and_off(reads: list[bytes]) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert ended(reads, True, monkeypatch) == ended(reads, False, monkeypatch)


@pytest.mark.parametrize("field", [b"data: ", b"data:"])
def test_a_token_stream_goes_down_the_lane(monkeypatch: pytest.MonkeyPatch, field: bytes) -> None:
    """The lane is on for a plain token stream after its first event, in both forms of the
    field (the test above would pass with a lane that never opens)."""
    taken: list[bytes] = []

    def counting(data: bytes) -> bytes | None:
        value = chunk_event(data)
        if value is not None:
            taken.append(value)
        return value

    monkeypatch.setattr(exchange_module, "chunk_event", counting)
    long = TOKEN.replace(b'"tok"', b'"' + b"t" * 300 + b'"')  # three size digits
    last = TOKEN.replace(b"null", b'"length"')
    values = [TOKEN, TOKEN, long, TOKEN, TOKEN, last]
    reads = [HEAD + b"7\r\n: pad\n\n\r\n", *[_one(field + v + b"\n\n") for v in values]]
    reads.append(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
    rec = drive_sse(
        [Burst(0.1 + 0.01 * i, [r]) for i, r in enumerate(reads)],
        1.0,
        StreamExpectations(max_tokens=6),
    )
    assert rec.outcome == "ok" and rec.tokens == 6, rec.error
    # Every chunk's data counted, the lane's reads too.
    assert rec.bytes == 7 + sum(len(field) + len(v) + 2 for v in values) + 14
    # The first event's read opens it (the comment before it counts toward the event); the
    # finish chunk is read by the lane too; [DONE] comes with the body's end: the general path.
    assert len(taken) == 5


@SETTINGS
@given(
    st.integers(16, 4095),
    st.sampled_from((b"data: ", b"data:")),
    st.sampled_from((b"%x", b"%X")),
)
def test_the_exchange_counts_a_lane_read_as_chunk_data_size(
    size: int, field: bytes, line: bytes
) -> None:
    """``SSEExchange.receive`` counts a lane read's bytes with an inline copy of
    :func:`chunk_data_size` (a call there costs some 340 instructions a token, 1.5 %:
    bench/RESULTS.md, "What each shortcut of the read path pays"); the copy counts what the
    function and the chunked reader count, at every size the lane takes, in both forms."""
    pad = size - len(field) - 2 - len(TOKEN)
    # A token padded to the size, or, below a token's size, a value that is not JSON (the
    # stream then ends malformed, after the read is counted).
    value = (
        TOKEN.replace(b'"tok"', b'"' + b"t" * (3 + pad) + b'"')
        if pad >= 0
        else b"x" * (size - len(field) - 2)
    )
    data = line % size + b"\r\n" + field + value + b"\n\n\r\n"
    assert chunk_event(data) == value
    record = StreamRecord("p", "sse", "T", 0.0, 0.0)
    ex = SSEExchange(StreamTracker(record, StreamExpectations(max_tokens=6)), 1.0, 30.0)
    ex.receive(0.1, HEAD + b"7\r\n: pad\n\n\r\n")
    ex.receive(0.2, _one(b"data: " + TOKEN + b"\n\n"))
    assert ex._lane  # the lane is open: the next read is the lane's
    before = record.bytes
    ex.receive(0.3, data)
    if pad >= 0:
        assert (record.tokens, ex._lane) == (2, True)
    else:
        assert record.outcome == "malformed"
    chunks = ChunkedReader()
    assert record.bytes - before == chunk_data_size(data) == len(chunks.feed(data)) == size
