"""Drive the Sans-I/O exchanges with a scripted clock, as :func:`streamslo.transport.common.pump`
drives them with a real one (for the property tests and the hostile benchmarks of the core).

Bytes arrive in *bursts*: a burst is what the network delivered at one instant, so every
read carved out of it carries the same timestamp however it is split. Between bursts the
exchange says which wait runs out next and when (``next_wait``: no progress for the stall
timeout, the request's deadline, or a short wait's cutoff), as the read watchdog asks it; this
driver decides no rule of its own.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from websockets.client import ClientProtocol
from websockets.uri import parse_uri

from streamslo.stream.exchange import Reading, SSEExchange
from streamslo.stream.timing import StreamExpectations, StreamRecord
from streamslo.stream.tracker import StreamTracker
from streamslo.stream.ws import WSHandshake, WSReader

__all__ = ["Burst", "drive_sse", "drive_ws", "fingerprint", "ws_accept_head"]

STALL = 1.0
REQUEST_TIMEOUT = 30.0
EXPECT = StreamExpectations(max_tokens=3)


@dataclass(frozen=True)
class Burst:
    """Bytes that arrived at time ``t``, cut into the reads ``pieces``."""

    t: float
    pieces: Sequence[bytes]


def _expired(ex: Reading, t: float, deadline: float) -> bool:
    """Whether a wait ran out before ``t`` (the exchange says which, and when); if so, end the
    exchange at that moment, as the read watchdog does."""
    when, why = ex.next_wait(deadline)
    if t >= when:
        ex.expire(when, why)  # type: ignore[attr-defined]
        return True
    return False


def _run(ex: Reading, bursts: Sequence[Burst], end: float | None, deadline: float) -> None:
    for burst in bursts:
        if ex.done or _expired(ex, burst.t, deadline):
            return
        for piece in burst.pieces:
            ex.receive(burst.t, piece)  # type: ignore[attr-defined]
            if ex.done:
                return
    if end is not None and not _expired(ex, end, deadline):
        ex.receive(end, b"")  # type: ignore[attr-defined]
    elif end is None:
        _expired(ex, float("inf"), deadline)


def drive_sse(
    bursts: Sequence[Burst], end: float | None, expect: StreamExpectations = EXPECT
) -> StreamRecord:
    """One SSE response: ``bursts``, then EOF at ``end`` (None: the server never closes)."""
    rec = StreamRecord("p", "sse", "T", 0.0, 0.0)
    tracker = StreamTracker(rec, expect)
    ex = SSEExchange(tracker, STALL, REQUEST_TIMEOUT)
    _run(ex, bursts, end, REQUEST_TIMEOUT)
    return rec


def new_ws_protocol() -> tuple[ClientProtocol, bytes]:
    """A client protocol with its handshake sent, and the ``101`` head that accepts it."""
    proto = ClientProtocol(parse_uri("ws://127.0.0.1/v1/ws"), max_size=1 << 16)
    request = proto.connect()
    proto.send_request(request)
    proto.data_to_send()
    return proto, ws_accept_head(request.headers["Sec-WebSocket-Key"])


def ws_accept_head(key: str) -> bytes:
    accept = base64.b64encode(
        hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()
    )
    return (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
    )


def drive_ws(
    head_bursts: Sequence[Burst],
    frame_bursts: Sequence[Burst],
    end: float | None,
    expect: StreamExpectations = EXPECT,
) -> StreamRecord:
    """A handshake answer (``head_bursts``; empty: a correct 101 at t=0), then one request's
    frames. Frames are fed only once the handshake is accepted, as the transport does."""
    rec = StreamRecord("p", "ws", "T", 0.0, 0.0)
    tracker = StreamTracker(rec, expect)
    proto, accept = new_ws_protocol()
    hs = WSHandshake(proto, tracker, STALL, REQUEST_TIMEOUT)
    _run(hs, head_bursts or [Burst(0.0, [accept])], None if frame_bursts else end, REQUEST_TIMEOUT)
    if not hs.accepted:
        return rec
    reader = WSReader(proto, tracker, STALL, REQUEST_TIMEOUT)
    reader.frames(tracker.progress_t, hs.early_frames)  # (they came with the 101)
    if not reader.done:
        _run(reader, frame_bursts, end, REQUEST_TIMEOUT)
    return rec


def fingerprint(rec: StreamRecord) -> tuple[object, ...]:
    """What must not depend on how bytes were split: the outcome and every timing. (Not
    ``bytes``: a stream that ends mid-burst does not read the rest of it, as a real one.)"""
    return (
        rec.outcome,
        rec.status,
        rec.ttft_s,
        rec.e2e_s,
        tuple(rec.gap_s),
        tuple(rec.gap_t),
        rec.open_gap,
        rec.tokens,
        rec.finish_reason,
        rec.usage_completion_tokens,
    )
