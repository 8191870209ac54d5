"""An in-memory transport: the stream users' code without sockets or Locust.

:class:`MemoryTransport` answers each request with bytes a function makes from its body, fed
through the real Sans-I/O exchange (:class:`~streamslo.stream.exchange.SSEExchange`), the
tracker and the dialect objects, on a scripted clock that starts at the request's own start; or,
given a ``sleep`` (``gevent.sleep``), in real time: each delay slept, each read stamped with the
clock (what code that waits on streams' ends, such as a session's steps, needs).
Give it to a :class:`~streamslo.loadgen.streams.StreamSource` and
:func:`~streamslo.loadgen.streams.run_conversation` runs whole conversations in a plain test:
what each turn sends, how its answer is judged, where the record goes. Event streams over
HTTP only (a WebSocket needs the socket transport).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from streamslo.stream.exchange import SSEExchange
from streamslo.stream.timing import Wire
from streamslo.stream.tracker import StreamTracker
from streamslo.transport.common import ClientLimits

__all__ = ["Answer", "MemoryConnection", "MemoryTransport"]

Answer = Callable[[bytes], Sequence[tuple[float, bytes]]]
"""Given a request body, the reads of its answer: (seconds since the previous read, bytes),
a whole HTTP response; the connection ends after the last (an EOF)."""


class MemoryConnection:
    """One user's connection: every request answered by :data:`Answer`."""

    def __init__(
        self,
        answer: Answer,
        limits: ClientLimits,
        sent: list[bytes],
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self._answer = answer
        self._limits = limits
        self._sent = sent
        self._sleep = sleep

    def request(self, body: bytes, tracker: StreamTracker) -> None:
        self._sent.append(body)
        limits = self._limits
        tracker.stall_timeout = limits.stall_timeout
        tracker.first_token_timeout = limits.first_token_timeout
        ex = SSEExchange(tracker, limits.stall_timeout, limits.request_timeout, keep_alive=False)
        deadline = tracker.deadline(limits.request_timeout)
        t = tracker.rec.t0
        tracker.rec.connect_s = 0.0
        sleep = self._sleep
        for delay, data in self._answer(body):
            when, why = ex.next_wait(deadline)
            if t + delay >= when:  # a wait ran out before these bytes came
                if sleep is not None:
                    sleep(max(0.0, when - time.perf_counter()))
                ex.expire(when, why)
                return
            if sleep is not None:
                sleep(delay)
                t = time.perf_counter()
            else:
                t += delay
            ex.receive(t, data)
            if ex.done:
                return
        ex.receive(t, b"")

    def close(self) -> None:
        """Nothing to close."""


class MemoryTransport:
    """Opens :class:`MemoryConnection` s that answer with ``answer``; :attr:`sent` holds every
    request body, in order.

    Raises:
        ValueError: (at :meth:`open`) a WebSocket connection was asked for.
    """

    def __init__(self, answer: Answer, sleep: Callable[[float], None] | None = None) -> None:
        self.answer = answer
        self.sleep = sleep
        self.sent: list[bytes] = []
        self.opened: list[dict[str, str]] = []
        """The extra headers of each connection opened, in order."""

    def open(
        self,
        protocol: Wire,
        limits: ClientLimits,
        keep_alive: bool,
        headers: Mapping[str, str] | None = None,
    ) -> MemoryConnection:
        if protocol != Wire.SSE:
            raise ValueError("the in-memory transport speaks SSE only")
        self.opened.append(dict(headers or {}))
        return MemoryConnection(self.answer, limits, self.sent, self.sleep)
