"""One HTTP/1.1 response, from the bytes read to the tracker's outcome (Sans-I/O).

A transport reads, stamps each read with the clock, and hands it to an exchange; the exchange
decides everything else: the head (strict, capped), a non-2xx body read briefly for its error
message, the event stream, the short read after ``[DONE]``, and what an EOF, a transport error
or a timer means at each point. It also tells the transport how long to wait
(:attr:`HTTPExchange.progress_t` for the stall rule, :attr:`HTTPExchange.cutoff` for the short
waits) and whether the connection may carry another request (:attr:`HTTPExchange.reusable`).

Because no I/O and no clock live here, the tests drive the same code with a scripted clock, and
check that an outcome and its timings do not depend on how the bytes were split into reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum
from typing import Literal, cast

from streamslo.errors import HTTPProtocolError
from streamslo.stream.caps import (
    AFTER_DONE_WAIT_S,
    ERROR_BODY_WAIT_S,
    MAX_AFTER_DONE_BYTES,
    MAX_ERROR_BODY_BYTES,
)
from streamslo.stream.cause import Cause, connect_cause, status_cause
from streamslo.stream.chunkjson import error_message, inband_error, loads_chunk
from streamslo.stream.http1 import ReaderState, ResponseHead, ResponseReader
from streamslo.stream.lane import chunk_event
from streamslo.stream.outcome import Outcome, status_began
from streamslo.stream.sse import SSEDecoder, SSEEvent, SSEProtocolError
from streamslo.stream.tracker import StreamTracker, TrackerState

__all__ = [
    "ExchangeState",
    "Expiry",
    "HTTPExchange",
    "SSEBody",
    "SSEExchange",
    "http_error",
    "protocol_broken",
    "transport_failed",
]

Expiry = Literal["stall", "deadline"]
"""Why a wait ran out: no progress for the stall timeout, or a deadline (the request's, or a
short wait's :attr:`HTTPExchange.cutoff`)."""


# ------------------------------------------------------------------ the exchange's rules
def http_error(tracker: StreamTracker, t: float, status: int, body: bytes | bytearray) -> None:
    """A non-2xx answer (or a refused WebSocket handshake) with the start of its body: its
    status class, and the server's message from the body (any error shape the core knows,
    FastAPI's ``{"detail": ...}``, or the text)."""
    rec = tracker.rec
    rec.status = status
    rec.bytes += len(body)
    message = ""
    text = bytes(body[:MAX_ERROR_BODY_BYTES]).decode("utf-8", "replace")
    try:
        obj = loads_chunk(text)
        found = inband_error(obj) if isinstance(obj, dict) else None
        if found is not None:
            message = found[0]
        elif isinstance(obj, dict):
            message = error_message(obj.get("detail") or obj)
    except ValueError:
        message = text[:200].strip()
    detail = f"HTTP {status}" + (f": {message}" if message else "")
    if 400 <= status < 500:
        tracker.finish(t, Outcome.HTTP_4XX, detail, status_cause(status, message))
    elif 500 <= status < 600:
        tracker.finish(t, Outcome.HTTP_5XX, detail)
    else:
        tracker.finish(t, Outcome.MALFORMED, f"unexpected {detail}", Cause.HTTP_STATUS)


def transport_failed(tracker: StreamTracker, t: float, exc: BaseException) -> None:
    """The connection failed (refused, reset, TLS error...): ``connect_error`` before any
    answer, ``truncated`` after one, nothing after the terminal marker."""
    if tracker.rec.outcome is not None:
        tracker.stop_reading()
        return
    detail = f"{type(exc).__name__}: {exc}"[:200]
    if tracker.rec.status is None:
        tracker.finish(t, Outcome.CONNECT_ERROR, detail, connect_cause(exc))
    else:
        tracker.finish(t, Outcome.TRUNCATED, detail)


def protocol_broken(tracker: StreamTracker, t: float, detail: str) -> None:
    """The bytes broke HTTP or WebSocket framing, or a cap: ``malformed`` (after the terminal
    marker too: the body broke after all)."""
    cause = Cause.BROKEN_FRAMING
    if tracker.state is TrackerState.AFTER_DONE:
        detail = f"data after {tracker.dialect.terminal}: {detail}"
        cause = Cause.DATA_AFTER_END
    tracker.finish(t, Outcome.MALFORMED, detail[:300], cause)


_FINISHED = TrackerState.FINISHED
_AFTER_DONE = TrackerState.AFTER_DONE


class SSEBody:
    """An event stream's body, framed into messages for the tracker: the head's content type,
    the SSE framing and its caps, the short read after the terminal marker (at most
    ``MAX_AFTER_DONE_BYTES``; more is ``malformed``), and what the body's end means.

    Args:
        tracker: the request's tracker (its ``max_event_bytes`` caps an event).
    """

    __slots__ = ("_read", "decoder", "read_bytes", "tracker")

    def __init__(self, tracker: StreamTracker) -> None:
        self.tracker = tracker
        self.decoder = SSEDecoder(max_event_bytes=tracker.max_event_bytes)
        tracker.framing = self.decoder
        self._read = tracker.dialect.read  # (tracker.message, less a call per event)
        # A dialect that reads an event's data from the bytes (OpenAI's chunks) is given the
        # common read, one whole data event, undecoded.
        self.read_bytes: Callable[[StreamTracker, float, bytes], None] | None = getattr(
            tracker.dialect, "read_bytes", None
        )
        """The dialect's reading of one event from its bytes (None: it reads text only)."""

    def head(self, t: float, status: int, content_type: str | None) -> None:
        """The final response head of a streaming request (a non-2xx one goes to
        :func:`http_error`)."""
        tracker = self.tracker
        if 200 <= status < 300:
            tracker.begin(t, status)
            ctype = (content_type or "").split(";", 1)[0].strip().lower()
            if ctype != "text/event-stream":
                tracker.finish(
                    t,
                    Outcome.MALFORMED,
                    f"2xx body is not an event stream ({ctype or 'no content type'})",
                    Cause.NOT_A_STREAM,
                )
            return
        tracker.rec.status = status
        tracker.progress_t = t
        if status < 200 or status >= 600:
            tracker.finish(
                t, Outcome.MALFORMED, f"unexpected HTTP status {status}", Cause.HTTP_STATUS
            )

    def feed(self, t: float, data: bytes) -> None:
        """Body bytes of the event stream, as read (one timestamp per read)."""
        tracker = self.tracker
        tracker.rec.bytes += len(data)
        state = tracker.state
        if state is _FINISHED:  # (an outcome is set only in FINISHED or AFTER_DONE)
            return
        decoder = self.decoder
        read_bytes = self.read_bytes
        if read_bytes is not None and state is _STREAMING:
            value = decoder.one_event(data)
            if value is not None:
                read_bytes(tracker, t, value)
                return
        error: str | None = None
        try:
            events: Sequence[SSEEvent] = decoder.feed(data)
        except SSEProtocolError as exc:
            # Keep its text, not the exception: a local holding it would make a reference
            # cycle (exception -> traceback -> this frame) that keeps the decoder's buffers
            # alive until a full GC, and the load generator raises gen-0's threshold to 50,000.
            events, error = cast("Sequence[SSEEvent]", exc.events), str(exc)
        read = self._read
        for ev in events:
            if tracker.done:
                tracker.message(t, ev.data, ev.event)
            else:
                read(tracker, t, ev.data, ev.event)
            if tracker.state is _FINISHED:
                return
        if error is not None:
            protocol_broken(tracker, t, error)
        elif tracker.state is _AFTER_DONE and decoder.bytes_since_event > MAX_AFTER_DONE_BYTES:
            protocol_broken(tracker, t, f"more than {MAX_AFTER_DONE_BYTES} bytes")

    def eof(self, t: float, body_complete: bool) -> None:
        """The body (or the connection) ended.

        Args:
            body_complete: the HTTP framing says the body ended cleanly (the chunked
                terminator, the full Content-Length, or a close on a body framed by close).
        """
        tracker = self.tracker
        if tracker.rec.outcome is not None:
            tracker.stop_reading()  # (an unfinished event after the marker is dropped, as SSE says)
            return
        if not tracker.expect.done_marker and body_complete and status_began(tracker.rec.status):
            tracker.end(t)
            tracker.stop_reading()
            return
        if body_complete:
            tracker.finish(
                t,
                Outcome.TRUNCATED,
                f"body ended before {tracker.dialect.terminal}",
                Cause.NO_TERMINAL,
            )
        else:
            tracker.finish(t, Outcome.TRUNCATED, "connection closed mid-body", Cause.CUT)


class ExchangeState(Enum):
    """Where one response is."""

    HEAD = "head"
    """Waiting for the final response head."""
    STREAM = "stream"
    """A 2xx (or 101) head arrived: the body goes to the tracker."""
    ERROR_BODY = "error_body"
    """A non-2xx head arrived: reading a little of its body for the error message."""
    AFTER_DONE = "after_done"
    """``[DONE]`` came: reading on, briefly, to the body's end."""
    CLOSED = "closed"
    """Over: the transport stops reading."""


class Reading:
    """What every Sans-I/O reader of one request shares: its tracker, its state, the waits.

    Args:
        tracker: the request's tracker.
        stall_timeout: seconds without progress before ``stalled`` (for the error text).
        request_timeout: the request's whole deadline in seconds (for the error text).
        idle_close_retry: the connection was reused: an EOF or a transport error before any
            byte of the answer means the server had closed it while idle; the reader then
            records nothing and sets :attr:`idle_closed`, and the request is sent again.
    """

    def __init__(
        self,
        tracker: StreamTracker,
        stall_timeout: float,
        request_timeout: float,
        idle_close_retry: bool,
    ) -> None:
        self.tracker = tracker
        if tracker.stall_timeout is None:
            tracker.stall_timeout = stall_timeout
        self.state = ExchangeState.HEAD
        self.idle_closed = False
        """The reused connection had been closed by the server: send the request again."""
        self.cutoff: float | None = None
        """Absolute time at which a short wait (error body, after ``[DONE]``) ends."""
        self._retry = idle_close_retry
        self._stall_timeout = stall_timeout
        self._request_timeout = request_timeout

    @property
    def done(self) -> bool:
        """Over: stop reading."""
        return self.state is ExchangeState.CLOSED

    @property
    def progress_t(self) -> float:
        """When the stream last made progress (the stall timer counts from here)."""
        return self.tracker.progress_t

    def next_wait(self, deadline: float) -> tuple[float, Expiry]:
        """When the next wait runs out, and why: the stall timer from the last progress, or the
        request's ``deadline`` or a short wait's :attr:`cutoff`, whichever comes first (a
        reader waits for bytes until then, and calls ``expire`` if none came)."""
        stall_at = self.tracker.progress_t + self._stall_timeout
        cutoff = self.cutoff
        end = deadline if cutoff is None or deadline < cutoff else cutoff
        return (stall_at, "stall") if stall_at < end else (end, "deadline")

    def _timer(self, t: float, why: Expiry) -> None:
        """The stall timeout or the request's deadline ended the stream at ``t``."""
        if why == "deadline":
            self.tracker.expire(t, "deadline", self._request_timeout)
        else:
            self.tracker.expire(t, "stall", self._stall_timeout)
        self.state = ExchangeState.CLOSED


class HTTPExchange(Reading):
    """The part every HTTP response shares: the head, error bodies, EOF and timers.

    Args:
        tracker: the request's tracker.
        stall_timeout: seconds without progress before ``stalled`` (for the error text).
        request_timeout: the request's whole deadline in seconds (for the error text).
        idle_close_retry: the connection was reused: an EOF or a transport error before any
            byte of the answer means the server had closed it while idle; the exchange then
            records nothing and sets :attr:`idle_closed`, and the request is sent again.
    """

    def __init__(
        self,
        tracker: StreamTracker,
        stall_timeout: float,
        request_timeout: float,
        idle_close_retry: bool = False,
    ) -> None:
        super().__init__(tracker, stall_timeout, request_timeout, idle_close_retry)
        self.reader = ResponseReader()
        self.got_bytes = False
        """Any byte of the response arrived (a reused connection retries when none did)."""
        self._error_body = bytearray()
        self._head_t = 0.0

    @property
    def reusable(self) -> bool:
        """The connection may carry another request."""
        return False

    def receive(self, t: float, data: bytes) -> None:
        """Bytes just read at time ``t``; ``b""`` is the server's EOF."""
        if self.state is ExchangeState.CLOSED:
            return
        if not data:
            if self._retry and not self.got_bytes:
                self.idle_closed = True
                self.state = ExchangeState.CLOSED
                return
            self._eof(t)
            return
        self.got_bytes = True
        had_head = self.reader.head is not None
        try:
            payload = self.reader.feed(data)
        except HTTPProtocolError as exc:
            # What the read carried before the error (a head, body bytes) is handled first, so
            # the outcome and timings do not depend on how the bytes were split into reads.
            # Only the text is kept: holding the exception in a local would make a reference
            # cycle through its traceback that keeps the reader's buffers alive until a GC.
            self._handle(t, had_head, exc.payload, f"{type(exc).__name__}: {exc}")
            return
        self._handle(t, had_head, payload, None)

    def _handle(self, t: float, had_head: bool, payload: bytes, error: str | None) -> None:
        """What one read brought: maybe a head, body bytes, then maybe a protocol error."""
        reader = self.reader
        head = reader.head
        if head is not None and not had_head:
            if 200 <= head.status < 300 or head.status == 101:
                self._on_head(t, head)
            else:
                self.state = ExchangeState.ERROR_BODY
                self._head_t = t
                self.tracker.progress_t = t
                self.cutoff = t + ERROR_BODY_WAIT_S
        state = self.state
        if state is ExchangeState.ERROR_BODY:
            room = MAX_ERROR_BODY_BYTES - len(self._error_body)
            self._error_body += payload[:room]
            if error is not None or reader.complete or len(payload) >= room:
                self._error_done()  # the status is what matters; its body may break framing
            return
        if state is not ExchangeState.CLOSED and head is not None and (payload or error is None):
            self._on_body(t, payload)
        if error is not None and self.state is not ExchangeState.CLOSED:
            protocol_broken(self.tracker, t, error)
            self.state = ExchangeState.CLOSED

    def expire(self, t: float, why: Expiry) -> None:
        """A wait ran out at ``t`` (the watchdog ended the read)."""
        state = self.state
        if state is ExchangeState.CLOSED:
            return
        if state is ExchangeState.ERROR_BODY:
            self._error_done()
            return
        if state is ExchangeState.AFTER_DONE:
            self.tracker.stop_reading()
            self.state = ExchangeState.CLOSED
            return
        self._timer(t, why)

    def fail(self, t: float, exc: BaseException) -> None:
        """The connection failed while reading (reset, TLS error...)."""
        if self.state is ExchangeState.CLOSED:
            return
        if self._retry and not self.got_bytes:
            self.idle_closed = True
            self.state = ExchangeState.CLOSED
            return
        if self.state is ExchangeState.ERROR_BODY:
            self._error_done()
            return
        transport_failed(self.tracker, t, exc)
        self.state = ExchangeState.CLOSED

    # ----------------------------------------------------------------- hooks
    def _on_head(self, t: float, head: ResponseHead) -> None:
        """A 2xx or 101 head arrived (the body that came with it follows in ``_on_body``)."""
        raise NotImplementedError

    def _on_body(self, t: float, payload: bytes) -> None:
        """Body bytes after a 2xx/101 head."""
        raise NotImplementedError

    def _body_eof(self, t: float) -> None:
        """The server closed after a 2xx/101 head."""
        raise NotImplementedError

    # -------------------------------------------------------------- internals
    def _eof(self, t: float) -> None:
        state = self.state
        if state is ExchangeState.ERROR_BODY:
            self._error_done()
            return
        if state is ExchangeState.HEAD:
            if self.got_bytes:
                protocol_broken(self.tracker, t, "the connection closed inside the response head")
            else:
                transport_failed(
                    self.tracker, t, ConnectionResetError("closed before any response")
                )
            self.state = ExchangeState.CLOSED
            return
        self._body_eof(t)
        self.state = ExchangeState.CLOSED

    def _error_done(self) -> None:
        head = self.reader.head
        assert head is not None
        http_error(self.tracker, self._head_t, head.status, self._error_body)
        self.state = ExchangeState.CLOSED


_STREAM = ExchangeState.STREAM
_STREAMING = TrackerState.STREAMING
_READER_DONE = ReaderState.DONE


def _unset(tracker: StreamTracker, t: float, value: bytes) -> None:
    raise AssertionError("SSEExchange's hot path ran before its head set it up")


class SSEExchange(HTTPExchange):
    """One response to a streaming request: an event stream into the tracker.

    Args:
        tracker: the request's tracker.
        stall_timeout: seconds without progress before ``stalled``.
        request_timeout: the request's deadline in seconds.
        keep_alive: the request asked to keep the connection (else it is never reused).
        idle_close_retry: see :class:`HTTPExchange`.
    """

    def __init__(
        self,
        tracker: StreamTracker,
        stall_timeout: float,
        request_timeout: float,
        keep_alive: bool = True,
        idle_close_retry: bool = False,
    ) -> None:
        super().__init__(tracker, stall_timeout, request_timeout, idle_close_retry)
        self.body = SSEBody(tracker)
        self._keep_alive = keep_alive
        self._clean_end = False
        # The hottest path (see receive): the lane is open while a read that is one whole
        # chunk holding one data event may skip the framing and the SSE decoder.
        self._lane = False
        self._read_value: Callable[[StreamTracker, float, bytes], None] = _unset

    @property
    def reusable(self) -> bool:
        reader = self.reader
        head = reader.head
        return (
            self._keep_alive
            and self._clean_end
            and head is not None
            and self.tracker.rec.outcome == "ok"
            and not reader.trailing_data
            and "close" not in head.headers.get("connection", "").lower()
        )

    def receive(self, t: float, data: bytes) -> None:
        if self._lane:
            # The hottest path: the read is one whole chunk holding one one-line data event,
            # for a dialect that reads an event from its bytes (OpenAI's chunks); the chunked
            # reader and the SSE decoder are between chunks and events, and stay there. It pays
            # 13,000 instructions a token (34-37 % of the read; bench/RESULTS.md, "What each
            # shortcut of the read path pays"); tests/stream/test_lane.py holds it equal.
            value = chunk_event(data)
            tracker = self.tracker
            if value is not None and tracker.state is _STREAMING:
                # The chunk data's size: lane.chunk_data_size's rule inline, since the call
                # costs 340 instructions a token (1.5 %; bench/RESULTS.md, same section);
                # tests/stream/test_lane.py holds the copy equal to it at every size.
                tracker.rec.bytes += len(data) - (6 if data[2] == 13 else 7)
                self._read_value(tracker, t, value)
                if tracker.state is not _STREAMING:
                    self._lane = False
                    self._on_body(t, b"")
                return
        if self.state is not _STREAM or not data:
            super().receive(t, data)
        else:
            # The hot path (one read per token event): body bytes straight to the tracker; the
            # enum members are module constants here, read per event.
            reader = self.reader
            try:
                payload = reader.feed(data)
            except HTTPProtocolError as exc:
                self._handle(t, True, exc.payload, f"{type(exc).__name__}: {exc}")
                return
            if payload:
                self.body.feed(t, payload)
            if self.tracker.state is not _STREAMING or reader.state is _READER_DONE:
                self._on_body(t, b"")
        self._lane = (
            self._read_value is not _unset
            and self.state is _STREAM
            and self.tracker.state is _STREAMING
            and (chunks := self.reader.chunks) is not None
            and chunks.between_chunks
            and self.body.decoder.lane_ready
        )

    def _on_head(self, t: float, head: ResponseHead) -> None:
        tracker = self.tracker
        body = self.body
        body.head(t, head.status, head.content_type)
        if tracker.finished:  # not an event stream, or a 101
            self.state = ExchangeState.CLOSED
            return
        self.state = ExchangeState.STREAM
        read_value = body.read_bytes
        if read_value is not None:
            self._read_value = read_value

    def _on_body(self, t: float, payload: bytes) -> None:
        tracker = self.tracker
        if payload:
            self.body.feed(t, payload)
        if self.reader.complete:
            self.body.eof(t, True)
            self._clean_end = True
            self.state = ExchangeState.CLOSED
        elif tracker.state is _FINISHED:
            self.state = ExchangeState.CLOSED
        elif tracker.state is _AFTER_DONE and self.state is not ExchangeState.AFTER_DONE:
            self.state = ExchangeState.AFTER_DONE
            self.cutoff = t + AFTER_DONE_WAIT_S

    def _body_eof(self, t: float) -> None:
        reader = self.reader
        complete = reader.complete or reader.framed_by_close
        self.body.eof(t, complete)
        self._clean_end = False  # a closed connection is never reused
