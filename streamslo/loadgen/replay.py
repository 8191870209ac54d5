"""Timed trace replay (``--trace``): each request starts at its recorded offset, scaled by
``--trace-speed``, with its recorded input and output lengths (``docs/workloads.md``).

One :class:`TraceReplayUser` runs in each generator process (``fixed_count`` = the processes,
like the open loop); process ``i`` of ``n`` takes the trace's requests ``i, i+n, i+2n...``, as
the arrival-rate executors do. The trace is read line by line as the replay goes
(:func:`streamslo.trace.iter_trace`), never loaded whole.

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
import time

import gevent
from gevent.pool import Group
from locust import task

from streamslo.loadgen.base import StreamUser, run_one_stream
from streamslo.loadgen.executors import count_dropped, is_stopping, process_index, scenarios_done
from streamslo.prefix import TracePrompts
from streamslo.trace import iter_trace
from streamslo.workload import Turn

__all__ = ["TRACE_SCENARIO", "TraceReplayUser"]

#: The name dropped trace arrivals are counted under (``dropped_iterations_by_scenario``).
TRACE_SCENARIO = "trace"

#: The arrival greenlet wakes this long before a request is due, then yields until it is due:
#: gevent's timers fire late by up to a loop iteration under load, a last short sleep less so.
_EARLY_S = 0.002


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
        speed = opts.trace_speed
        cap = max(1, opts.max_concurrency // n) if opts.max_concurrency else 0
        busy = [0]
        rng = random.Random(opts.seed + 7919 * (index + 1))
        ws_share = {"sse": 0.0, "ws": 1.0, "mixed": 0.5}[opts.protocol]
        prompts = TracePrompts(recorder.workload.measure, opts.seed, opts.trace_block_tokens)
        drop_late = opts.trace_late == "drop"
        group = Group()

        def one(protocol: str, turn: Turn, scheduled_at: float) -> None:
            try:
                run_one_stream(recorder, protocol, type(self).__name__, self.limits,
                               scheduled_at=scheduled_at, turn=turn)
            finally:
                busy[0] -= 1

        t0 = time.perf_counter()
        epoch0 = time.time() - t0
        for req in iter_trace(opts.trace, opts.trace_format):
            if req.index % n != index:
                continue
            due = t0 + req.offset_s / speed
            # Built before it is due (a new block's text takes a millisecond or so), so the
            # request starts on time; drawn for every request, sent or not: the mix stays seeded.
            turn = Turn(prompts.prompt(req), req.output_tokens)
            protocol = "ws" if rng.random() < ws_share else "sse"
            if self._sleep_until(due):
                break
            late = time.perf_counter() - due
            if (drop_late and late > opts.trace_max_lag) or (cap and busy[0] >= cap):
                count_dropped(recorder, TRACE_SCENARIO)
                continue
            busy[0] += 1
            group.spawn(one, protocol, turn, epoch0 + due)
        if not is_stopping(self):
            group.join()  # the trace's last streams end on their own (their request timeout)
            scenarios_done(self.environment)
        drain = max(0.0, (self.environment.stop_timeout or 0.0) - 1.0)
        while not is_stopping(self):
            gevent.sleep(0.2)
        group.join(timeout=drain)
        group.kill(block=True)

    def _sleep_until(self, due: float) -> bool:
        """Sleep until ``due`` (perf_counter) unless the run stops first; True if it did."""
        while not is_stopping(self):
            left = due - time.perf_counter()
            if left <= 0:
                return False
            if left > _EARLY_S:
                gevent.sleep(min(left - _EARLY_S, 0.5))
            else:
                gevent.sleep(0)  # yield to the streams until due
        return True


# Locust also inherits the base class's closed-loop task; a replaying user runs only the trace.
TraceReplayUser.tasks = [TraceReplayUser.replay]
