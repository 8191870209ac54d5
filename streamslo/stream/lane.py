"""The fast lane of an event stream: a read that is one whole chunk holding one token event.

Most reads of a token stream carry exactly one HTTP chunk (``SIZE CRLF payload CRLF``) whose
payload is exactly one one-line SSE event (``data: VALUE LF LF``): a server writes one event per
token and flushes it. :func:`chunk_event` recognises that read by its bytes alone and returns
the event's value, undecoded, so the exchange hands it to the dialect without running the
chunked reader and the SSE decoder over it; every other read goes through both, which decide by
the general rules (docs/timing.md, "What a read costs").

It takes a read only when the general path would give the same: one chunk of a plain hex size
(no extension, no leading zero) under 4 KiB whose data ends exactly where the read does, one
``data:`` line with no CR and no other LF (one space after the colon is dropped, as the SSE rules
drop it: most servers write ``data: ``, axum-based ones such as TGI ``data:``), and the blank
line. The caller checks the states that make it so (the chunked reader between chunks
with nothing pending, the SSE decoder between events: :meth:`ChunkedReader.between_chunks`,
:meth:`~streamslo.stream.sse.SSEDecoder.lane_ready`); a read the lane takes leaves both where
they were.

What it pays: 13,000 instructions a token, a third of the read (35,200 -> 22,200 on the bench's
emitter chunk, 38,700 -> 25,700 on vLLM's: ``python bench/bench_token_cpu.py --shortcuts``,
bench/RESULTS.md, "What each shortcut of the read path pays"). ``tests/stream/test_lane.py``
holds it equal to the chunked reader and the SSE decoder, and the exchange's inline copy of
:func:`chunk_data_size` equal to it.
"""

from __future__ import annotations

from streamslo.stream._framing import SIZE_LINES

__all__ = ["MAX_LANE_CHUNK", "chunk_data_size", "chunk_event"]

MAX_LANE_CHUNK = max(SIZE_LINES.values())
"""The largest chunk data the lane takes."""

# A lane read's first nine bytes -> the read's whole length: a size line of two hex digits (16-255
# bytes of chunk data: most token events), CRLF and "data:"; or of three, CRLF and "data". One
# dict lookup checks the size line's form, most of the field and the read's length at once.
_HEADS = {
    (line + b"\r\ndata:")[:9]: len(line) + 2 + size + 2
    for line, size in SIZE_LINES.items()
    if size >= 16
}


def chunk_event(data: bytes) -> bytes | None:
    """The value of the one ``data:`` event that ``data`` holds as exactly one whole chunk, or
    None where the general path must read it (see the module's text)."""
    # (No bytes.find or endswith: in CPython 3.11 they parse their arguments as a tuple, which
    # costs more than the search; `int in bytes` is a memchr.)
    n = len(data)
    if _HEADS.get(data[:9]) == n and data[-4:] == b"\n\n\r\n":
        if data[2] == 13:  # two size digits: "data:" read
            value = data[10 if data[9] == 32 else 9 : n - 4]  # (one space after it dropped)
        elif data[9] == 58:  # three: the colon
            value = data[11 if data[10] == 32 else 10 : n - 4]
        else:
            return None
        if 10 not in value and 13 not in value:  # LF, CR: no other line in the event
            return value
    return None


def chunk_data_size(data: bytes) -> int:
    """The chunk data's size (what ``rec.bytes`` counts) of a read :func:`chunk_event` took."""
    return len(data) - (6 if data[2] == 13 else 7)  # its size line, CRLF; the CRLF after it
