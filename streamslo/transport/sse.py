"""SSE over HTTP/1.1: one POST, the event stream read to its end, the connection kept alive
for the next request when the stream ended ``ok``."""

from __future__ import annotations

import socket

from streamslo.stream.exchange import SSEExchange
from streamslo.stream.http1 import build_request
from streamslo.stream.tracker import StreamTracker
from streamslo.transport.common import (
    ClientLimits,
    Target,
    apply_timeouts,
    connect,
    guard,
    now,
    pump,
    unasked_bytes,
)
from streamslo.transport.watchdog import WATCHDOG

__all__ = ["SSEConnection", "stream_sse"]


class _IdleClosed(Exception):
    """A reused connection was closed by the server before this request got any byte."""


class SSEConnection:
    """One HTTP/1.1 connection carrying SSE requests one after another (keep-alive).

    A stream that ended ``ok`` with a complete body leaves the connection open for the next
    request, so a user does not pay a TCP connect per stream (nor the server an accept). A
    server that closed the idle connection meanwhile (allowed at any time between requests)
    costs one transparent retry on a fresh connection; anything else closes it.

    Args:
        target: the server.
        limits: timeouts and sizes.
        keep_alive: False sends ``Connection: close`` and never reuses.
    """

    def __init__(self, target: Target, limits: ClientLimits, keep_alive: bool = True) -> None:
        self.target = target
        self.limits = limits
        self.keep_alive = keep_alive
        self._sock: socket.socket | None = None

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def request(self, path: str, body: bytes, tracker: StreamTracker) -> None:
        """POST ``body`` to ``path`` and read the event stream to its end into ``tracker``.

        Returns when the tracker holds an outcome. Never raises for the server's behaviour;
        only cancellation (``GreenletExit``, ``KeyboardInterrupt``) propagates.
        """
        deadline = tracker.deadline(self.limits.request_timeout)
        apply_timeouts(tracker, self.limits)
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        headers.update(self.target.headers)
        request = build_request(
            "POST",
            self.target.host_header,
            self.target.prefix + path,
            body,
            headers,
            keep_alive=self.keep_alive,
        )
        reusable = False

        def run() -> None:
            nonlocal reusable
            if self._sock is not None and unasked_bytes(self._sock):
                self.close()  # stray bytes or the server's close: start afresh
            try:
                reusable = self._exchange(request, tracker, deadline, reused=self._sock is not None)
            except _IdleClosed:
                self.close()
                reusable = self._exchange(request, tracker, deadline, reused=False)

        try:
            guard(tracker, run)
        finally:
            if not reusable:
                self.close()

    def _exchange(
        self, request: bytes, tracker: StreamTracker, deadline: float, reused: bool
    ) -> bool:
        """One request on the current (or a new) connection; True if it may be reused."""
        limits = self.limits
        if self._sock is None:
            self._sock = connect(self.target, limits)
            tracker.rec.connect_s = now() - tracker.rec.t0
        else:
            tracker.rec.connect_s = None
        sock = self._sock
        watch = WATCHDOG.watch(sock, deadline, limits.stall_timeout)
        watch.last = tracker.progress_t
        try:
            try:
                sock.sendall(request)
            except OSError:
                if reused:
                    raise _IdleClosed from None
                raise
            ex = SSEExchange(
                tracker,
                limits.stall_timeout,
                limits.request_timeout,
                self.keep_alive,
                idle_close_retry=reused,
            )
            pump(sock, ex, limits, watch, deadline)
            if ex.idle_closed:
                raise _IdleClosed
            return ex.reusable
        finally:
            WATCHDOG.unwatch(watch)


def stream_sse(
    target: Target,
    path: str,
    body: bytes,
    tracker: StreamTracker,
    limits: ClientLimits,
) -> None:
    """One request on its own connection (``Connection: close``): see :class:`SSEConnection`."""
    conn = SSEConnection(target, limits, keep_alive=False)
    try:
        conn.request(path, body, tracker)
    finally:
        conn.close()
