"""Running k6-style scenarios inside Locust (``docs/scenarios.md``).

One :class:`ScenarioUser` runs in each generator process (``fixed_count`` = the processes,
like the open loop), so a distributed run splits every scenario over its workers without
Locust's dispatcher knowing about scenarios. Each scenario runs in its own greenlet of that
user, from its ``startTime``:

- VU executors (``constant-vus``, ``ramping-vus``): the process keeps its share of the wanted
  VUs (:func:`~streamslo.workload.scenarios.process_share`), each VU a greenlet running one conversation
  after another (closed loop); a VU above a falling target ends after its current iteration.
- Arrival-rate executors: arrivals at the times :func:`~streamslo.workload.scenarios.arrival_offsets`
  fixes in advance; process ``i`` of ``n`` takes arrivals ``i, i+n, i+2n...``. Each arrival
  takes a free VU from a pool of ``preAllocatedVUs`` growing up to ``maxVUs`` (this process's
  share); with none free the arrival is dropped and counted (``dropped_iterations``), and the
  schedule keeps its times: no catch-up burst.

Each stream carries its scenario's name (the ``scenario`` column). At a scenario's end its
iterations in flight get ``gracefulStop``; once every scenario of every process ended, the run
ends (:func:`scenarios_done`).
"""

from __future__ import annotations

import random
import time
import zlib
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import gevent
from gevent.pool import Group
from locust import User, task

from streamslo.loadgen.backoff import PACER, UserBackoff
from streamslo.loadgen.base import run_conversation
from streamslo.loadgen.recorder import RunRecorder, get_recorder
from streamslo.loadgen.streams import Connection
from streamslo.stream.timing import StreamRecord, Wire
from streamslo.transport.sync import ClientLimits
from streamslo.workload.requests import Workload
from streamslo.workload.scenarios import Scenario, arrival_offsets, from_wire, process_share

if TYPE_CHECKING:
    from locust.env import Environment
    from locust.runners import MasterRunner

__all__ = [
    "DONE_MESSAGE",
    "ScenarioUser",
    "count_dropped",
    "install_done_listener",
    "is_stopping",
    "process_index",
    "run_mix",
    "scenarios_done",
]

#: How often a VU executor looks at its target (k6 adjusts VUs continuously; 10 Hz is plenty).
_VU_TICK = 0.1

#: Locust's ``LOCUST_STATE_STOPPING`` (not exported by its typed API): the run is stopping.
_STOPPING = "stopping"

_RUN_MIX: dict[str, tuple[tuple[Wire, float], ...]] = {
    "sse": ((Wire.SSE, 1.0),),
    "ws": ((Wire.WS, 1.0),),
    "mixed": ((Wire.SSE, 0.5), (Wire.WS, 0.5)),
}


def is_stopping(user: User) -> bool:
    """Locust is stopping ``user`` (the run ends): start nothing new."""
    return bool(getattr(user, "_state", None) == _STOPPING)


def run_mix(protocol: str) -> tuple[tuple[Wire, float], ...]:
    """The run's ``--protocol`` as a mix: ``mixed`` is half SSE, half WebSocket."""
    return _RUN_MIX[protocol]


def count_dropped(recorder: RunRecorder, scenario: str) -> None:
    """Count one dropped arrival of ``scenario`` (it reaches ``procs/<tag>.json``, then the
    master and ``summary.json``)."""
    if recorder.monitor is not None:
        recorder.monitor.dropped[scenario] = recorder.monitor.dropped.get(scenario, 0) + 1


def process_index(environment: Environment) -> int:
    """This generator process's index: Locust's worker index (0 in a local run)."""
    return int(getattr(environment.runner, "worker_index", 0) or 0)


class _Context:
    """What one scenario's iterations share in one process: its stream options, seeded draws."""

    def __init__(
        self,
        recorder: RunRecorder,
        sc: Scenario,
        index: int,
        processes: int,
        stopping: Callable[[], bool],
        drain: float,
    ) -> None:
        opts = recorder.opts
        self.recorder, self.sc, self.index, self.n = recorder, sc, index, max(1, processes)
        self.stopping, self.drain = stopping, drain
        # Seeded by the run's seed, the scenario and the process: a run repeats exactly.
        self.rng = random.Random(
            opts.seed * 1_000_003 + zlib.crc32(sc.name.encode()) + 7919 * index
        )
        self.mix = (
            tuple((Wire(p), share) for p, share in sc.protocol)
            if sc.protocol is not None
            else run_mix(opts.protocol)
        )
        self.slow_share = sc.slow_readers if sc.slow_readers is not None else opts.slow_readers
        self.workload: Workload | None = None
        if sc.prompt_tokens is not None or sc.output_tokens is not None:
            self.workload = Workload(
                replace(
                    opts,
                    prompt_tokens=sc.prompt_tokens or opts.prompt_tokens,
                    output_tokens=sc.output_tokens or opts.output_tokens,
                )
            )

    def pick(self) -> tuple[Wire, bool]:
        """The next iteration's protocol and whether it reads slowly (the scenario's shares)."""
        x, acc, protocol = self.rng.random(), 0.0, self.mix[-1][0]
        for p, share in self.mix:
            acc += share
            if x < acc:
                protocol = p
                break
        return protocol, self.rng.random() < self.slow_share

    def limits(self, slow: bool) -> ClientLimits:
        opts = self.recorder.opts
        return opts.slow_limits if slow else opts.limits

    def iterate(
        self,
        protocol: Wire,
        slow: bool,
        scheduled_at: float | None = None,
        conn: Connection | None = None,
    ) -> list[StreamRecord]:
        return run_conversation(
            self.recorder.source,
            protocol,
            _user_class(protocol, slow),
            self.limits(slow),
            conn,
            scheduled_at,
            scenario=self.sc.name,
            workload=self.workload,
        )

    def sleep_until(self, deadline: float) -> bool:
        """Sleep until ``deadline`` (perf_counter) unless the run stops first; True if it did."""
        while not self.stopping():
            left = deadline - time.perf_counter()
            if left <= 0:
                return False
            gevent.sleep(min(left, 0.5))
        return True

    def finish(self, group: Group) -> None:
        """Give the iterations in flight ``gracefulStop`` (at the run's end: the stop timeout)."""
        group.join(
            timeout=min(self.sc.graceful_stop, self.drain)
            if self.stopping()
            else self.sc.graceful_stop
        )
        group.kill(block=True)


def _user_class(protocol: Wire, slow: bool) -> str:
    return ("Slow" if slow else "") + (
        "SSEStreamUser" if protocol == Wire.SSE else "WebSocketStreamUser"
    )


def _run_vus(ctx: _Context) -> None:
    sc = ctx.sc
    target = [0]
    vus: dict[int, gevent.Greenlet] = {}
    group = Group()

    def vu(i: int) -> None:
        # A VU keeps its connections (one per protocol and reading speed) between iterations.
        conns: dict[tuple[Wire, bool], Connection] = {}
        backoff = UserBackoff(PACER, gevent.sleep)  # a dead server: no spinning (backoff.py)
        try:
            while i < target[0] and not ctx.stopping():
                protocol, slow = ctx.pick()
                backoff.before()
                conn = conns.get((protocol, slow))
                if conn is None:
                    conn = conns[(protocol, slow)] = ctx.recorder.source.transport.open(
                        protocol, ctx.limits(slow), keep_alive=True
                    )
                records = ctx.iterate(protocol, slow, conn=conn)
                backoff.after(records)
                think = ctx.recorder.opts.think_time
                if think > 0:
                    gevent.sleep(think)
        finally:
            for c in conns.values():
                c.close()

    surplus_since: dict[int, float] = {}
    t0 = time.perf_counter()
    while not ctx.stopping():
        now = time.perf_counter()
        want = sc.vus_at(now - t0)
        if want is None:
            break
        target[0] = process_share(want, ctx.index, ctx.n)
        for i, g in vus.items():
            # A VU above a falling target finishes its iteration, within gracefulRampDown.
            if i < target[0] or g.dead:
                surplus_since.pop(i, None)
            elif now - surplus_since.setdefault(i, now) > sc.graceful_ramp_down:
                g.kill(block=False)
        for i in range(target[0]):
            g = vus.get(i)
            if g is None or g.dead:
                vus[i] = group.spawn(vu, i)
        gevent.sleep(_VU_TICK)
    target[0] = 0  # every VU ends after its current iteration
    ctx.finish(group)


def _run_arrivals(ctx: _Context) -> None:
    sc = ctx.sc
    cap = process_share(sc.max_vus, ctx.index, ctx.n)
    group = Group()
    busy = [0]

    def one(protocol: Wire, slow: bool, scheduled_at: float) -> None:
        try:
            ctx.iterate(protocol, slow, scheduled_at)
        finally:
            busy[0] -= 1

    t0 = time.perf_counter()
    epoch0 = time.time() - t0
    for k, offset in enumerate(arrival_offsets(sc)):
        if k % ctx.n != ctx.index:
            continue
        if ctx.sleep_until(t0 + offset):
            break
        protocol, slow = ctx.pick()  # drawn for every arrival, sent or not: the mix stays seeded
        if busy[0] >= cap:
            count_dropped(ctx.recorder, sc.name)
            continue
        busy[0] += 1
        group.spawn(one, protocol, slow, epoch0 + t0 + offset)
    ctx.sleep_until(t0 + sc.duration)
    ctx.finish(group)


def _run_trace(ctx: _Context) -> None:
    """A ``trace`` scenario: this process's share of the trace at its offsets (open loop; see
    :mod:`streamslo.loadgen.replay`), each stream tagged with the scenario."""
    from streamslo.loadgen.base import run_one_stream
    from streamslo.loadgen.trace_schedule import TracePlan, due_requests

    sc = ctx.sc
    assert sc.trace is not None
    cap = process_share(sc.max_vus, ctx.index, ctx.n) if sc.max_vus else 0
    group = Group()
    busy = [0]
    plan = TracePlan(
        sc.trace,
        sc.trace_format,
        sc.trace_speed,
        sc.trace_late,
        sc.trace_max_lag,
        sc.trace_block_tokens,
        dropped_as=sc.name,
    )

    def one(protocol: Wire, slow: bool, turn: Any, scheduled_at: float) -> None:
        try:
            run_one_stream(
                ctx.recorder.source,
                protocol,
                _user_class(protocol, slow),
                ctx.limits(slow),
                scheduled_at=scheduled_at,
                turn=turn,
                scenario=sc.name,
            )
        finally:
            busy[0] -= 1

    for turn, scheduled_at in due_requests(
        ctx.recorder,
        plan,
        ctx.index,
        ctx.n,
        ctx.stopping,
        lambda: bool(cap) and busy[0] >= cap,
        lambda: count_dropped(ctx.recorder, plan.dropped_as),
    ):
        protocol, slow = ctx.pick()
        busy[0] += 1
        group.spawn(one, protocol, slow, turn, scheduled_at)
    if not ctx.stopping():
        group.join()  # the trace's streams end on their own; then the scenario has ended
    ctx.finish(group)


def run_scenario(ctx: _Context) -> None:
    """One scenario in this process: wait for its ``startTime``, then run its executor."""
    if ctx.sleep_until(time.perf_counter() + ctx.sc.start_time):
        return
    if ctx.sc.executor == "trace":
        _run_trace(ctx)
        return
    (_run_arrivals if ctx.sc.arrival_rate else _run_vus)(ctx)


class ScenarioUser(User):
    """Runs this process's share of every ``[scenarios.*]`` of the run (one per process)."""

    fixed_count = 1
    """One per Locust process (set at init to the generator processes)."""

    def wait_time(self) -> float:
        return 0.0

    @task
    def run_scenarios(self) -> None:
        recorder = get_recorder(self.environment)
        opts = recorder.opts
        drain = max(0.0, (self.environment.stop_timeout or 0.0) - 1.0)
        index = process_index(self.environment)

        def stopping() -> bool:
            return is_stopping(self)

        group = Group()
        for sc in from_wire(opts.scenarios):
            group.spawn(
                run_scenario, _Context(recorder, sc, index, opts.generators, stopping, drain)
            )
        group.join()
        if not stopping():
            scenarios_done(self.environment)
        # Idle until the run stops rather than start the scenarios again.
        while not stopping():
            gevent.sleep(0.5)


#: The message a worker sends its master once its scenarios all ended.
DONE_MESSAGE = "streamslo_scenarios_done"


def scenarios_done(environment: Environment) -> None:
    """This process's scenarios all ended: end the run (a worker tells its master, which ends
    it once every worker has said so). Locust's ``--run-time`` is only a safety net: its clock
    starts before the test-start listeners run, seconds before the first scenario does."""
    from locust.runners import WorkerRunner

    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        runner.send_message(DONE_MESSAGE, {"worker": runner.client_id})
    else:
        gevent.spawn(_end, runner)


def _end(runner: Any) -> None:
    # Headless: quit, as the run time would. With the web UI: stop the test, keep the UI.
    if getattr(runner.environment.parsed_options, "headless", True):
        runner.quit()
    else:
        runner.stop()


def install_done_listener(runner: MasterRunner) -> None:
    """A master: quit once every worker's scenarios ended."""
    done: set[str] = set()

    def on_done(environment: Any = None, msg: Any = None, **_: Any) -> None:
        done.add(str(getattr(msg, "node_id", None) or (msg.data or {}).get("worker")))
        if len(done) >= max(1, runner.worker_count):
            done.clear()  # a web UI may start another test
            gevent.spawn(_end, runner)

    runner.register_message(DONE_MESSAGE, on_done)
