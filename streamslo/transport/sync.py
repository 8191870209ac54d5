"""Blocking-socket transports for one stream: SSE over HTTP/1.1 and WebSocket.

They do the I/O around the Sans-I/O core (:mod:`streamslo.stream`): connect, write the request,
read, and hand each read to the tracker with one ``perf_counter()`` timestamp taken right after
the read returned. Under Locust, gevent patches :mod:`socket` and :mod:`ssl`, so the same code
runs cooperatively with hundreds of streams per process; outside gevent it simply blocks.

A process-wide :class:`ReadWatchdog` ends any read that goes silent for the stall timeout
(``stalled``) or runs past the request deadline (``timeout``); reads themselves carry no timer. A ``BaseException`` that is
not an ``Exception`` (gevent's ``GreenletExit`` when Locust stops a user, ``KeyboardInterrupt``)
records the stream as ``cancelled`` and propagates.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from websockets.client import ClientProtocol
from websockets.exceptions import InvalidState, PayloadTooBig
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

from streamslo.stream.http1 import HTTPProtocolError, ResponseReader, build_request
from streamslo.stream.sse import DEFAULT_MAX_EVENT_BYTES
from streamslo.stream.tracker import StreamTracker

__all__ = ["ClientLimits", "ReadWatchdog", "Target", "WSConnection", "make_ssl_context", "stream_sse"]

_now = time.perf_counter
_ERROR_BODY_MAX = 8192


@dataclass(frozen=True)
class ClientLimits:
    """How long the client waits, how much it accepts, and how it reads."""

    stall_timeout: float = 10.0
    """Seconds without a byte before the client gives up (``stalled``)."""
    request_timeout: float = 300.0
    """Seconds a whole request may take (``timeout``)."""
    connect_timeout: float = 10.0
    """Seconds to establish TCP (and TLS)."""
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    """The largest SSE event or WebSocket message accepted (``malformed`` beyond)."""
    recv_size: int = 65536
    """Bytes asked for per read."""
    read_pause: float = 0.0
    """Slow readers: seconds to sleep between reads, so the server feels back-pressure."""
    rcvbuf: int | None = None
    """Slow readers: a small SO_RCVBUF makes the back-pressure reach the server sooner."""


@dataclass(frozen=True)
class Target:
    """Where the streams go: ``http(s)://host:port/prefix``."""

    scheme: str
    host: str
    port: int
    prefix: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    """Extra request headers (auth, ``--header``)."""
    ssl_context: ssl.SSLContext | None = None

    @classmethod
    def from_url(
        cls, url: str, headers: dict[str, str] | None = None, insecure: bool = False
    ) -> Target:
        """Parse a base URL such as ``http://127.0.0.1:8000`` or ``https://host/api``.

        Raises:
            ValueError: not an http(s) URL.
        """
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        ctx = make_ssl_context(insecure) if parts.scheme == "https" else None
        return cls(parts.scheme, parts.hostname, port, parts.path.rstrip("/"), dict(headers or {}), ctx)

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"

    def ws_url(self, path: str) -> str:
        scheme = "wss" if self.scheme == "https" else "ws"
        return f"{scheme}://{self.host_header}{self.prefix}{path}"


def make_ssl_context(insecure: bool = False) -> ssl.SSLContext:
    """One TLS context per process (creating one costs tens of ms of CPU)."""
    ctx = ssl.create_default_context()
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _connect(target: Target, limits: ClientLimits) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in target.host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if limits.rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, limits.rcvbuf)
        sock.settimeout(limits.connect_timeout)
        sock.connect((target.host, target.port))
        if target.ssl_context is not None:
            sock = target.ssl_context.wrap_socket(sock, server_hostname=target.host)
        sock.settimeout(None)  # reads are timed by the watchdog, not by a timer per recv
    except BaseException:
        sock.close()
        raise
    return sock


class _Watch:
    """One request's read deadline, watched by :class:`ReadWatchdog`."""

    __slots__ = ("deadline", "expired", "last", "sock", "stall")

    def __init__(self, sock: socket.socket, deadline: float, stall: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.stall = stall
        self.last = _now()
        self.expired: str | None = None  # "stall" or "deadline" once the watchdog ended it


class ReadWatchdog:
    """Ends reads that go silent past the stall timeout or run past the deadline.

    One per process, scanning every ``period`` seconds, instead of a timer per read: a
    socket timeout costs gevent a timer object on every ``recv`` (several microseconds a
    token at hundreds of streams). An expired read is ended by shutting its socket down; the
    reader then finds why in its watch. Under gevent the scan runs in a greenlet (threads are
    patched); without it, in a daemon thread.
    """

    def __init__(self, period: float = 0.05) -> None:
        self.period = period
        self._active: set[_Watch] = set()
        self._pid = 0

    def watch(self, sock: socket.socket, deadline: float, stall: float) -> _Watch:
        if self._pid != os.getpid():  # first use, or a forked child: start the scanner here
            self._pid = os.getpid()
            self._active = set()
            threading.Thread(target=self._loop, name="streamslo-read-watchdog", daemon=True).start()
        w = _Watch(sock, deadline, stall)
        self._active.add(w)
        return w

    def unwatch(self, w: _Watch) -> None:
        self._active.discard(w)

    def _loop(self) -> None:
        while True:
            time.sleep(self.period)
            now = _now()
            for w in list(self._active):
                if w.expired is not None:
                    continue
                if now >= w.deadline:
                    w.expired = "deadline"
                elif now - w.last >= w.stall:
                    w.expired = "stall"
                else:
                    continue
                with contextlib.suppress(OSError):
                    w.sock.shutdown(socket.SHUT_RDWR)


_WATCHDOG = ReadWatchdog()


def _expire(tracker: StreamTracker, watch: _Watch, limits: ClientLimits) -> None:
    now = _now()
    if watch.expired == "deadline":
        tracker.on_deadline(now, limits.request_timeout)
    else:
        tracker.on_stall(now, limits.stall_timeout)


def _read(sock: socket.socket, tracker: StreamTracker, limits: ClientLimits, watch: _Watch) -> bytes | None:
    """One read under the stall/deadline rules; None when the tracker was ended by them."""
    if watch.expired is None and _now() >= watch.deadline:
        watch.expired = "deadline"
    if watch.expired is None and limits.read_pause:
        time.sleep(min(limits.read_pause, max(0.0, watch.deadline - _now())))
    if watch.expired is not None:
        _expire(tracker, watch, limits)
        return None
    try:
        data = sock.recv(limits.recv_size)
    except OSError:
        if watch.expired is None:
            raise
        data = b""
    if watch.expired is not None:
        _expire(tracker, watch, limits)
        return None
    return data


def _guard(tracker: StreamTracker, run: Callable[[], None]) -> None:
    """Run ``run``; map transport failures and cancellation onto the tracker."""
    try:
        run()
    except (HTTPProtocolError, PayloadTooBig) as exc:
        tracker.on_protocol_error(_now(), f"{type(exc).__name__}: {exc}")
    except (OSError, ssl.SSLError, EOFError) as exc:
        tracker.on_transport_error(_now(), exc)
    except BaseException:
        if not tracker.finished:
            tracker.on_cancel(_now())
        raise


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
    watch: _Watch | None = None

    def run() -> None:
        nonlocal sock, watch
        sock = _connect(target, limits)
        tracker.on_connected(_now())
        watch = _WATCHDOG.watch(sock, deadline, limits.stall_timeout)
        sock.sendall(request)
        reader = ResponseReader()
        while True:
            data = _read(sock, tracker, limits, watch)
            if data is None:
                return
            t = watch.last = _now()
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
        _guard(tracker, run)
    finally:
        if watch is not None:
            _WATCHDOG.unwatch(watch)
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
    t = _now()
    while not reader.complete and len(body) < _ERROR_BODY_MAX:
        sock.settimeout(min(1.0, max(0.001, deadline - _now())))
        try:
            data = sock.recv(limits.recv_size)
        except (TimeoutError, OSError):
            break
        if not data:
            break
        body += reader.feed(data)
    tracker.on_http_error(t, reader.head.status, body[:_ERROR_BODY_MAX])


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
        self._watch: _Watch | None = None

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
        self._sock = _connect(self.target, limits)
        tracker.on_connected(_now())
        self._watch = _WATCHDOG.watch(self._sock, deadline, limits.stall_timeout)
        proto = ClientProtocol(parse_uri(self.target.ws_url(self.path)), max_size=limits.max_event_bytes)
        self._proto = proto
        request = proto.connect()
        for k, v in self.target.headers.items():
            request.headers[k] = v
        proto.send_request(request)
        self._flush()
        while True:
            data = _read(self._sock, tracker, limits, self._watch)
            if data is None:
                return False
            t = self._watch.last = _now()
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
                tracker.on_ws_accepted(_now())
                self._watch = _WATCHDOG.watch(self._sock, deadline, self.limits.stall_timeout)
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
                    _WATCHDOG.unwatch(self._watch)
                if self._open(tracker, deadline):
                    assert self._proto is not None
                    self._proto.send_text(body)
                    self._flush()
                    self._pump(tracker, idle_close_retry=False)

        try:
            _guard(tracker, run)
        finally:
            if self._watch is not None:
                _WATCHDOG.unwatch(self._watch)
                self._watch = None
            if tracker.rec.outcome != "ok":
                self.close()

    def _pump(self, tracker: StreamTracker, idle_close_retry: bool = False) -> None:
        proto, sock, watch = self._proto, self._sock, self._watch
        assert proto is not None and sock is not None and watch is not None
        first = True  # nothing of this request's answer has arrived yet
        while not tracker.finished:
            try:
                data = _read(sock, tracker, self.limits, watch)
            except OSError:
                if first and idle_close_retry:
                    raise _IdleClosed from None
                raise
            if data is None:
                return
            t = watch.last = _now()
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
