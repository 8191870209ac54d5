"""WebSocket streams: the Sans-I/O handshake and frame readers (:mod:`streamslo.stream.ws`)
over a blocking socket, one connection carrying one request after another."""

from __future__ import annotations

import socket

from websockets.client import ClientProtocol
from websockets.exceptions import InvalidState
from websockets.frames import Frame
from websockets.protocol import State
from websockets.uri import parse_uri

from streamslo.stream.tracker import StreamTracker
from streamslo.stream.ws import WSHandshake, WSReader
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
from streamslo.transport.watchdog import WATCHDOG, Watch

__all__ = ["WSConnection"]


class _IdleClosed(Exception):
    """A reused WebSocket was closed by the server before this request got any answer."""


class WSConnection:
    """One WebSocket connection that carries requests one after another.

    After a request's ``[DONE]`` the connection may carry the next request; either side may
    close it with 1000. A server that closed it while idle costs one transparent retry.

    Args:
        target: the server.
        path: the WebSocket path (``/v1/ws``).
        limits: timeouts and sizes.
    """

    def __init__(self, target: Target, path: str, limits: ClientLimits) -> None:
        self.target = target
        self.path = path
        self.limits = limits
        self._sock: socket.socket | None = None
        self._proto: ClientProtocol | None = None
        self._watch: Watch | None = None
        self._early: list[Frame] = []  # frames that came with the 101, before any request

    @property
    def is_open(self) -> bool:
        return self._sock is not None

    def close(self, code: int = 1000) -> None:
        """Close the connection (1000, normal) and forget it."""
        sock, proto = self._sock, self._proto
        self._sock = self._proto = None
        if sock is None:
            return
        try:
            if proto is not None and proto.state is State.OPEN:
                proto.send_close(code)
                for chunk in proto.data_to_send():
                    if chunk:
                        sock.sendall(chunk)
        except OSError:
            pass
        finally:
            sock.close()

    def _flush(self) -> None:
        assert self._sock is not None and self._proto is not None
        for chunk in self._proto.data_to_send():
            if chunk:
                self._sock.sendall(chunk)

    def _open(self, tracker: StreamTracker, deadline: float) -> bool:
        """Connect and handshake; False when the tracker already has an outcome."""
        limits = self.limits
        self._sock = connect(self.target, limits)
        tracker.rec.connect_s = now() - tracker.rec.t0
        self._watch = WATCHDOG.watch(self._sock, deadline, limits.stall_timeout)
        proto = ClientProtocol(
            parse_uri(self.target.ws_url(self.path)), max_size=limits.max_event_bytes
        )
        self._proto = proto
        request = proto.connect()
        for k, v in self.target.headers.items():
            request.headers[k] = v
        proto.send_request(request)
        self._flush()
        hs = WSHandshake(proto, tracker, limits.stall_timeout, limits.request_timeout)
        pump(self._sock, hs, limits, self._watch, deadline)
        if not hs.accepted:
            return False
        self._early = hs.early_frames
        return True

    def request(self, body: bytes, tracker: StreamTracker) -> None:
        """Send one request frame and read its stream into ``tracker``.

        Opens the connection first when needed. Leaves it open after an ``ok`` stream so the
        next request can reuse it; closes it after anything else. Never raises for the
        server's behaviour; only cancellation propagates.
        """
        deadline = tracker.deadline(self.limits.request_timeout)
        apply_timeouts(tracker, self.limits)
        reusable = False

        def run() -> None:
            nonlocal reusable
            if self._proto is not None and self._proto.state is not State.OPEN:
                self.close()  # the server's close arrived with the previous [DONE]
            if self._sock is not None and unasked_bytes(self._sock):
                # Frames after the last [DONE] belong to no request (or the server is
                # closing): the next request would read them as its answer. Start afresh.
                self.close()
            reused = self._sock is not None
            try:
                if reused:
                    tracker.rec.connect_s = None
                    tracker.begin(now(), 101)
                    assert self._sock is not None
                    self._watch = WATCHDOG.watch(self._sock, deadline, self.limits.stall_timeout)
                    self._early = []
                elif not self._open(tracker, deadline):
                    return
                reusable = self._send_and_read(body, tracker, deadline, reused)
            except _IdleClosed:
                # The server had closed the idle connection (normally, after the previous
                # [DONE]): this request never reached it. Send it again on a fresh connection.
                self.close()
                self._unwatch()
                if self._open(tracker, deadline):
                    reusable = self._send_and_read(body, tracker, deadline, False)

        try:
            guard(tracker, run)
        finally:
            self._unwatch()
            if not reusable or tracker.rec.outcome != "ok":
                self.close()

    def _unwatch(self) -> None:
        if self._watch is not None:
            WATCHDOG.unwatch(self._watch)
            self._watch = None

    def _send_and_read(
        self, body: bytes, tracker: StreamTracker, deadline: float, reused: bool
    ) -> bool:
        """Send the request frame and read its answer; True if the connection may be reused."""
        proto, sock, watch = self._proto, self._sock, self._watch
        assert proto is not None and sock is not None and watch is not None
        try:
            proto.send_text(body)
            self._flush()
        except (OSError, InvalidState):
            if not reused:
                raise
            raise _IdleClosed from None
        limits = self.limits
        reader = WSReader(
            proto, tracker, limits.stall_timeout, limits.request_timeout, idle_close_retry=reused
        )
        t = now()
        reader.frames(t, list(self._early))
        self._early = []
        if not reader.done:
            pump(sock, reader, limits, watch, deadline, after_read=self._flush)
        if reader.idle_closed:
            raise _IdleClosed
        return not reader.dirty
