"""A trace's requests, each when it is due: the schedule both trace replays share (the
``--trace`` user of :mod:`streamslo.loadgen.replay` and the ``trace`` scenario executor of
:mod:`streamslo.loadgen.executors`). Open loop, never a catch-up burst (docs/workloads.md)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import gevent

from streamslo.loadgen.recorder import RunRecorder
from streamslo.workload.prefix import TracePrompts
from streamslo.workload.requests import Turn
from streamslo.workload.trace import iter_trace

__all__ = ["TRACE_SCENARIO", "TracePlan", "due_requests"]

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
    drop: Callable[[], None],
) -> Iterator[tuple[Turn, float]]:
    """This process's share of the trace, each request when it is due: ``(turn, scheduled_at)``
    (epoch seconds). Requests later than ``plan.max_lag`` under ``late = "drop"``, or due while
    ``full()``, are dropped and counted instead (``drop()``). Ends at the trace's end or when ``stopping()``.
    """
    prompts = TracePrompts(recorder.source.workload.measure, recorder.opts.seed, plan.block_tokens)
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
            drop()
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
