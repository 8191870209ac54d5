"""Stall and deadline timing for blocking reads: one scanner per process, not a timer per read."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time

__all__ = ["WATCHDOG", "ReadWatchdog", "Watch"]

_now = time.perf_counter


class Watch:
    """One request's read deadline, watched by :class:`ReadWatchdog`."""

    __slots__ = ("deadline", "expired", "last", "sock", "stall")

    def __init__(self, sock: socket.socket, deadline: float, stall: float) -> None:
        self.sock = sock
        self.deadline = deadline
        self.stall = stall
        self.last = _now()  # the last progress (the reader sets it before each read)
        self.expired: str | None = None  # "stall" or "deadline" once the watchdog ended it


class ReadWatchdog:
    """Ends reads once a stream made no progress for the stall timeout, or ran past its
    deadline.

    Progress is what the reader says it is (:attr:`Watch.last`, set before each read from the
    Sans-I/O reader's ``progress_t``): a response head, a complete SSE line, a whole WebSocket
    message; bytes of a line that never ends are not progress.

    One per process, scanning every ``period`` seconds, instead of a timer per read: a
    socket timeout costs gevent a timer object on every ``recv`` (several microseconds a
    token at hundreds of streams). An expired read is ended by shutting its socket down; the
    reader then finds why in its watch. Under gevent the scan runs in a greenlet (threads are
    patched); without it, in a daemon thread.
    """

    def __init__(self, period: float = 0.05) -> None:
        self.period = period
        self._active: set[Watch] = set()
        self._pid = 0

    def watch(self, sock: socket.socket, deadline: float, stall: float) -> Watch:
        if self._pid != os.getpid():  # first use, or a forked child: start the scanner here
            self._pid = os.getpid()
            self._active = set()
            threading.Thread(target=self._loop, name="streamslo-read-watchdog", daemon=True).start()
        w = Watch(sock, deadline, stall)
        self._active.add(w)
        return w

    def unwatch(self, w: Watch) -> None:
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


WATCHDOG = ReadWatchdog()
