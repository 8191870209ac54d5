"""Open-loop load: requests arrive at a rate, whether or not earlier ones finished.

Closed loops (a user waits for its stream before sending the next) slow down when the server
does, and so hide latency (coordinated omission). Here one arrival greenlet per generator
process draws gaps from a gamma distribution (shape = ``--burstiness``; 1 is Poisson, as in
vLLM's benchmark) and starts each request in its own greenlet. Each request records the time it
was *scheduled* for as well as when it really started, so a late generator cannot hide latency.
With ``--turns N`` an arrival starts a conversation, whose turns follow one another. With
``--max-concurrency`` an arrival that finds the cap reached is dropped and counted
(``dropped_iterations``), never sent late.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

import gevent
from gevent.pool import Group
from locust import task

from streamslo.loadgen.base import StreamUser, run_conversation
from streamslo.loadgen.executors import count_dropped, is_stopping, process_index
from streamslo.stream.timing import Wire

__all__ = ["DEFAULT_SCENARIO", "OpenLoopStreamUser", "arrival_gaps"]

#: The name the open loop's dropped arrivals are counted under (k6 calls its implicit
#: scenario "default").
DEFAULT_SCENARIO = "default"


def arrival_gaps(rate: float, burstiness: float, seed: int) -> Iterator[float]:
    """Endless seeded inter-arrival gaps (seconds) with mean ``1/rate``."""
    rng = random.Random(seed)
    theta = 1.0 / (rate * burstiness)
    while True:
        yield rng.gammavariate(burstiness, theta)


class OpenLoopStreamUser(StreamUser):
    """Generates arrivals at ``--request-rate`` (split over ``fixed_count`` generators)."""

    fixed_count = 1
    """One arrival generator per Locust process (``--processes-hint``; set at init)."""

    def wait_time(self) -> float:
        return 0.0

    @task
    def stream(self) -> None:
        opts = self.recorder.opts
        n = opts.generators  # arrival generators sharing the rate, one per process
        rate = opts.request_rate / n
        cap = max(1, opts.max_concurrency // n) if opts.max_concurrency else 0
        busy = [0]
        # Seeded per process (worker index under distributed runs), so a run repeats exactly.
        index = process_index(self.environment)
        rng = random.Random(opts.seed + 7919 * (index + 1))
        ws_share = {"sse": 0.0, "ws": 1.0, "mixed": 0.5}[opts.protocol]
        group = Group()
        gaps = arrival_gaps(rate, opts.burstiness, opts.seed + index)
        t_next = time.perf_counter()
        epoch0 = time.time() - t_next
        rec = self.recorder
        while not is_stopping(self) and not rec.source.load_over:
            t_next += next(gaps)
            delay = t_next - time.perf_counter()
            if delay > 0:
                gevent.sleep(delay)
            if is_stopping(self) or rec.source.load_over:
                break
            protocol = Wire.WS if rng.random() < ws_share else Wire.SSE
            if cap and busy[0] >= cap:
                # At the cap the arrival is dropped and counted; the schedule keeps its times
                # (waiting for a slot, then sending what queued up, would be a burst).
                count_dropped(self.recorder, DEFAULT_SCENARIO)
                continue
            busy[0] += 1
            g = group.spawn(self._one, protocol, epoch0 + t_next)
            g.link(lambda _g: busy.__setitem__(0, busy[0] - 1))
        drain = max(0.0, (self.environment.stop_timeout or 0.0) - 1.0)
        group.join(timeout=drain)
        group.kill(block=True)

    def _one(self, protocol: Wire, scheduled_at: float) -> None:
        run_conversation(
            self.recorder.source, protocol, type(self).__name__, self.limits, None, scheduled_at
        )


# Locust also inherits the base class's closed-loop task; an open-loop user runs only its
# arrival process.
OpenLoopStreamUser.tasks = [OpenLoopStreamUser.stream]
