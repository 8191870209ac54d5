"""The Locust user of agentic sessions (``--sessions``): one session at a time, the next when
it is over, so ``--users`` is the number of sessions in flight (docs/workloads.md). A session is
never split between processes; a session file's sessions are shared among them, each run once.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING

import gevent
from gevent.pool import Group
from locust import User, task
from locust.exception import StopUser

from streamslo.loadgen.executors import count_dropped, is_stopping, process_index
from streamslo.loadgen.openloop import arrival_gaps
from streamslo.loadgen.recorder import RunRecorder, get_recorder
from streamslo.loadgen.session_runner import SessionPlan, StepText, run_session
from streamslo.stream.timing import Wire
from streamslo.workload.prefix import TracePrompts
from streamslo.workload.sessions import Session, session_source

if TYPE_CHECKING:
    from locust.env import Environment

__all__ = ["SessionArrivalUser", "SessionUser"]

#: Each process's session iterator, by recorder (one recorder a process).
_FEEDS: weakref.WeakKeyDictionary[RunRecorder, Iterator[Session]] = weakref.WeakKeyDictionary()


class SessionUser(User):
    """Runs agentic sessions (``--sessions``), one at a time: ``--users`` is the number of
    sessions in flight. A session file's sessions are shared among the processes and each is
    run once; a user stops when its process has none left."""

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.recorder = get_recorder(self.environment)
        opts = self.recorder.opts
        self.limits = opts.limits
        self._protocol = Wire.WS if opts.protocol == Wire.WS else Wire.SSE
        self._text: StepText | None = None

    def wait_time(self) -> float:
        return self.recorder.opts.think_time

    def _feed(self) -> Iterator[Session]:
        """The process's sessions, made once and shared by its users."""
        feed = _FEEDS.get(self.recorder)
        if feed is None:
            index = process_index(self.environment)
            feed = session_source(
                self.recorder.opts,
                index,
                self.recorder.opts.generators,
                prefix=f"{self.recorder.source.tag}-",
            )
            _FEEDS[self.recorder] = feed
        return feed

    @task
    def session(self) -> None:
        source = self.recorder.source
        if source.load_over:
            raise StopUser
        session = next(self._feed(), None)
        if session is None:
            raise StopUser  # this process's share of the file is done
        self._run(session, None)

    def _run(self, session: Session, arrived_at: float | None) -> None:
        opts = self.recorder.opts
        source = self.recorder.source
        if self._text is None:  # (one text maker a user: its blocks are made once)
            self._text = StepText(
                TracePrompts(source.workload.measure, opts.seed, opts.trace_block_tokens)
            )
        plan = SessionPlan(
            self._protocol,
            self.limits,
            self._text,
            type(self).__name__,
            abort_on_broken=opts.on_broken_step == "abort",
            header=opts.session_header,
            tools=opts.session_tools,
        )
        run_session(source, session, plan, arrived_at)


class SessionArrivalUser(SessionUser):
    """Sessions on an arrival schedule (``--session-arrivals rate|trace``), open loop: one
    generator a process starts each session when it is due, however many are in flight
    (``--max-concurrency`` caps them: an arrival past it is dropped and counted). Each session's
    root steps are scheduled at its arrival, so their schedule lag is the generator's own."""

    fixed_count = 1
    """One arrival generator a Locust process (set at init)."""

    def wait_time(self) -> float:
        return 0.0

    @task
    def session(self) -> None:
        opts = self.recorder.opts
        source = self.recorder.source
        n, index = opts.generators, process_index(self.environment)
        gaps = arrival_gaps(opts.session_rate / n, opts.burstiness, opts.seed + index)
        cap = max(1, opts.max_concurrency // n) if opts.max_concurrency else 0
        group = Group()
        busy = [0]
        t0 = time.perf_counter()
        due = t0
        for session in self._feed():
            if is_stopping(self) or source.load_over:
                break
            if opts.session_arrivals == "trace":
                due = t0 + (session.at_s or 0.0)
            else:
                due += next(gaps)
            delay = due - time.perf_counter()
            if delay > 0:
                gevent.sleep(delay)
            if is_stopping(self) or source.load_over:
                break
            if cap and busy[0] >= cap:
                count_dropped(self.recorder, "sessions")
                continue
            busy[0] += 1
            g = group.spawn(self._run, session, due)
            g.link(lambda _g: busy.__setitem__(0, busy[0] - 1))
        group.join(timeout=max(0.0, (self.environment.stop_timeout or 0.0) - 1.0))
        group.kill(block=True)
        raise StopUser


# An arrival user runs only its schedule, not the closed-loop task it inherits.
SessionArrivalUser.tasks = [SessionArrivalUser.session]
