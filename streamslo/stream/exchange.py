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

from enum import Enum
from typing import Literal

from streamslo.errors import HTTPProtocolError
from streamslo.stream.caps import AFTER_DONE_WAIT_S, ERROR_BODY_WAIT_S, MAX_ERROR_BODY_BYTES
from streamslo.stream.http1 import ReaderState, ResponseHead, ResponseReader
from streamslo.stream.tracker import StreamTracker, TrackerState

__all__ = ["ExchangeState", "Expiry", "HTTPExchange", "SSEExchange"]

Expiry = Literal["stall", "deadline"]
"""Why a wait ran out: no progress for the stall timeout, or a deadline (the request's, or a
short wait's :attr:`HTTPExchange.cutoff`)."""


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

    def _timer(self, t: float, why: Expiry) -> None:
        """The stall timeout or the request's deadline ended the stream at ``t``."""
        if why == "deadline":
            self.tracker.on_deadline(t, self._request_timeout)
        else:
            self.tracker.on_stall(t, self._stall_timeout)
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
            self.tracker.on_protocol_error(t, error)
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
        self.tracker.on_transport_error(t, exc)
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
                self.tracker.on_protocol_error(t, "the connection closed inside the response head")
            else:
                self.tracker.on_transport_error(
                    t, ConnectionResetError("closed before any response")
                )
            self.state = ExchangeState.CLOSED
            return
        self._body_eof(t)
        self.state = ExchangeState.CLOSED

    def _error_done(self) -> None:
        head = self.reader.head
        assert head is not None
        self.tracker.on_http_error(self._head_t, head.status, bytes(self._error_body))
        self.state = ExchangeState.CLOSED


_STREAM = ExchangeState.STREAM
_STREAMING = TrackerState.STREAMING
_READER_DONE = ReaderState.DONE


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
        self._keep_alive = keep_alive
        self._clean_end = False

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
        if self.state is not _STREAM or not data:
            super().receive(t, data)
            return
        # The hot path (one read per token event): body bytes straight to the tracker; the
        # enum members are module constants here, read per event.
        reader = self.reader
        try:
            payload = reader.feed(data)
        except HTTPProtocolError as exc:
            self._handle(t, True, exc.payload, f"{type(exc).__name__}: {exc}")
            return
        tracker = self.tracker
        if payload:
            tracker.on_sse_bytes(t, payload)
        if tracker.state is not _STREAMING or reader.state is _READER_DONE:
            self._on_body(t, b"")

    def _on_head(self, t: float, head: ResponseHead) -> None:
        tracker = self.tracker
        tracker.on_response(t, head.status, head.content_type)
        if tracker.finished:  # not an event stream, or a 101
            self.state = ExchangeState.CLOSED
        else:
            self.state = ExchangeState.STREAM

    def _on_body(self, t: float, payload: bytes) -> None:
        tracker = self.tracker
        if payload:
            tracker.on_sse_bytes(t, payload)
        if self.reader.complete:
            tracker.on_eof(t, True)
            self._clean_end = True
            self.state = ExchangeState.CLOSED
        elif not tracker.wants_bytes:
            self.state = ExchangeState.CLOSED
        elif tracker.reading_after_done and self.state is not ExchangeState.AFTER_DONE:
            self.state = ExchangeState.AFTER_DONE
            self.cutoff = t + AFTER_DONE_WAIT_S

    def _body_eof(self, t: float) -> None:
        reader = self.reader
        complete = reader.complete or reader.framed_by_close
        self.tracker.on_eof(t, complete)
        self._clean_end = False  # a closed connection is never reused
