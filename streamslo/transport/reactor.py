"""One reader per process: every open stream's socket waited on at once, each ready one read
and fed to its exchange in one pass, and a stream's greenlet woken only when its stream ends.

Under gevent a greenlet that reads its own socket pays, for every token, a wait on the hub
(a watcher started and stopped, a ``Waiter``), two greenlet switches and a ``recv``: at
hundreds of streams that wake-up costs more than reading the token. :class:`Reactor` puts
every plain (non-TLS) stream socket of the process into one ``epoll`` set, itself watched by
the hub: one reader greenlet wakes when any stream has bytes, asks the set which, and for each
one does the ``recv``, stamps it with ``perf_counter()`` (every token keeps the time of the read
that delivered it) and hands it to the Sans-I/O exchange, all in one pass. The stream's own
greenlet sleeps from its request's send to its stream's end: one switch per stream, not one per
token. docs/timing.md ("One reader per process") says what a user sees of it.

The rules of a read stay :func:`streamslo.transport.common.pump`'s: the process's
:class:`~streamslo.transport.watchdog.ReadWatchdog` ends a read that made no progress for the
stall timeout or ran past its deadline by shutting its socket down (the reader then finds why in
its watch), a transport error goes to the exchange's ``fail``, and whatever the exchange raises
is raised again in the stream's own greenlet, where :func:`~streamslo.transport.common.guard`
classifies it. A stream the load test stops (``GreenletExit`` in its greenlet) leaves the set
before its socket closes.

Where it does not apply, a stream reads as before, on its own: TLS (the TLS object holds bytes
the socket does not show), slow readers (``--read-pause``), outside gevent (the pytest probes'
threads), and ``STREAMSLO_READ=per-stream`` (read at import; the benches' old path).
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import ssl
import struct
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol

from streamslo.stream.exchange import Expiry
from streamslo.transport.watchdog import Watch

__all__ = [
    "REACTOR",
    "Exchange",
    "Reactor",
    "ask_kernel_stamps",
    "kernel_stamps_enabled",
    "reactor_enabled",
]

_now = time.perf_counter
_wall = time.time
_EPOLLIN = getattr(select, "EPOLLIN", 1)
SO_TIMESTAMPNS: int | None = getattr(
    socket, "SO_TIMESTAMPNS", 35 if sys.platform == "linux" else None
)
"""The socket option that has the kernel stamp each received packet (Linux)."""
_STAMP = struct.Struct("@ll")  # struct timespec: seconds, nanoseconds
_CMSG_SPACE = socket.CMSG_SPACE(_STAMP.size) if hasattr(socket, "CMSG_SPACE") else 0


class Exchange(Protocol):
    """What a read loop drives (:func:`streamslo.transport.common.pump`, :class:`Reactor`): a Sans-I/O exchange (:mod:`streamslo.stream.exchange`,
    :mod:`streamslo.stream.ws`)."""

    @property
    def done(self) -> bool: ...

    @property
    def progress_t(self) -> float: ...

    @property
    def cutoff(self) -> float | None: ...

    def receive(self, t: float, data: bytes) -> None: ...

    def expire(self, t: float, why: Expiry) -> None: ...

    def fail(self, t: float, exc: BaseException) -> None: ...


def reactor_enabled() -> bool:
    """Whether streams may share the process's reader (``STREAMSLO_READ`` is not
    ``per-stream`` or ``recv-first``)."""
    return os.environ.get("STREAMSLO_READ", "") not in ("per-stream", "recv-first")


def kernel_stamps_enabled() -> bool:
    """Whether reads are stamped with the kernel's arrival time where it gives one
    (``STREAMSLO_STAMP`` is not ``read``)."""
    return (
        _CMSG_SPACE > 0
        and SO_TIMESTAMPNS is not None
        and os.environ.get("STREAMSLO_STAMP") != "read"
    )


def ask_kernel_stamps(sock: socket.socket) -> None:
    """Have the kernel stamp every packet ``sock`` receives (a plain TCP socket, before its
    first read); a platform without the option keeps read-time stamps."""
    if SO_TIMESTAMPNS is not None and _KERNEL_STAMPS:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)


class _Reading:
    """One stream's read in the shared set."""

    __slots__ = (
        "after_read",
        "deadline",
        "error",
        "exchange",
        "fd",
        "last_t",
        "recv",
        "size",
        "waiter",
        "watch",
    )

    def __init__(
        self,
        fd: int,
        recv: Callable[..., Any],
        exchange: Exchange,
        size: int,
        watch: Watch,
        deadline: float,
        after_read: Callable[[], None] | None,
        waiter: Any,
    ) -> None:
        self.fd = fd
        self.recv = recv
        self.exchange = exchange
        self.size = size
        self.watch = watch
        self.deadline = deadline
        self.after_read = after_read
        self.waiter = waiter
        self.error: BaseException | None = None
        # No stamp may come before this (the last progress, or now if that lies ahead: a
        # first token's own bound moves the stall clock's start past the head).
        self.last_t = min(exchange.progress_t, _now())


class Reactor:
    """The process's one reader of plain stream sockets under gevent (see the module's text).

    One per process (a forked Locust worker makes its own on first use) and per gevent hub:
    a stream on another hub (a thread's) reads on its own.
    """

    def __init__(self) -> None:
        self._pid = 0
        self._hub: Any = None
        self._ep: Any = None
        self._io: Any = None
        self._entries: dict[int, _Reading] = {}
        self._running = False
        self._offset = 0.0  # time.time() - perf_counter(), taken at each pass
        self.passes = 0
        """Passes over the ready set so far (a pass reads every ready stream once)."""
        self.reads = 0
        """Reads done so far."""

    # ------------------------------------------------------------------ who may join
    def accepts(self, sock: socket.socket, read_pause: float) -> bool:
        """Whether ``sock``'s reads can be done here: a plain gevent socket on this hub, no
        pause between reads."""
        if read_pause or isinstance(sock, ssl.SSLSocket) or hasattr(sock, "_sslobj"):
            return False
        if getattr(sock, "_read_event", None) is None or getattr(sock, "_sock", None) is None:
            return False  # not a gevent socket: a plain blocking one (threads, probes)
        hub = _current_hub()
        if hub is None:
            return False
        if self._pid != os.getpid():
            self._start(hub)
        return self._hub is hub

    def _start(self, hub: Any) -> None:
        """A fresh set for this process (first use, or a forked child)."""
        from gevent import monkey

        epoll = monkey.get_original("select", "epoll")
        self._pid = os.getpid()
        self._hub = hub
        self._ep = epoll()
        self._io = hub.loop.io(self._ep.fileno(), 1)
        self._entries = {}
        self._running = False

    # ------------------------------------------------------------------ a stream's side
    def pump(
        self,
        sock: socket.socket,
        exchange: Exchange,
        size: int,
        watch: Watch,
        deadline: float,
        after_read: Callable[[], None] | None = None,
    ) -> None:
        """Read ``sock`` into ``exchange`` until it is done, from the shared reader; returns in
        the calling greenlet when the exchange is done, raising what the exchange raised.
        Call only after :meth:`accepts` said yes for ``sock``."""
        from gevent.hub import Waiter

        raw: socket.socket = getattr(sock, "_sock")  # noqa: B009 (gevent's OS socket)
        fd = raw.fileno()
        waiter = Waiter(self._hub)
        entry = _Reading(
            fd,
            raw.recvmsg if _KERNEL_STAMPS else raw.recv,
            exchange,
            size,
            watch,
            deadline,
            after_read,
            waiter,
        )
        watch.last = exchange.progress_t
        end = exchange.cutoff
        watch.deadline = deadline if end is None else min(deadline, end)
        self._ep.register(fd, _EPOLLIN)
        self._entries[fd] = entry
        if not self._running:
            self._running = True
            self._hub.loop.run_callback(self._spawn)
        try:
            waiter.get()
        finally:
            if self._entries.get(fd) is entry:  # stopped from outside (GreenletExit...)
                self._leave(entry)
        error = entry.error
        if error is not None:
            entry.error = None
            raise error

    # ------------------------------------------------------------------ the reader
    def _spawn(self) -> None:
        import gevent

        gevent.spawn(self._run)

    def _leave(self, entry: _Reading) -> None:
        del self._entries[entry.fd]
        with contextlib.suppress(OSError, ValueError):  # closed already
            self._ep.unregister(entry.fd)

    def _done(self, entry: _Reading) -> None:
        """The stream's read ended: out of the set, its greenlet woken (from the hub)."""
        self._leave(entry)
        self._hub.loop.run_callback(entry.waiter.switch, None)

    def _run(self) -> None:
        """The reader greenlet: while any stream is open, wait for the set to be readable and
        read every ready stream once."""
        entries = self._entries
        wait = self._hub.wait
        io = self._io
        poll = self._ep.poll
        read = self._read
        try:
            while entries:
                wait(io)
                self.passes += 1
                self._offset = _wall() - _now()
                for fd, _ in poll(0):
                    entry = entries.get(fd)
                    if entry is not None:
                        read(entry)
        finally:
            self._running = False
            if entries:  # killed with streams still open: a new reader takes them on
                self._running = True
                self._hub.loop.run_callback(self._spawn)

    def _read(self, entry: _Reading) -> None:
        """One read of one ready stream (the rules of ``common.pump``'s loop, once)."""
        self.reads += 1
        watch = entry.watch
        ex = entry.exchange
        try:
            if watch.expired is None and _now() >= watch.deadline:
                watch.expired = "deadline"
            if watch.expired is None:
                try:
                    if _KERNEL_STAMPS:
                        data, anc, _, _ = entry.recv(entry.size, _CMSG_SPACE)
                    else:
                        data, anc = entry.recv(entry.size), None
                except BlockingIOError:
                    return  # woken with nothing to read after all
                except OSError as exc:
                    if watch.expired is None:
                        ex.fail(_now(), exc)
                        self._done(entry)
                        return
                    data, anc = b"", None
                t = _now()
                if anc and len(anc[0][2]) >= _STAMP.size:
                    # The kernel's arrival time of the read's last packet (wall clock, on
                    # the perf_counter scale): when the token reached this machine, however
                    # long this process took to get to it. Kept only between the stream's
                    # previous stamp and now (a wall clock stepped meanwhile).
                    sec, ns = _STAMP.unpack_from(anc[0][2])
                    k = sec + ns * 1e-9 - self._offset
                    if entry.last_t <= k < t:
                        t = k
                entry.last_t = t
            else:
                t = _now()
            if watch.expired is not None:
                ex.expire(t, "stall" if watch.expired == "stall" else "deadline")
                self._done(entry)
                return
            ex.receive(t, data)
            if ex.done:
                self._done(entry)
                return
            if entry.after_read is not None:
                entry.after_read()
            watch.last = ex.progress_t
            end = ex.cutoff
            watch.deadline = entry.deadline if end is None else min(entry.deadline, end)
        except Exception as exc:  # raised again in the stream's greenlet
            entry.error = exc
            if self._entries.get(entry.fd) is entry:
                self._done(entry)


def _current_hub() -> Any:
    """This thread's gevent hub, or None outside gevent."""
    try:
        from gevent import get_hub
    except ImportError:  # pragma: no cover (gevent comes with Locust)
        return None
    return get_hub()


_KERNEL_STAMPS = kernel_stamps_enabled()
REACTOR = Reactor()
