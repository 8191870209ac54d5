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
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import gevent
from gevent.pool import Group
from locust import task

from streamslo.loadgen.base import StreamUser, run_one_stream
from streamslo.loadgen.executors import count_dropped, is_stopping, process_index, scenarios_done
from streamslo.loadgen.recorder import RunRecorder
from streamslo.prefix import TracePrompts
from streamslo.trace import iter_trace
from streamslo.workload import Turn

__all__ = ["TRACE_SCENARIO", "TracePlan", "TraceReplayUser", "due_requests"]

#: The name dropped trace arrivals are counted under (``dropped_iterations_by_scenario``).
TRACE_SCENARIO = "trace"

#: The arrival greenlet wakes this long before a request is due, then yields until it is due:
#: gevent's timers fire late by up to a loop iteration under load, a last short sleep less so.
_EARLY_S = 0.002


@dataclass(frozen=True)
class TracePlan:
    """What to replay and how: ``--trace*`` (or a ``trace`` scenario's keys)."""

    path: str
    format: str = "auto"
    speed: float = 1.0
    late: str = "send"
    """``send`` (late, its lateness recorded) or ``drop`` (past ``max_lag``: dropped and counted)."""
    max_lag: float = 0.05
    block_tokens: int = 512
    dropped_as: str = TRACE_SCENARIO
    """The name dropped arrivals are counted under."""


def due_requests(
    recorder: RunRecorder,
    plan: TracePlan,
    index: int,
    processes: int,
    stopping: Callable[[], bool],
    full: Callable[[], bool],
) -> Iterator[tuple[Turn, float]]:
    """This process's share of the trace, each request when it is due: ``(turn, scheduled_at)``
    (epoch seconds). Requests later than ``plan.max_lag`` under ``late = "drop"``, or due while
    ``full()``, are dropped and counted instead. Ends at the trace's end or when ``stopping()``.
    """
    prompts = TracePrompts(recorder.workload.measure, recorder.opts.seed, plan.block_tokens)
    drop_late = plan.late == "drop"
    t0 = time.perf_counter()
    epoch0 = time.time() - t0
    for req in iter_trace(plan.path, plan.format):
        if req.index % processes != index:
            continue
        due = t0 + req.offset_s / plan.speed
        # Built before it is due (a new block's text takes a millisecond or so), so the
        # request starts on time.
        turn = Turn(prompts.prompt(req), req.output_tokens)
        if _sleep_until(due, stopping):
            return
        late = time.perf_counter() - due
        if (drop_late and late > plan.max_lag) or full():
            count_dropped(recorder, plan.dropped_as)
            continue
        yield turn, epoch0 + due


def _sleep_until(due: float, stopping: Callable[[], bool]) -> bool:
    """Sleep until ``due`` (perf_counter) unless the run stops first; True if it did."""
    while not stopping():
        left = due - time.perf_counter()
        if left <= 0:
            return False
        if left > _EARLY_S:
            gevent.sleep(min(left - _EARLY_S, 0.5))
        else:
            gevent.sleep(0)  # yield to the streams until due
    return True


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
        plan = TracePlan(opts.trace, opts.trace_format, opts.trace_speed, opts.trace_late,
                         opts.trace_max_lag, opts.trace_block_tokens)
        cap = max(1, opts.max_concurrency // n) if opts.max_concurrency else 0
        busy = [0]
        rng = random.Random(opts.seed + 7919 * (index + 1))
        ws_share = {"sse": 0.0, "ws": 1.0, "mixed": 0.5}[opts.protocol]
        group = Group()

        def one(protocol: str, turn: Turn, scheduled_at: float) -> None:
            try:
                run_one_stream(recorder, protocol, type(self).__name__, self.limits,
                               scheduled_at=scheduled_at, turn=turn)
            finally:
                busy[0] -= 1

        def stopping() -> bool:
            return is_stopping(self)

        for turn, scheduled_at in due_requests(recorder, plan, index, n, stopping,
                                               lambda: bool(cap) and busy[0] >= cap):
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
