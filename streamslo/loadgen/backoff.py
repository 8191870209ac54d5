"""A closed loop against a server that stopped answering does not spin (docs/outcomes.md,
"When the server stops answering").

A request that failed before any byte of an answer (``connect_error``: refused, reset or closed
before a response) makes its user wait before the next one: an exponential backoff per user
(:data:`BACKOFF_BASE_S`, doubling, at most :data:`BACKOFF_CAP_S`), and, while such failures
persist, a process-wide pace of at most :data:`PACED_ATTEMPTS_PER_S` attempts per second
whatever the number of users (500 users each waiting 2 s would still try 250 times a second).
The first answer of any kind (a status, an accepted WebSocket) ends the pacing and every
user's backoff. Without this a killed server saw 2,500 refused attempts a second per process,
and their count diluted every rate.

Open-loop arrivals are not paced: their schedule is the load asked for, and a dead server
refuses it at that rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from streamslo.stream.timing import StreamRecord

__all__ = [
    "BACKOFF_BASE_S",
    "BACKOFF_CAP_S",
    "PACED_ATTEMPTS_PER_S",
    "PACER",
    "Pacer",
    "UserBackoff",
    "failed_before_any_byte",
]

#: A user's first wait after a request that got no byte of an answer; it doubles per failure.
BACKOFF_BASE_S = 0.1
#: The longest a user waits between two such failures.
BACKOFF_CAP_S = 2.0
#: While requests fail before any byte, one process starts at most this many per second.
PACED_ATTEMPTS_PER_S = 50.0


def failed_before_any_byte(rec: StreamRecord) -> bool:
    """No connection, or refused / reset / closed before any response (``connect_error``)."""
    return rec.outcome == "connect_error"


class Pacer:
    """One process's pace while requests fail before any byte.

    Args:
        rate: attempts per second at most while failing.
        clock: a monotonic clock (tests script it).
    """

    def __init__(
        self, rate: float = PACED_ATTEMPTS_PER_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval = 1.0 / rate
        self.failing = False
        """The last request that ended said the server gives no answer."""
        self.clock = clock
        self._next = 0.0

    def slot(self) -> float:
        """Seconds to wait before the next attempt (0 while the server answers); the slot
        is reserved, so concurrent callers get successive slots."""
        if not self.failing:
            return 0.0
        now = self.clock()
        at = max(now, self._next)
        self._next = at + self.interval
        return at - now

    def record(self, rec: StreamRecord) -> None:
        """A request ended: any answer ends the pacing; a failure before any byte starts it."""
        if failed_before_any_byte(rec):
            self.failing = True
        elif rec.status is not None:
            self.failing = False


#: A user waiting for its slot looks this often whether the server answers again.
_RECHECK_S = 0.25

PACER = Pacer()
"""The process's pacer (forked Locust processes each get their own)."""


class UserBackoff:
    """One closed-loop user's backoff.

    Args:
        pacer: the process's pacer.
        sleep: how to wait (``gevent.sleep`` under Locust).
    """

    def __init__(self, pacer: Pacer, sleep: Callable[[float], object]) -> None:
        self.pacer = pacer
        self.failures = 0
        self._sleep = sleep

    def before(self) -> None:
        """Wait for the process's next slot, while the server gives no answer; stop waiting
        as soon as another user's request got an answer (the queue of slots can be seconds
        long with hundreds of users, and a server that came back should get its load back)."""
        pacer = self.pacer
        wait = pacer.slot()
        end = pacer.clock() + wait
        while wait > 0 and pacer.failing:
            self._sleep(min(wait, _RECHECK_S))
            wait = end - pacer.clock()

    def after(self, records: Sequence[StreamRecord]) -> None:
        """An iteration ended with ``records``: wait if its last request got no byte."""
        if not records:
            return
        last = records[-1]
        self.pacer.record(last)
        if failed_before_any_byte(last):
            self.failures += 1
            self._sleep(min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** min(self.failures - 1, 16)))
        else:
            self.failures = 0
