"""What both transports share: the target, the client's limits, connecting, and one read
under the stall/deadline rules, with transport failures mapped onto the tracker."""

from __future__ import annotations

import errno
import logging
import os
import select
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from streamslo.errors import ProtocolError
from streamslo.stream.caps import DEFAULT_MAX_EVENT_BYTES
from streamslo.stream.exchange import protocol_broken, transport_failed
from streamslo.stream.tracker import StreamTracker
from streamslo.transport.reactor import REACTOR, Exchange, ask_kernel_stamps, reactor_enabled
from streamslo.transport.watchdog import Watch

__all__ = [
    "ClientLimits",
    "Exchange",
    "Target",
    "apply_timeouts",
    "connect",
    "guard",
    "make_ssl_context",
    "now",
    "pump",
    "recv",
    "unasked_bytes",
]

now = _now = time.perf_counter
log = logging.getLogger(__name__)
_LOGGED: set[type[BaseException]] = set()


@dataclass(frozen=True)
class ClientLimits:
    """How long the client waits, how much it accepts, and how it reads."""

    stall_timeout: float = 10.0
    """Seconds without progress (the response head, then a token) before the client gives
    up (``stalled``)."""
    request_timeout: float = 300.0
    """Seconds a whole request may take (``timeout``)."""
    first_token_timeout: float | None = None
    """Seconds from the response head to the first token (None: the stall timeout)."""
    connect_timeout: float = 10.0
    """Seconds to establish TCP (and TLS, unless :attr:`tls_timeout` says otherwise)."""
    tls_timeout: float | None = None
    """Seconds the TLS handshake may take once TCP is up (None: :attr:`connect_timeout`). A
    plain-HTTP port never answers a TLS hello (it waits for a request head): past this the
    connection fails saying the server did not answer TLS."""
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
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    """Extra request headers (auth, ``--header``)."""
    ssl_context: ssl.SSLContext | None = None

    @classmethod
    def from_url(
        cls, url: str, headers: dict[str, str] | None = None, insecure: bool = False
    ) -> Target:
        """Parse a base URL such as ``http://127.0.0.1:8000`` or ``https://host/api``.

        A base URL that ends in ``/v1``, as OpenAI's clients take it
        (``http://127.0.0.1:8000/v1``), means the same server: every path streamslo asks for
        starts with ``/v1`` already.

        Raises:
            ValueError: not an http(s) URL.
        """
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        ctx = make_ssl_context(insecure) if parts.scheme == "https" else None
        prefix = parts.path.rstrip("/")
        if prefix == "/v1" or prefix.endswith("/v1"):
            prefix = prefix[: -len("/v1")]
        return cls(parts.scheme, parts.hostname, port, prefix, dict(headers or {}), ctx)

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


def _handshake(sock: socket.socket, limits: ClientLimits) -> None:
    """The TLS handshake of a wrapped socket, bounded by :attr:`ClientLimits.tls_timeout`.

    Raises:
        ssl.SSLError: the handshake failed, or got no answer in time ("the server did not
            answer TLS": the standard library and gevent each word a timeout their own way).
    """
    wait = limits.connect_timeout if limits.tls_timeout is None else limits.tls_timeout
    sock.settimeout(wait)
    began = time.monotonic()
    try:
        getattr(sock, "do_handshake")()  # noqa: B009 (an ssl.SSLSocket, or gevent's)
    except (TimeoutError, ssl.SSLError) as exc:
        # gevent raises a plain SSLError for its timeout: the time spent tells, not its words
        if isinstance(exc, TimeoutError) or time.monotonic() - began >= wait:
            raise ssl.SSLError(
                errno.ETIMEDOUT,
                f"the server did not answer TLS within {wait:g} s (a plain-HTTP port waits "
                "for a request head and never answers a TLS hello: use http://)",
            ) from None
        raise


def connect(target: Target, limits: ClientLimits) -> socket.socket:
    """A TCP (and TLS) connection to ``target``, with no timeout left on it."""
    sock = socket.socket(
        socket.AF_INET6 if ":" in target.host else socket.AF_INET, socket.SOCK_STREAM
    )
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if limits.rcvbuf:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, limits.rcvbuf)
        sock.settimeout(limits.connect_timeout)
        sock.connect((target.host, target.port))
        if target.ssl_context is None:
            ask_kernel_stamps(sock)
        else:
            sock = target.ssl_context.wrap_socket(
                sock, server_hostname=target.host, do_handshake_on_connect=False
            )
            _handshake(sock, limits)
        sock.settimeout(None)  # reads are timed by the watchdog, not by a timer per recv
    except BaseException:
        sock.close()
        raise
    return sock


_PEEK = socket.MSG_PEEK | getattr(socket, "MSG_DONTWAIT", 0)


def unasked_bytes(sock: socket.socket) -> bool:
    """Whether bytes (or an EOF) wait on an idle kept-alive connection before a request goes
    out: stray data after the last answer (a flood after ``[DONE]``), or the server's close.
    Either way the connection must not carry the next request (it would read them as its
    answer). One look, no wait.

    A plain connection is looked at with a non-blocking ``MSG_PEEK`` of one byte on the OS
    socket (under gevent the one it wraps), which never yields: gevent's ``select``, even with
    a zero timeout, goes round the event loop, and every other stream's pending reads ran
    before the request was sent (at 16 streams, 0.5-0.7 ms of the request's trip in TTFT).
    TLS keeps the ``select`` (its buffered bytes are not the socket's).
    """
    if isinstance(sock, ssl.SSLSocket) or hasattr(sock, "_sslobj"):
        pending: Callable[[], int] = getattr(sock, "pending")  # noqa: B009 (gevent's TLS too)
        if pending():
            return True
    elif _PEEK & getattr(socket, "MSG_DONTWAIT", 0):
        raw = getattr(sock, "_sock", sock)  # gevent's socket wraps the OS socket
        try:
            raw.recv(1, _PEEK)
        except BlockingIOError:
            return False  # nothing waits: idle and open
        except OSError:
            return True  # reset or broken: not reusable
        return True  # a byte waits, or b"": the server closed
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def recv(sock: socket.socket, limits: ClientLimits, watch: Watch) -> bytes | None:
    """One read; None when the watchdog ended it (``watch.expired`` says why)."""
    if watch.expired is None and _now() >= watch.deadline:
        watch.expired = "deadline"
    if watch.expired is None and limits.read_pause:
        time.sleep(min(limits.read_pause, max(0.0, watch.deadline - _now())))
    if watch.expired is not None:
        return None
    try:
        data = sock.recv(limits.recv_size)
    except OSError:
        if watch.expired is None:
            raise
        return None
    if watch.expired is not None:
        return None
    return data


def _wait_first(
    sock: socket.socket, limits: ClientLimits
) -> Callable[[Watch], bytes | None] | None:
    """Under gevent, a read that waits for the socket to be readable before it reads, or None
    where that does not apply (a plain blocking socket, TLS, a slow reader).

    gevent's ``recv`` tries the read first and waits only when it fails: on a token stream the
    previous read took everything the socket held, so that first try fails nearly every time
    (a ``recv`` system call and an ``EAGAIN`` exception per token). Waiting first skips them
    (the real client's CPU per token: 15-22 % less, SSE and WebSocket, bench/RESULTS.md); a
    wake-up with nothing to read falls back to gevent's own loop. Ends like :func:`recv`: None
    when the watchdog ended the read.

    Only after a short read: a read that filled the buffer is followed by a plain ``recv``
    (:func:`pump`), so a flood is read as before, to its cap, without a wait between reads.
    """
    wait = getattr(sock, "_wait", None)
    event = getattr(sock, "_read_event", None)
    raw = getattr(sock, "_sock", None)
    if (
        wait is None
        or event is None
        or raw is None
        or isinstance(sock, ssl.SSLSocket)
        or hasattr(sock, "_sslobj")
        or limits.read_pause
    ):
        return None
    size = limits.recv_size
    raw_recv = raw.recv

    def read(watch: Watch) -> bytes | None:
        if watch.expired is None and _now() >= watch.deadline:
            watch.expired = "deadline"
        if watch.expired is not None:
            return None
        try:
            wait(event)
            try:
                data: bytes = raw_recv(size)
            except BlockingIOError:  # woken with nothing to read
                data = sock.recv(size)
        except OSError:
            if watch.expired is None:
                raise
            return None
        if watch.expired is not None:
            return None
        return data

    return read


# STREAMSLO_READ=recv-first (read at import) reads as gevent does, trying before waiting: the
# bench's old path.
_WAIT_FIRST = os.environ.get("STREAMSLO_READ") != "recv-first"
# STREAMSLO_READ=per-stream: each stream's greenlet reads its own socket (no shared reader).
_SHARED = reactor_enabled()


def pump(
    sock: socket.socket,
    exchange: Exchange,
    limits: ClientLimits,
    watch: Watch,
    deadline: float,
    after_read: Callable[[], None] | None = None,
) -> None:
    """Read into ``exchange`` until it is done, one timestamp per read.

    Before each read the watchdog is told when the exchange last made progress (the stall
    timer counts from there: bytes of an unfinished line do not reset it) and its deadline:
    the request's, or a short wait's :attr:`Exchange.cutoff`. A transport error goes to
    :meth:`Exchange.fail`; the caller decides about retries before calling this. Each read
    takes everything the socket holds (up to ``recv_size``). Under gevent a plain socket is
    read by the process's one reader (:mod:`streamslo.transport.reactor`) and this greenlet
    sleeps until the exchange is done; otherwise (TLS, a slow reader, no gevent) it reads
    here: under gevent, after a short read it waits for the socket to be readable before
    reading (:func:`_wait_first`), after a full one it reads first.
    """
    if _SHARED and REACTOR.accepts(sock, limits.read_pause):
        REACTOR.pump(sock, exchange, limits.recv_size, watch, deadline, after_read)
        return
    waiting = _wait_first(sock, limits) if _WAIT_FIRST else None
    first = True
    while not exchange.done:
        watch.last = exchange.progress_t
        end = exchange.cutoff
        watch.deadline = deadline if end is None else min(deadline, end)
        try:
            data = recv(sock, limits, watch) if waiting is None or first else waiting(watch)
        except OSError as exc:
            exchange.fail(_now(), exc)
            return
        t = _now()
        if data is None:
            exchange.expire(t, "stall" if watch.expired == "stall" else "deadline")
            return
        # A read that filled the buffer left more behind, most likely (a flood, a burst):
        # the next one tries first, as gevent does, so a flood reaches its cap in one turn of
        # the loop; a short read (a token) means the socket is empty: wait first.
        first = len(data) >= limits.recv_size
        exchange.receive(t, data)
        if after_read is not None and not exchange.done:
            after_read()


def apply_timeouts(tracker: StreamTracker, limits: ClientLimits) -> None:
    """Tell the tracker the waits its reader applies (the first token's own bound, the cancel
    rule: a stream with no token for the stall timeout is ``stalled``, not ``cancelled``)."""
    tracker.stall_timeout = limits.stall_timeout
    tracker.first_token_timeout = limits.first_token_timeout


def guard(tracker: StreamTracker, run: Callable[[], None]) -> None:
    """Run ``run``; whatever it raises ends the stream in one outcome (docs/outcomes.md).

    * a :class:`~streamslo.errors.ProtocolError` (the server broke a protocol or a cap):
      ``malformed``;
    * a transport error (``OSError``, TLS, ``EOFError``): ``connect_error`` before any
      response, ``truncated`` after it, nothing after ``[DONE]``;
    * any other ``Exception``: ``malformed``, with its type in ``error`` (logged once per type:
      it is a gap in the client, not the server's fault alone);
    * a ``BaseException`` that is not an ``Exception`` (gevent's ``GreenletExit`` when Locust
      stops a user, ``KeyboardInterrupt``, ``SystemExit``): the load test itself stopped the
      stream: ``cancelled``, and it propagates.
    """
    try:
        run()
    except ProtocolError as exc:
        protocol_broken(tracker, _now(), f"{type(exc).__name__}: {exc}")
    except (OSError, ssl.SSLError, EOFError) as exc:
        transport_failed(tracker, _now(), exc)
    except Exception as exc:
        if type(exc) not in _LOGGED:
            _LOGGED.add(type(exc))
            log.warning("unexpected %s while reading a stream", type(exc).__name__, exc_info=True)
        protocol_broken(tracker, _now(), f"{type(exc).__name__}: {exc}")
    except BaseException:
        if not tracker.finished:
            tracker.expire(_now(), "cancel")
        raise
