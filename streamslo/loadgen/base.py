"""The stream user base class: one task, one stream at a time, measured by the shared core.

A user holds one stream open at a time (closed loop); hundreds of users hold hundreds of
streams. With ``--turns N`` each task is a conversation of N streams, one after another.
Subclasses only say which transport and whether they read slowly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import gevent
from locust import User, task
from locust.exception import StopUser

from streamslo.loadgen.backoff import PACER, UserBackoff
from streamslo.loadgen.recorder import get_recorder
from streamslo.loadgen.streams import Connection, run_conversation, run_one_stream
from streamslo.stream.timing import Wire

if TYPE_CHECKING:
    from locust.env import Environment

__all__ = ["StreamUser", "run_conversation", "run_one_stream"]

# run_one_stream and run_conversation live with the stream source (no Locust there); named here
# too, where the users and executors have always found them.


class StreamUser(User):
    """Holds one stream at a time against an OpenAI-compatible streaming server."""

    abstract = True
    protocol: ClassVar[Wire] = Wire.SSE
    """``sse`` or ``ws``."""
    slow: ClassVar[bool] = False
    """Read slowly, so the server feels back-pressure."""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.recorder = get_recorder(environment)
        opts = self.recorder.opts
        self.limits = opts.slow_limits if self.slow else opts.limits
        self._think = opts.think_time
        self._conn: Connection | None = None
        self._backoff = UserBackoff(PACER, gevent.sleep)

    def wait_time(self) -> float:
        return self._think

    @task
    def stream(self) -> None:
        source = self.recorder.source
        if source.load_over:
            raise StopUser  # the load's time is up: no new stream while Locust stops the users
        if self._conn is None:
            self._conn = source.transport.open(self.protocol, self.limits, keep_alive=True)
        self._backoff.before()  # while the server gives no answer: the process's pace
        if source.load_over:
            raise StopUser  # the load ended while this user waited for its slot
        records = run_conversation(
            source, self.protocol, type(self).__name__, self.limits, self._conn
        )
        self._backoff.after(records)

    def on_stop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None
