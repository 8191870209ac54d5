"""The load generator watches itself: CPU of this process, greenlet lag, and its own memory.

A generator that is itself saturated measures its own delays, not the server's. Each process
samples its scheduling lag twenty times a second, and its CPU use, RSS and streams in flight
once a second; it saves the run's figures to ``procs/<tag>.json`` in the results directory
(the run is then judged valid or not by :func:`streamslo.runfiles.finalize.judge_validity`) and hands
each sample to the window aggregator (``windows.csv``: ``gen_cpu_pct``, ``gen_lag_ms_p99``,
``gen_rss_mb``, ``active_streams``).

Memory stays bounded however long the run: lag goes into a histogram (1 % precision), CPU into
counts and sums, the worst lags into a heap of three. Every 30 s it also collects the young
generation and gives the C heap's free pages back to the system (:mod:`streamslo.loadgen.heap`):
without that, glibc kept every page the generator ever freed in the middle of its heaps, and
RSS crept up while the memory in use stayed flat. Nothing is sorted on the event loop (a
list of every sample, sorted at each save, grew to 72,000 samples an hour and paused every
stream while it sorted).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import gevent
import psutil

from streamslo.figures.histogram import LogHistogram
from streamslo.loadgen import heap
from streamslo.results.layout import Layout, write_json

if TYPE_CHECKING:
    from streamslo.figures.windows import WindowAggregator

__all__ = ["GeneratorMonitor"]

_LAG_PERIOD = 0.05
#: Samples above this share of a core count as busy (the validity rule).
_BUSY_PCT = 90.0


class GeneratorMonitor:
    """Samples CPU %, RSS and greenlet lag in a background greenlet.

    Args:
        directory: the results directory (None: keep figures in memory only).
        tag: this process's tag (file name).
        windows: where each sample also goes (None: nowhere).
        active: how many streams this process has in flight now.
    """

    def __init__(
        self,
        directory: Path | None,
        tag: str,
        windows: WindowAggregator | None = None,
        active: Callable[[], int] | None = None,
    ) -> None:
        self.directory = directory
        self.tag = tag
        self.windows = windows
        self.active = active
        self.lag = LogHistogram()
        """Every lag sample (ms)."""
        self.cpu_samples = 0
        self.cpu_busy = 0
        self.cpu_sum = 0.0
        self.cpu_peak: float | None = None
        self.rss_first: float | None = None
        self.rss_last: float | None = None
        self.rss_peak: float | None = None
        self.dropped: dict[str, int] = {}
        """Arrivals dropped per scenario (no free VU, or the concurrency cap): k6's dropped_iterations."""
        self._worst: list[
            tuple[float, float]
        ] = []  # (lag ms, seconds since start): a min-heap of 3
        self._n = 0
        self._trim_every = (
            max(1, round(heap.TRIM_EVERY_S / _LAG_PERIOD)) if heap.TRIM_EVERY_S > 0 else 0
        )
        self._proc = psutil.Process()
        self._greenlet: gevent.Greenlet | None = None

    def start(self) -> None:
        if self._greenlet is None:
            self._proc.cpu_percent(None)
            self._greenlet = gevent.spawn(self._loop)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None
        self.save()

    def _loop(self) -> None:
        while True:
            t = time.perf_counter()
            gevent.sleep(_LAG_PERIOD)
            lag = max(0.0, (time.perf_counter() - t - _LAG_PERIOD) * 1000.0)
            self.add_lag(lag)
            if self._n % 20 == 0:  # once a second
                self.add_second(self._proc.cpu_percent(None), float(self._proc.memory_info().rss))
            if self._trim_every and self._n % self._trim_every == 0:
                heap.compact()  # young cycles freed, the C heap's free pages given back

    def add_lag(self, lag_ms: float) -> None:
        """One lag sample (ms)."""
        self._n += 1
        self.lag.add(lag_ms)
        item = (lag_ms, round(self._n * _LAG_PERIOD, 2))
        if len(self._worst) < 3:
            heapq.heappush(self._worst, item)
        elif lag_ms > self._worst[0][0]:
            heapq.heapreplace(self._worst, item)
        if self.windows is not None:
            self.windows.sample(time.time(), lag_ms=lag_ms)

    def add_second(self, cpu: float, rss: float) -> None:
        """The once-a-second samples: CPU % of one core, RSS in bytes."""
        self.cpu_samples += 1
        self.cpu_sum += cpu
        self.cpu_busy += cpu > _BUSY_PCT
        self.cpu_peak = cpu if self.cpu_peak is None else max(self.cpu_peak, cpu)
        if self.rss_first is None:
            self.rss_first = rss
        self.rss_last = rss
        self.rss_peak = rss if self.rss_peak is None else max(self.rss_peak, rss)
        if self.windows is not None:
            active = float(self.active()) if self.active is not None else None
            self.windows.sample(time.time(), cpu=cpu, rss_bytes=rss, active=active)

    def figures(self) -> dict[str, object]:
        """``procs/<tag>.json``."""
        n = self.cpu_samples
        mb = 2**20
        return {
            "tag": self.tag,
            "cpu_samples": n,
            "cpu_busy_samples": self.cpu_busy,
            "cpu_busy_fraction": self.cpu_busy / n if n else 0.0,
            "peak_cpu_percent": self.cpu_peak,
            "mean_cpu_percent": self.cpu_sum / n if n else None,
            "lag_samples": len(self.lag),
            # Nearest rank, as this figure always was (the validity rule's 20 ms): a short run's
            # few samples would otherwise interpolate toward its one start-up pause.
            "lag_p99_ms": self.lag.value_at_rank(round(0.99 * (len(self.lag) - 1))),
            "lag_max_ms": self.lag.max if self.lag.count else None,
            "lag_worst_at_s": [t for _, t in sorted(self._worst)],
            "rss_start_mb": None if self.rss_first is None else round(self.rss_first / mb, 2),
            "rss_end_mb": None if self.rss_last is None else round(self.rss_last / mb, 2),
            "rss_peak_mb": None if self.rss_peak is None else round(self.rss_peak / mb, 2),
            "dropped_iterations": dict(self.dropped),
        }

    def save(self) -> None:
        if self.directory is None:
            return
        layout = Layout(self.directory)
        layout.procs_dir.mkdir(parents=True, exist_ok=True)
        write_json(layout.proc_json(self.tag), self.figures())
