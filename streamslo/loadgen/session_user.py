"""The Locust user of agentic sessions (``--sessions``): one session at a time, the next when
it is over, so ``--users`` is the number of sessions in flight (docs/workloads.md). A session is
never split between processes; a session file's sessions are shared among them, each run once.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING

from locust import User, task
from locust.exception import StopUser

from streamslo.loadgen.executors import process_index
from streamslo.loadgen.recorder import RunRecorder, get_recorder
from streamslo.loadgen.session_runner import StepText, run_session
from streamslo.workload.prefix import TracePrompts
from streamslo.workload.sessions import Session, session_source

if TYPE_CHECKING:
    from locust.env import Environment

__all__ = ["SessionUser"]

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
        self._protocol = "ws" if opts.protocol == "ws" else "sse"

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
        opts = self.recorder.opts
        prompts = TracePrompts(source.workload.measure, opts.seed, opts.trace_block_tokens)
        run_session(
            source,
            session,
            self._protocol,
            self.limits,
            StepText(prompts),
            type(self).__name__,
            abort_on_broken=opts.on_broken_step == "abort",
            header=opts.session_header,
        )
