"""Properties of the Sans-I/O core under any bytes a server can send (hypothesis).

* Split invariance: the outcome and every timing of a byte stream do not depend on how it is
  split into reads, with a scripted clock where all reads carved out of one burst of bytes
  carry the burst's timestamp (tests/stream/drive.py).
* Totality: arbitrary bytes, as an HTTP response, as an SSE body or as WebSocket frames, end
  in exactly one outcome of the taxonomy, never an exception, in bounded CPU time.
* Caps: floods of every kind stop being read within their cap plus one read.
"""

from __future__ import annotations

import json
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamslo.stream.caps import (
    MAX_AFTER_DONE_BYTES,
    MAX_CONTROL_FRAMES,
    MAX_ERROR_BODY_BYTES,
    MAX_HEAD_BYTES,
)
from streamslo.stream.exchange import SSEExchange
from streamslo.stream.outcome import OUTCOMES
from streamslo.stream.timing import StreamRecord
from streamslo.stream.tracker import StreamTracker
from streamslo.stream.ws import WSReader
from tests.stream.drive import EXPECT, Burst, drive_sse, drive_ws, fingerprint, new_ws_protocol

ENDED = set(OUTCOMES) - {"cancelled"}
# No example database: the repository stays clean, and every run explores afresh.
SETTINGS = settings(
    max_examples=250, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def chunk(content: str | None = "a", finish: str | None = None, usage: int | None = None) -> bytes:
    obj: dict[str, object] = {
        "choices": [
            {
                "index": 0,
                "delta": {} if content is None else {"content": content},
                "finish_reason": finish,
            }
        ]
    }
    if usage is not None:
        obj["usage"] = {"completion_tokens": usage}
    return json.dumps(obj).encode()


# --- SSE bodies and HTTP responses --------------------------------------------------------------

EVENTS = [
    b"data: " + chunk("a") + b"\n\n",
    b"data: " + chunk("b") + b"\n\n",
    b"data: " + chunk(None) + b"\n\n",
    b"data: " + chunk("c", "length", 3) + b"\n\n",
    b"data: " + chunk("c", "stop") + b"\n\n",
    b"data: [DONE]\n\n",
    b": keep-alive\n",
    b"\n",
    b"event: message\nid: 7\n",
    b"retry: " + b"9" * 5000 + b"\n",
    b'data: {"choices": [{"delta":\ndata:  {"content": "m"}, "finish_reason": null}]}\n\n',
    b'data: {"error": {"message": "boom", "code": 500}}\n\n',
    b'data: {"error": {"message": "inf", "code": Infinity}}\n\n',
    b"data: {not json\n\n",
    b"data: " + b"[" * 200 + b"]" * 200 + b"\n\n",
    b"data: \xff\xfe" + chunk("u") + b"\n\n",
]


@st.composite
def sse_bodies(draw: st.DrawFn) -> bytes:
    events = st.sampled_from(EVENTS)
    parts = draw(
        st.lists(st.one_of(events, events, events, st.binary(max_size=40)), min_size=1, max_size=14)
    )
    body = b"".join(parts)
    eol = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
    return body.replace(b"\n", eol) if eol != b"\n" else body


def chunked(body: bytes, cuts: list[int], end: bytes) -> bytes:
    out, prev = [], 0
    for c in sorted({min(c, len(body)) for c in cuts} | {len(body)}):
        if c > prev:
            out.append(b"%x\r\n%s\r\n" % (c - prev, body[prev:c]))
        prev = c
    return b"".join(out) + end


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"


@st.composite
def responses(draw: st.DrawFn) -> bytes:
    """An HTTP response: mostly well-formed framing around a hostile or ordinary body, with
    interim heads, error statuses, broken numbers and random mutations mixed in."""
    body = draw(sse_bodies())
    kind = draw(
        st.sampled_from(["chunked", "chunked", "chunked", "length", "close", "error", "garbage"])
    )
    interim = b"HTTP/1.1 100 Continue\r\n\r\n" * draw(st.integers(0, 20))
    if kind == "chunked":
        cuts = draw(st.lists(st.integers(0, max(0, len(body))), max_size=6))
        end = draw(
            st.sampled_from(
                [b"0\r\n\r\n", b"", b"0\r\nX-T: 1\r\n\r\n", b"-6\r\nabc", b"0x3\r\nabc\r\n"]
            )
        )
        data = SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(body, cuts, end)
    elif kind == "length":
        length = draw(
            st.sampled_from([b"%d" % len(body), b"%d" % (len(body) + 7), b"-5", b"1" * 30])
        )
        data = SSE_HEAD + b"Content-Length: " + length + b"\r\n\r\n" + body
    elif kind == "close":
        data = SSE_HEAD + b"\r\n" + body
    elif kind == "error":
        status = draw(st.sampled_from([b"404", b"429", b"500", b"503", b"600", b"2" * 50]))
        data = b"HTTP/1.1 " + status + b" X\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    else:
        data = draw(st.binary(max_size=300))
    data = interim + data
    if data and draw(st.integers(0, 3)) == 0:  # one random byte somewhere
        pos = draw(st.integers(0, len(data) - 1))
        data = data[:pos] + bytes([draw(st.integers(0, 255))]) + data[pos + 1 :]
    return data


@st.composite
def timed(draw: st.DrawFn, data: bytes) -> tuple[list[tuple[float, bytes]], float | None]:
    """Cut ``data`` into bursts at increasing times; maybe an EOF after the last."""
    cuts = sorted(
        c
        for c in set(draw(st.lists(st.integers(1, max(1, len(data) - 1)), max_size=8)))
        if c < len(data)
    )
    gaps = st.sampled_from([0.0, 0.001, 0.2, 0.7, 1.2, 3.0])
    t, prev, bursts = 0.01, 0, []
    for c in [*cuts, len(data)]:
        if c > prev:  # (no burst at all for empty data: a read of b"" is an EOF)
            bursts.append((t, data[prev:c]))
            prev = c
            t += draw(gaps)
    end = None if draw(st.booleans()) else t + draw(gaps)
    return bursts, end


def split(draw: st.DrawFn, bursts: list[tuple[float, bytes]]) -> list[Burst]:
    out = []
    for t, data in bursts:
        cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(data) - 1)), max_size=5))))
        pieces, prev = [], 0
        for c in [*cuts, len(data)]:
            if c > prev:
                pieces.append(data[prev:c])
                prev = c
        out.append(Burst(t, pieces))
    return out


def whole(bursts: list[tuple[float, bytes]]) -> list[Burst]:
    return [Burst(t, [data]) for t, data in bursts]


def bytewise(bursts: list[tuple[float, bytes]]) -> list[Burst]:
    return [Burst(t, [data[i : i + 1] for i in range(len(data))]) for t, data in bursts]


@settings(SETTINGS, max_examples=600)
@given(st.data())
def test_sse_outcome_and_timings_do_not_depend_on_reads(data: st.DataObject) -> None:
    response = data.draw(responses())
    bursts, end = data.draw(timed(response))
    reference = fingerprint(drive_sse(whole(bursts), end))
    assert reference[0] in ENDED
    assert fingerprint(drive_sse(split(data.draw, bursts), end)) == reference
    if len(response) <= 4000:
        assert fingerprint(drive_sse(bytewise(bursts), end)) == reference


@SETTINGS
@given(st.binary(max_size=4000), st.booleans())
def test_arbitrary_bytes_as_a_response_end_in_one_outcome(raw: bytes, framed: bool) -> None:
    data = (SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + raw) if framed else raw
    t0 = time.process_time()
    rec = drive_sse([Burst(0.01, [data])], 0.02)
    assert rec.outcome in ENDED
    assert time.process_time() - t0 < 0.5


@SETTINGS
@given(sse_bodies(), st.sampled_from([1, 7, 512, 65536]))
def test_arbitrary_sse_bodies_end_in_one_outcome(body: bytes, step: int) -> None:
    data = SSE_HEAD + b"\r\n" + body
    rec = drive_sse([Burst(0.01, [data[i : i + step] for i in range(0, len(data), step)])], 0.5)
    assert rec.outcome in ENDED


# --- WebSocket frames ---------------------------------------------------------------------------


def frame(op: int, payload: bytes, fin: bool = True, rsv: int = 0) -> bytes:
    first = (0x80 if fin else 0) | rsv | op
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", first, n)
    elif n < 65536:
        head = struct.pack("!BBH", first, 126, n)
    else:
        head = struct.pack("!BBQ", first, 127, n)
    return head + payload


FRAMES = [
    frame(0x1, chunk("a")),
    frame(0x1, chunk("b")),
    frame(0x1, chunk("c", "length", 3)),
    frame(0x1, b"[DONE]"),
    frame(0x1, chunk("x")[:10], fin=False) + frame(0x9, b"p") + frame(0x0, chunk("x")[10:]),
    frame(0x9, b"ping"),
    frame(0xA, b"pong"),
    frame(0x2, b"\x00\x01"),
    frame(0x8, struct.pack("!H", 1000)),
    frame(0x8, struct.pack("!H", 1011) + b"bye"),
    frame(0x8, struct.pack("!H", 999)),
    frame(0x1, b'{"choices": [{"delta": {"content": "\xff"}}]}'),
    frame(0x1, b"{}", rsv=0x40),
    b"\x81\x7f" + struct.pack("!Q", (1 << 63) + 5),
    frame(0x1, b'{"error": {"message": "e", "code": 429}}'),
]


@st.composite
def ws_streams(draw: st.DrawFn) -> bytes:
    parts = draw(st.lists(st.one_of(st.sampled_from(FRAMES), st.binary(max_size=30)), max_size=12))
    return b"".join(parts)


@SETTINGS
@given(st.data())
def test_ws_outcome_and_timings_do_not_depend_on_reads(data: st.DataObject) -> None:
    stream = data.draw(ws_streams())
    bursts, end = data.draw(timed(stream))
    reference = fingerprint(drive_ws([], whole(bursts), end))
    assert reference[0] in ENDED
    assert fingerprint(drive_ws([], split(data.draw, bursts), end)) == reference
    if len(stream) <= 3000:
        assert fingerprint(drive_ws([], bytewise(bursts), end)) == reference


@SETTINGS
@given(st.binary(max_size=3000))
def test_arbitrary_bytes_as_frames_or_handshake_end_in_one_outcome(raw: bytes) -> None:
    t0 = time.process_time()
    assert drive_ws([], [Burst(0.01, [raw])], 0.02).outcome in ENDED
    assert drive_ws([Burst(0.01, [raw])], [], 0.02).outcome in ENDED
    assert time.process_time() - t0 < 0.5


# --- caps ---------------------------------------------------------------------------------------


def feed_until_done(ex: object, flood: bytes, step: int, limit: int) -> int:
    """Feed ``flood`` repeated, ``step`` bytes per read, until the exchange is done; return
    the bytes fed. Fails past ``limit`` bytes (the cap did not hold)."""
    fed = 0
    buf = flood * (limit // len(flood) + 2)
    while not ex.done:  # type: ignore[attr-defined]
        assert fed <= limit, f"still reading after {fed} bytes"
        ex.receive(0.1, buf[fed : fed + step])  # type: ignore[attr-defined]
        fed += step
    return fed


def sse_exchange(max_event: int = 4096) -> tuple[SSEExchange, StreamTracker]:
    rec = StreamRecord("p", "sse", "T", 0.0, 0.0)
    tracker = StreamTracker(rec, EXPECT, max_event_bytes=max_event)
    return SSEExchange(tracker, 1.0, 30.0), tracker


OK_BODY = (
    b"data: "
    + chunk("a")
    + b"\n\ndata: "
    + chunk("b")
    + b"\n\ndata: "
    + chunk("c", "length", 3)
    + b"\n\ndata: [DONE]\n\n"
)


@pytest.mark.parametrize(
    ("name", "prefix", "flood", "cap", "outcome"),
    [
        ("endless line", SSE_HEAD + b"\r\ndata: ", b"x", 4096, "malformed"),
        ("endless event", SSE_HEAD + b"\r\n", b"data: x\n", 4096, "malformed"),
        ("comment flood", SSE_HEAD + b"\r\n", b":\n", 4096, "malformed"),
        ("blank lines", SSE_HEAD + b"\r\n", b"\n", 4096, "malformed"),
        ("head flood", b"HTTP/1.1 200 OK\r\n", b"X-F: y\r\n", MAX_HEAD_BYTES, "malformed"),
        ("header line", b"HTTP/1.1 200 OK\r\nX-Long: ", b"z", MAX_HEAD_BYTES, "malformed"),
        ("interim flood", b"", b"HTTP/1.1 100 Continue\r\n\r\n", 17 * 26, "malformed"),
        ("error body", b"HTTP/1.1 500 E\r\n\r\n", b"e", MAX_ERROR_BODY_BYTES, "http_5xx"),
        ("after [DONE]", SSE_HEAD + b"\r\n" + OK_BODY, b"y", MAX_AFTER_DONE_BYTES, "malformed"),
        (
            "comments after [DONE]",
            SSE_HEAD + b"\r\n" + OK_BODY,
            b": c\n",
            MAX_AFTER_DONE_BYTES,
            "malformed",
        ),
    ],
)
@settings(max_examples=12, deadline=None, database=None)
@given(step=st.sampled_from([1, 3, 100, 4096, 65536]))
def test_caps_hold(
    name: str, prefix: bytes, flood: bytes, cap: int, outcome: str, step: int
) -> None:
    ex, tracker = sse_exchange()
    if prefix:
        ex.receive(0.05, prefix)
    fed = feed_until_done(ex, flood, step, limit=cap + step + 2 * len(prefix) + 64)
    assert tracker.rec.outcome == outcome, tracker.rec.error
    assert ex.body.decoder.pending_bytes <= 4096 + step
    assert len(ex.reader._buf) <= MAX_HEAD_BYTES + step  # the head buffer
    assert fed <= cap + step + 2 * len(prefix) + 64


@settings(max_examples=10, deadline=None, database=None)
@given(step=st.sampled_from([1, 7, 2000, 65536]))
def test_control_frame_flood_is_capped(step: int) -> None:
    proto, accept = new_ws_protocol()
    proto.receive_data(accept)
    proto.events_received()
    rec = StreamRecord("p", "ws", "T", 0.0, 0.0)
    tracker = StreamTracker(rec, EXPECT)
    tracker.begin(0.0, 101)
    reader = WSReader(proto, tracker, 1.0, 30.0)
    fed = feed_until_done(reader, frame(0x9, b"p"), step, limit=(MAX_CONTROL_FRAMES + 2) * 3 + step)
    assert rec.outcome == "malformed" and "control frames" in rec.error
    assert fed <= (MAX_CONTROL_FRAMES + 2) * 3 + step
