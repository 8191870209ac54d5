"""SSE over HTTP/1.1: one POST, the event stream read to its end (``Connection: close``)."""

from __future__ import annotations

import socket

from streamslo.stream.http1 import ResponseReader, build_request
from streamslo.stream.tracker import StreamTracker
from streamslo.transport.common import ClientLimits, Target, connect, guard, now, read
from streamslo.transport.watchdog import WATCHDOG, Watch

__all__ = ["stream_sse"]

_ERROR_BODY_MAX = 8192


def stream_sse(
    target: Target,
    path: str,
    body: bytes,
    tracker: StreamTracker,
    limits: ClientLimits,
) -> None:
    """POST ``body`` to ``path`` and read the event stream to its end into ``tracker``.

    Returns when the tracker holds an outcome. Never raises for the server's behaviour; only
    cancellation (``GreenletExit``, ``KeyboardInterrupt``) propagates.
    """
    t0 = tracker.rec.t0
    deadline = t0 + limits.request_timeout
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    headers.update(target.headers)
    request = build_request("POST", target.host_header, target.prefix + path, body, headers)
    sock: socket.socket | None = None
    watch: Watch | None = None

    def run() -> None:
        nonlocal sock, watch
        sock = connect(target, limits)
        tracker.on_connected(now())
        watch = WATCHDOG.watch(sock, deadline, limits.stall_timeout)
        sock.sendall(request)
        reader = ResponseReader()
        while True:
            data = read(sock, tracker, limits, watch)
            if data is None:
                return
            t = watch.last = now()
            if not data:
                if reader.head is None:
                    if tracker.rec.status is None:
                        tracker.on_transport_error(t, ConnectionResetError("closed before any response"))
                    return
                tracker.on_eof(t, reader.complete or reader.framed_by_close)
                return
            had_head = reader.head is not None
            payload = reader.feed(data)
            head = reader.head
            if head is None:
                continue
            if not had_head:
                if not 200 <= head.status < 300:
                    _read_error_body(sock, reader, payload, tracker, limits, deadline)
                    return
                tracker.on_response(t, head.status, head.content_type)
                if tracker.finished:
                    return
            if payload:
                tracker.on_sse_bytes(t, payload)
            if reader.complete:
                tracker.on_eof(t, True)
                return
            if tracker.finished and not (tracker.done_seen and tracker.rec.outcome == "ok"):
                return

    try:
        guard(tracker, run)
    finally:
        if watch is not None:
            WATCHDOG.unwatch(watch)
        if sock is not None:
            sock.close()


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
