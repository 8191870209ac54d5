"""WebSocket streams, Sans-I/O: the handshake answer, then one request's frames.

websockets' :class:`~websockets.client.ClientProtocol` does the RFC 6455 framing (masks,
control frames, close codes, the size of a message across its fragments); around it:

* :class:`WSHandshake` reads the answer to the opening handshake with our own strict HTTP/1.1
  reader first, so garbage, a giant status, a head that never ends or a refusal with a huge or
  dripping body end like any HTTP response (``malformed``, ``stalled``, ``http_4xx``/``5xx``)
  instead of waiting for websockets to give up. A ``101`` then goes to the protocol, which
  checks ``Sec-WebSocket-Accept`` and the rest (a wrong one is ``malformed``).
* :class:`WSReader` turns one request's frames into whole messages for the tracker: text
  messages must be UTF-8, binary ones are ``malformed``, ping/pong are answered (by the
  protocol) but are not progress, and more than ``MAX_CONTROL_FRAMES`` of them in a row is a
  flood (``malformed``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.protocol import State
from websockets.version import version as websockets_version

from streamslo.stream.caps import MAX_CONTROL_FRAMES
from streamslo.stream.cause import Cause
from streamslo.stream.exchange import (
    ExchangeState,
    Expiry,
    HTTPExchange,
    Reading,
    protocol_broken,
    transport_failed,
)
from streamslo.stream.http1 import ResponseHead
from streamslo.stream.outcome import Outcome
from streamslo.stream.tracker import StreamTracker

__all__ = [
    "WHOLE_FRAMES_TESTED",
    "WS_CLOSE_4XX",
    "WS_CLOSE_5XX",
    "WSHandshake",
    "WSReader",
    "whole_frames_tested",
    "ws_closed",
    "ws_message",
]

#: WebSocket close codes that count as the client's fault before the stream began.
WS_CLOSE_4XX = frozenset({1008, 1009, 1013})
#: WebSocket close codes that count as the server's fault before the stream began.
WS_CLOSE_5XX = frozenset({1011})


def ws_message(tracker: StreamTracker, t: float, payload: bytes, text: bool) -> None:
    """One whole WebSocket data message for the tracker: a text message must be UTF-8; a binary
    one is not the protocol (``malformed``)."""
    rec = tracker.rec
    if not text:
        rec.bytes += len(payload)
        tracker.finish(t, Outcome.MALFORMED, "binary WebSocket frame")
        return
    try:
        decoded = payload.decode("utf-8")
    except UnicodeDecodeError as exc:
        rec.bytes += len(payload)
        tracker.finish(t, Outcome.MALFORMED, f"invalid UTF-8 in a text message at byte {exc.start}")
        return
    rec.bytes += len(decoded)
    if rec.outcome is None:
        tracker.dialect.read(tracker, t, decoded, "message")  # (not done: no outcome yet)


def ws_closed(tracker: StreamTracker, t: float, code: int | None, reason: str = "") -> None:
    """The server closed the WebSocket (``code`` None: no close frame, 1006): before the stream
    began a close code may answer the request as a status would (1008, 1009, 1013: ``http_4xx``;
    1011: ``http_5xx``); otherwise the stream is ``truncated`` before its terminal marker."""
    if tracker.rec.outcome is not None:
        return
    shown = 1006 if code is None else code
    detail = f"ws close {shown}" + (f": {reason[:120]}" if reason else "")
    if not tracker.content_seen:
        if shown in WS_CLOSE_4XX:
            cause = Cause.RATE_LIMITED if shown == 1013 else Cause.HTTP_STATUS
            tracker.finish(t, Outcome.HTTP_4XX, detail, cause)
            return
        if shown in WS_CLOSE_5XX:
            tracker.finish(t, Outcome.HTTP_5XX, detail)
            return
    tracker.finish(t, Outcome.TRUNCATED, f"{detail} before {tracker.dialect.terminal}")


class WSHandshake(HTTPExchange):
    """The answer to one opening handshake, into the tracker.

    After it is :attr:`done`, :attr:`accepted` says whether the connection is open; frames
    that arrived with the ``101`` are in :attr:`early_frames`.

    Args:
        proto: the client protocol, its handshake request already sent.
        tracker: the request's tracker.
        stall_timeout: seconds without progress before ``stalled``.
        request_timeout: the request's deadline in seconds.
    """

    def __init__(
        self,
        proto: ClientProtocol,
        tracker: StreamTracker,
        stall_timeout: float,
        request_timeout: float,
    ) -> None:
        super().__init__(tracker, stall_timeout, request_timeout)
        self.proto = proto
        self.accepted = False
        self.early_frames: list[Frame] = []

    def _on_head(self, t: float, head: ResponseHead) -> None:
        self.state = ExchangeState.CLOSED
        if head.status != 101:
            protocol_broken(self.tracker, t, f"WebSocket handshake answered {head.status}, not 101")
            return
        proto = self.proto
        proto.receive_data(head.raw + self.reader.trailing_data)
        events = proto.events_received()
        exc = proto.handshake_exc
        if exc is not None:
            protocol_broken(self.tracker, t, f"WebSocket handshake: {type(exc).__name__}: {exc}")
            return
        self.accepted = True
        self.early_frames = [e for e in events if isinstance(e, Frame)]
        self.tracker.begin(t, 101)

    def _on_body(self, t: float, payload: bytes) -> None:  # pragma: no cover - closed at the head
        raise AssertionError("a WebSocket handshake answer has no body")

    def _body_eof(self, t: float) -> None:  # pragma: no cover - closed at the head
        raise AssertionError("a WebSocket handshake answer has no body")


# Opcodes as module constants: the frame loop reads them per message.
_TEXT, _BINARY, _CONT = Opcode.TEXT, Opcode.BINARY, Opcode.CONT
_CLOSE, _PING, _PONG = Opcode.CLOSE, Opcode.PING, Opcode.PONG
_CLOSED = ExchangeState.CLOSED
_OPEN = State.OPEN

WHOLE_FRAMES_TESTED = ((16, 0), (18, 0))
"""The websockets versions (from, up to but not including) that :class:`WSReader`'s
whole-frames path is tested against (``tests/stream/test_ws_whole_frames.py`` and the other WS
tests of ``tests/stream``, run on 16.0 and 17.4). The path reads attributes of the protocol
object that websockets does not document: per read ``current_size`` (a fragmented message under
way), ``reader.buffer`` (a partial frame held) and ``parser_exc``; per request ``extensions``,
``max_message_size`` and ``max_fragment_size``. 14.x and 15.x name two of them otherwise
(``cur_size``, ``max_size``): on any version outside this range the path is off and every read
goes through the object's documented ``receive_data`` and ``events_received``, which decide the
same (only slower). A new websockets release: run those tests with it, then widen the range."""


def whole_frames_tested(version: str) -> bool:
    """Whether a websockets ``version`` (``"17.4"``) is in :data:`WHOLE_FRAMES_TESTED`."""
    m = re.match(r"(\d+)\.(\d+)", version)
    if m is None:
        return False
    lo, hi = WHOLE_FRAMES_TESTED
    return lo <= (int(m[1]), int(m[2])) < hi


# A read that is one whole text frame skips the protocol object (tests turn it off).
_WHOLE_FRAMES = whole_frames_tested(websockets_version)


class WSReader(Reading):
    """One request's answer on an open WebSocket, frame by frame, into the tracker.

    Args:
        proto: the open client protocol.
        tracker: the request's tracker.
        stall_timeout: seconds without a whole message before ``stalled``.
        request_timeout: the request's deadline in seconds.
        idle_close_retry: the connection was reused: a normal close (or EOF) before any frame
            of the answer means the server had closed it while idle, and the request is to be
            sent again on a new connection (:attr:`idle_closed`), not recorded.
    """

    def __init__(
        self,
        proto: ClientProtocol,
        tracker: StreamTracker,
        stall_timeout: float,
        request_timeout: float,
        idle_close_retry: bool = False,
    ) -> None:
        super().__init__(tracker, stall_timeout, request_timeout, idle_close_retry)
        self.proto = proto
        self.state = ExchangeState.STREAM
        self.dirty = False
        """Data frames came after ``[DONE]``: the connection must not carry another request."""
        self._first = True  # no frame of this request's answer yet
        self._fragments: list[bytes] = []
        self._frag_text = True
        self._controls = 0  # control frames in a row
        # A dialect that reads a message from its bytes (OpenAI's chunks; see receive).
        self._read_bytes: Callable[[StreamTracker, float, bytes], None] | None = getattr(
            tracker.dialect, "read_bytes", None
        )
        # The whole-frames path (see receive) for this request: a tested websockets, and no
        # extension negotiated (transport/ws.py offers none); the protocol's size limit for one
        # frame, as its parser computes it outside a fragmented message. Read once: neither
        # changes after the handshake.
        self._whole = _WHOLE_FRAMES and not proto.extensions
        self._limit: int | None = None
        if self._whole:
            limit = proto.max_message_size
            if proto.max_fragment_size is not None:
                limit = min(limit or proto.max_fragment_size, proto.max_fragment_size)
            self._limit = limit

    def receive(self, t: float, data: bytes) -> None:
        """Bytes just read at ``t`` (``b""``: EOF)."""
        if self.state is _CLOSED:
            return
        proto = self.proto
        if (
            self._whole
            and len(data) > 2
            and data[0] == 0x81
            and not self._fragments
            and proto.current_size is None
            and not proto.reader.buffer
            and proto.parser_exc is None
            and proto.state is _OPEN
            and self.tracker.rec.outcome is None
        ):
            # The hot path: the read starts with whole unmasked text frames (FIN, no RSV bits)
            # and the protocol object holds nothing (no partial frame, no fragmented message,
            # no extension): each message goes to the tracker as its parser would hand it on,
            # without a trip through it (which would change nothing in its state); what
            # follows them (another kind of frame, a partial one) goes through it as before.
            # It pays 36,200-39,200 instructions a token (61-62 % of the read; bench/RESULTS.md,
            # "What each shortcut of the read path pays"); held equal to the protocol object's
            # reading by tests/stream/test_ws_whole_frames.py; what it reads of that object, and
            # the versions tested: WHOLE_FRAMES_TESTED.
            data = self._whole_frames(t, data)
            if not data:
                return
        if data:
            proto.receive_data(data)
        else:
            proto.receive_eof()
        self.frames(t, proto.events_received(), eof=not data)

    def _whole_frames(self, t: float, data: bytes) -> bytes:
        """Read the whole text frames at the start of ``data`` (see :meth:`receive`); return
        the bytes after them (``b""``: all read, or the stream ended after them)."""
        tracker = self.tracker
        rec = tracker.rec
        limit = self._limit
        read_bytes = self._read_bytes
        n = len(data)
        pos = 0
        while pos + 2 <= n and data[pos] == 0x81:
            size = data[pos + 1]
            head = 2
            if size == 126:
                if pos + 4 > n:
                    break
                size = (data[pos + 2] << 8) | data[pos + 3]
                if size < 126:
                    break  # not the shortest form: the protocol object decides
                head = 4
            elif size > 126:
                break  # a 64-bit length (or a masked frame): the protocol object decides
            end = pos + head + size
            if end > n or (limit is not None and size > limit):
                break
            self._controls = 0
            self._first = False
            payload = data[pos + head : end]
            if read_bytes is not None and payload.isascii():
                # ASCII is UTF-8 and its length in characters: what ws_message would check
                # and count; the dialect reads it from the bytes.
                rec.bytes += len(payload)
                read_bytes(tracker, t, payload)
            else:
                ws_message(tracker, t, payload, True)
            pos = end
            if rec.outcome is not None:
                break
        if pos == n and rec.outcome is not None:
            self.state = _CLOSED
        return data[pos:] if pos else data

    def frames(self, t: float, events: Sequence[object], eof: bool = False) -> None:
        """Frames parsed from one read (also the early frames that came with the 101)."""
        tracker = self.tracker
        rec = tracker.rec
        for frame in events:
            if not isinstance(frame, Frame):
                continue
            op = frame.opcode
            if rec.outcome is not None:
                if op is _TEXT or op is _BINARY or op is _CONT:
                    self.dirty = True
                continue
            if op is _TEXT and frame.fin and not self._fragments:
                # The hot path: one whole text message (a chunk, or [DONE]).
                self._controls = 0
                self._first = False
                ws_message(tracker, t, bytes(frame.data), True)
                continue
            if op is _CLOSE:
                self._close(t)
                return
            if op is _PING or op is _PONG:
                self._controls += 1
                tracker.pings += 1  # a keep-alive: no progress (docs/outcomes.md)
                if self._controls > MAX_CONTROL_FRAMES:
                    protocol_broken(
                        tracker,
                        t,
                        f"more than {MAX_CONTROL_FRAMES} WebSocket control frames without a message",
                    )
                    self.state = ExchangeState.CLOSED
                    return
                continue
            self._controls = 0
            self._first = False
            if op is _CONT:
                self._fragments.append(bytes(frame.data))
                if not frame.fin:
                    continue
                payload = b"".join(self._fragments)
                text = self._frag_text
                self._fragments = []
            elif not frame.fin:
                self._fragments = [bytes(frame.data)]
                self._frag_text = op is _TEXT
                continue
            else:
                payload = bytes(frame.data)
                text = op is _TEXT
            ws_message(tracker, t, payload, text)
        if rec.outcome is not None:
            self.state = _CLOSED
            return
        exc = self.proto.parser_exc
        if exc is None and not eof:
            return  # the common case: more to read
        if self._first and self._retry and (isinstance(exc, EOFError) or eof):
            self.idle_closed = True
            self.state = ExchangeState.CLOSED
            return
        if exc is not None:
            if isinstance(exc, EOFError):
                ws_closed(tracker, t, None, "connection closed without a close frame")
            else:
                protocol_broken(tracker, t, f"{type(exc).__name__}: {exc}")
            self.state = ExchangeState.CLOSED
        elif eof:
            ws_closed(tracker, t, None, "connection closed without a close frame")
            self.state = ExchangeState.CLOSED

    def _close(self, t: float) -> None:
        rcvd = self.proto.close_rcvd
        self.state = ExchangeState.CLOSED
        if self._first and self._retry and (rcvd is None or rcvd.code in (1000, 1001)):
            self.idle_closed = True
            return
        ws_closed(self.tracker, t, rcvd.code if rcvd else None, rcvd.reason if rcvd else "")

    def expire(self, t: float, why: Expiry) -> None:
        """A wait ran out (stall or deadline)."""
        if not self.done:
            self._timer(t, why)

    def fail(self, t: float, exc: BaseException) -> None:
        """The connection failed while reading."""
        if self.done:
            return
        self.state = ExchangeState.CLOSED
        if self._first and self._retry:
            self.idle_closed = True
            return
        transport_failed(self.tracker, t, exc)
