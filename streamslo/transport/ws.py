"""WebSocket streams (SPEC §2): websockets' Sans-I/O client protocol over a blocking socket,
one connection carrying one request after another."""

from __future__ import annotations

import socket

from websockets.client import ClientProtocol
from websockets.exceptions import InvalidState
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

from streamslo.stream.tracker import StreamTracker
from streamslo.transport.common import ClientLimits, Target, connect, guard, now, read
from streamslo.transport.watchdog import WATCHDOG, Watch

__all__ = ["WSConnection"]


class _IdleClosed(Exception):
    """A reused WebSocket was closed by the server before this request got any answer."""


class WSConnection:
    """One WebSocket connection that carries requests one after another (SPEC §2).

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
        self._pending: list[tuple[Opcode, bytes]] = []
        self._fragments: list[bytes] = []
        self._frag_op: Opcode | None = None
        self._watch: Watch | None = None

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
            if proto is not None and proto.state.name == "OPEN":
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
        tracker.on_connected(now())
        self._watch = WATCHDOG.watch(self._sock, deadline, limits.stall_timeout)
        proto = ClientProtocol(parse_uri(self.target.ws_url(self.path)), max_size=limits.max_event_bytes)
        self._proto = proto
        request = proto.connect()
        for k, v in self.target.headers.items():
            request.headers[k] = v
        proto.send_request(request)
        self._flush()
        while True:
            data = read(self._sock, tracker, limits, self._watch)
            if data is None:
                return False
            t = self._watch.last = now()
            if data:
                proto.receive_data(data)
            else:
                proto.receive_eof()
            for event in proto.events_received():
                if isinstance(event, Response):
                    if event.status_code == 101 and proto.handshake_exc is None:
                        tracker.on_ws_accepted(t)
                        return True
                    tracker.on_http_error(t, event.status_code, bytes(event.body or b""))
                    return False
            if not data:
                tracker.on_transport_error(t, ConnectionResetError("closed during the WebSocket handshake"))
                return False

    def request(self, body: bytes, tracker: StreamTracker) -> None:
        """Send one request frame and read its stream into ``tracker``.

        Opens the connection first when needed. Leaves it open after an ``ok`` stream so the
        next request can reuse it; closes it after anything else.
        """
        deadline = tracker.rec.t0 + self.limits.request_timeout

        def run() -> None:
            if self._proto is not None and self._proto.state.name != "OPEN":
                self.close()  # the server's close arrived with the previous [DONE]
            reused = self._sock is not None
            if self._sock is None:
                if not self._open(tracker, deadline):
                    return
            else:
                tracker.rec.connect_s = None
                tracker.on_ws_accepted(now())
                self._watch = WATCHDOG.watch(self._sock, deadline, self.limits.stall_timeout)
            assert self._proto is not None and self._sock is not None
            try:
                try:
                    self._proto.send_text(body)
                    self._flush()
                except (OSError, InvalidState):
                    if not reused:
                        raise
                    raise _IdleClosed from None
                self._pump(tracker, idle_close_retry=reused)
            except _IdleClosed:
                # The server had closed the idle connection normally after the previous
                # [DONE] (SPEC §2 allows it): this request never reached it. Send it again
                # on a fresh connection.
                self.close()
                if self._watch is not None:
                    WATCHDOG.unwatch(self._watch)
                if self._open(tracker, deadline):
                    assert self._proto is not None
                    self._proto.send_text(body)
                    self._flush()
                    self._pump(tracker, idle_close_retry=False)

        try:
            guard(tracker, run)
        finally:
            if self._watch is not None:
                WATCHDOG.unwatch(self._watch)
                self._watch = None
            if tracker.rec.outcome != "ok":
                self.close()

    def _pump(self, tracker: StreamTracker, idle_close_retry: bool = False) -> None:
        proto, sock, watch = self._proto, self._sock, self._watch
        assert proto is not None and sock is not None and watch is not None
        first = True  # nothing of this request's answer has arrived yet
        while not tracker.finished:
            try:
                data = read(sock, tracker, self.limits, watch)
            except OSError:
                if first and idle_close_retry:
                    raise _IdleClosed from None
                raise
            if data is None:
                return
            t = watch.last = now()
            if data:
                proto.receive_data(data)
            else:
                proto.receive_eof()
            for frame in proto.events_received():
                if not isinstance(frame, Frame):
                    continue
                op = frame.opcode
                if op is Opcode.CLOSE:
                    rcvd = proto.close_rcvd
                    if first and idle_close_retry and (rcvd is None or rcvd.code in (1000, 1001)):
                        raise _IdleClosed
                    tracker.on_ws_close(t, rcvd.code if rcvd else None, rcvd.reason if rcvd else "")
                    break
                if op in (Opcode.PING, Opcode.PONG):
                    continue
                first = False
                if op is Opcode.CONT:
                    self._fragments.append(bytes(frame.data))
                    if not frame.fin:
                        continue
                    op = self._frag_op or Opcode.TEXT
                    payload = b"".join(self._fragments)
                    self._fragments, self._frag_op = [], None
                elif not frame.fin:
                    self._fragments, self._frag_op = [bytes(frame.data)], op
                    continue
                else:
                    payload = bytes(frame.data)
                if op is Opcode.TEXT:
                    tracker.on_ws_text(t, payload.decode("utf-8", "replace"))
                else:
                    tracker.on_ws_binary(t, len(payload))
                if tracker.finished:
                    break
            if tracker.finished:
                return
            exc = proto.parser_exc
            if first and idle_close_retry and (isinstance(exc, EOFError) or not data):
                raise _IdleClosed
            if exc is not None:
                if isinstance(exc, EOFError):
                    tracker.on_ws_close(t, None, "connection closed without a close frame")
                else:
                    tracker.on_protocol_error(t, f"{type(exc).__name__}: {exc}")
                return
            self._flush()
            if not data:
                tracker.on_ws_close(t, None, "connection closed without a close frame")
                return
