"""Timed trace replay (``--trace``): each request starts at its recorded offset, scaled by
``--trace-speed``, with its recorded input and output lengths (``docs/workloads.md``).

One :class:`TraceReplayUser` runs in each generator process (``fixed_count`` = the processes,
like the open loop); process ``i`` of ``n`` takes the trace's requests ``i, i+n, i+2n...``, as
the arrival-rate executors do. The trace is read line by line as the replay goes
(:func:`streamslo.workload.trace.iter_trace`), never loaded whole.

Open loop, and never a catch-up burst: every request keeps its own scheduled time. One the
generator could not start on time is sent late and its lateness recorded (``scheduled_at``,
``schedule_lag_ms``), or, with ``--trace-late drop``, dropped and counted
(``dropped_iterations`` under the name ``trace``) once it is later than ``--trace-max-lag``.
With ``--max-concurrency`` an arrival that finds the cap reached is dropped and counted. When
the trace is exhausted and its streams have ended, the process says it is done and the run
ends (in a distributed run, once every worker said so).
"""

from __future__ import annotations

import random

import gevent
from gevent.pool import Group
from locust import task

from streamslo.loadgen.base import StreamUser, run_one_stream
from streamslo.loadgen.executors import count_dropped, is_stopping, process_index, scenarios_done
from streamslo.loadgen.trace_schedule import TRACE_SCENARIO, TracePlan, due_requests
from streamslo.stream.timing import Wire
from streamslo.workload.requests import Turn

__all__ = ["TRACE_SCENARIO", "TracePlan", "TraceReplayUser", "due_requests"]


class TraceReplayUser(StreamUser):
    """Replays this process's share of ``--trace`` (one per Locust process)."""

    fixed_count = 1
    """One replaying generator per Locust process (set at init to the processes)."""

    def wait_time(self) -> float:
        return 0.0

    @task
    def replay(self) -> None:
        recorder = self.recorder
        opts = recorder.opts
        assert opts.trace is not None
        n, index = opts.generators, process_index(self.environment)
        plan = TracePlan(
            opts.trace,
            opts.trace_format,
            opts.trace_speed,
            opts.trace_late,
            opts.trace_max_lag,
            opts.trace_block_tokens,
        )
        cap = max(1, opts.max_concurrency // n) if opts.max_concurrency else 0
        busy = [0]
        rng = random.Random(opts.seed + 7919 * (index + 1))
        ws_share = {"sse": 0.0, "ws": 1.0, "mixed": 0.5}[opts.protocol]
        group = Group()

        def one(protocol: Wire, turn: Turn, scheduled_at: float) -> None:
            try:
                run_one_stream(
                    recorder.source,
                    protocol,
                    type(self).__name__,
                    self.limits,
                    scheduled_at=scheduled_at,
                    turn=turn,
                )
            finally:
                busy[0] -= 1

        def stopping() -> bool:
            return is_stopping(self)

        for turn, scheduled_at in due_requests(
            recorder,
            plan,
            index,
            n,
            stopping,
            lambda: bool(cap) and busy[0] >= cap,
            lambda: count_dropped(recorder, plan.dropped_as),
        ):
            busy[0] += 1
            group.spawn(one, "ws" if rng.random() < ws_share else "sse", turn, scheduled_at)
        if not stopping():
            group.join()  # the trace's last streams end on their own (their request timeout)
            scenarios_done(self.environment)
        drain = max(0.0, (self.environment.stop_timeout or 0.0) - 1.0)
        while not stopping():
            gevent.sleep(0.2)
        group.join(timeout=drain)
        group.kill(block=True)


# Locust also inherits the base class's closed-loop task; a replaying user runs only the trace.
TraceReplayUser.tasks = [TraceReplayUser.replay]
