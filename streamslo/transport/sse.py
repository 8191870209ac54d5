"""SSE over HTTP/1.1: one POST, the event stream read to its end (``Connection: close``)."""

from __future__ import annotations

import socket

from streamslo.stream.http1 import ResponseReader, build_request
from streamslo.stream.tracker import StreamTracker
from streamslo.transport.common import ClientLimits, Target, connect, guard, now, read
from streamslo.transport.watchdog import WATCHDOG, Watch

__all__ = ["SSEConnection", "stream_sse"]

_ERROR_BODY_MAX = 8192


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
        deadline = tracker.rec.t0 + self.limits.request_timeout
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        headers.update(self.target.headers)
        request = build_request(
            "POST", self.target.host_header, self.target.prefix + path, body, headers, keep_alive=self.keep_alive
        )
        reusable = False

        def run() -> None:
            nonlocal reusable
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

    def _exchange(self, request: bytes, tracker: StreamTracker, deadline: float, reused: bool) -> bool:
        """One request on the current (or a new) connection; True if it may be reused."""
        limits = self.limits
        if self._sock is None:
            self._sock = connect(self.target, limits)
            tracker.on_connected(now())
        else:
            tracker.rec.connect_s = None
        sock = self._sock
        watch = WATCHDOG.watch(sock, deadline, limits.stall_timeout)
        try:
            try:
                sock.sendall(request)
            except OSError:
                if reused:
                    raise _IdleClosed from None
                raise
            return self._read_response(sock, tracker, watch, deadline, reused)
        finally:
            WATCHDOG.unwatch(watch)

    def _read_response(
        self, sock: socket.socket, tracker: StreamTracker, watch: Watch, deadline: float, reused: bool
    ) -> bool:
        limits = self.limits
        reader = ResponseReader()
        got_bytes = False
        while True:
            try:
                data = read(sock, tracker, limits, watch)
            except OSError:
                if reused and not got_bytes:
                    raise _IdleClosed from None
                raise
            if data is None:
                return False
            t = watch.last = now()
            if not data:
                if reader.head is None:
                    if reused and not got_bytes:
                        raise _IdleClosed
                    if tracker.rec.status is None:
                        tracker.on_transport_error(t, ConnectionResetError("closed before any response"))
                    return False
                tracker.on_eof(t, reader.complete or reader.framed_by_close)
                return False
            got_bytes = True
            had_head = reader.head is not None
            payload = reader.feed(data)
            head = reader.head
            if head is None:
                continue
            if not had_head:
                if not 200 <= head.status < 300:
                    _read_error_body(sock, reader, payload, tracker, limits, deadline)
                    return False
                tracker.on_response(t, head.status, head.content_type)
                if tracker.finished:
                    return False
            if payload:
                tracker.on_sse_bytes(t, payload)
            if reader.complete:
                tracker.on_eof(t, True)
                closing = "close" in head.headers.get("connection", "").lower()
                return self.keep_alive and tracker.rec.outcome == "ok" and not closing
            if tracker.finished and not (tracker.done_seen and tracker.rec.outcome == "ok"):
                return False


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


def _read_error_body(
    sock: socket.socket,
    reader: ResponseReader,
    first: bytes,
    tracker: StreamTracker,
    limits: ClientLimits,
    deadline: float,
) -> None:
    """Read a little of a non-2xx body for its error message, then record the status."""
    assert reader.head is not None
    body = first
    t = now()
    while not reader.complete and len(body) < _ERROR_BODY_MAX:
        sock.settimeout(min(1.0, max(0.001, deadline - now())))
        try:
            data = sock.recv(limits.recv_size)
        except (TimeoutError, OSError):
            break
        if not data:
            break
        body += reader.feed(data)
    tracker.on_http_error(t, reader.head.status, body[:_ERROR_BODY_MAX])
