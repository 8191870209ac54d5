"""Feed a tracker the way the exchanges do, one call per thing a transport saw (for the unit
tests of the stream core that script the reads themselves rather than whole HTTP responses).

Each call goes where the exchange sends it: a head and body bytes through the SSE framing
(:class:`~streamslo.stream.exchange.SSEBody`), an error answer to
:func:`~streamslo.stream.exchange.http_error`, a WebSocket message or close to
:mod:`streamslo.stream.ws`, a wait that ran out to the tracker's ``expire``. Nothing here decides
an outcome.
"""

from __future__ import annotations

from typing import Any

from streamslo.stream.exchange import SSEBody, http_error, protocol_broken, transport_failed
from streamslo.stream.tracker import StreamTracker, TrackerState
from streamslo.stream.ws import ws_closed, ws_message

__all__ = ["Feed"]


class Feed:
    """A tracker and its SSE framing, fed call by call (attributes not named here are the
    tracker's)."""

    def __init__(self, tracker: StreamTracker) -> None:
        self.tracker = tracker
        self.body = SSEBody(tracker)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tracker, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("tracker", "body"):
            object.__setattr__(self, name, value)
        else:
            setattr(self.tracker, name, value)

    # HTTP
    def on_connected(self, t: float) -> None:
        self.tracker.rec.connect_s = t - self.tracker.rec.t0

    def on_response(self, t: float, status: int, content_type: str | None) -> None:
        self.body.head(t, status, content_type)

    def on_http_error(self, t: float, status: int, body: bytes) -> None:
        http_error(self.tracker, t, status, body)

    def on_sse_bytes(self, t: float, data: bytes) -> None:
        self.body.feed(t, data)

    def on_eof(self, t: float, body_complete: bool) -> None:
        self.body.eof(t, body_complete)

    def on_transport_error(self, t: float, exc: BaseException) -> None:
        transport_failed(self.tracker, t, exc)

    def on_protocol_error(self, t: float, detail: str) -> None:
        protocol_broken(self.tracker, t, detail)

    # waits
    def on_stall(self, t: float, stall_timeout: float) -> None:
        self.tracker.expire(t, "stall", stall_timeout)

    def on_deadline(self, t: float, request_timeout: float) -> None:
        self.tracker.expire(t, "deadline", request_timeout)

    def on_cancel(self, t: float) -> None:
        self.tracker.expire(t, "cancel")

    # WebSocket
    def on_ws_accepted(self, t: float) -> None:
        self.tracker.begin(t, 101)

    def on_ws_message(self, t: float, payload: bytes, text: bool) -> None:
        ws_message(self.tracker, t, payload, text)

    def on_ws_text(self, t: float, text: str) -> None:
        ws_message(self.tracker, t, text.encode("utf-8", "surrogatepass"), True)

    def on_ws_binary(self, t: float, size: int) -> None:
        ws_message(self.tracker, t, bytes(size), False)

    def on_ws_close(self, t: float, code: int | None, reason: str = "") -> None:
        ws_closed(self.tracker, t, code, reason)

    # what the exchange reads of the tracker
    @property
    def wants_bytes(self) -> bool:
        return self.tracker.state is not TrackerState.FINISHED

    @property
    def reading_after_done(self) -> bool:
        return self.tracker.state is TrackerState.AFTER_DONE

    @property
    def pending_bytes(self) -> int:
        return self.body.decoder.pending_bytes
