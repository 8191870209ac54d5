"""What both transports share: the target, the client's limits, connecting, and one read
under the stall/deadline rules, with transport failures mapped onto the tracker."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from websockets.exceptions import PayloadTooBig

from streamslo.stream.http1 import HTTPProtocolError
from streamslo.stream.sse import DEFAULT_MAX_EVENT_BYTES
from streamslo.stream.tracker import StreamTracker
from streamslo.transport.watchdog import Watch

__all__ = ["ClientLimits", "Target", "connect", "guard", "make_ssl_context", "now", "read"]

now = _now = time.perf_counter


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


def connect(target: Target, limits: ClientLimits) -> socket.socket:
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


def _expire(tracker: StreamTracker, watch: Watch, limits: ClientLimits) -> None:
    now = _now()
    if watch.expired == "deadline":
        tracker.on_deadline(now, limits.request_timeout)
    else:
        tracker.on_stall(now, limits.stall_timeout)


def read(sock: socket.socket, tracker: StreamTracker, limits: ClientLimits, watch: Watch) -> bytes | None:
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


def guard(tracker: StreamTracker, run: Callable[[], None]) -> None:
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
