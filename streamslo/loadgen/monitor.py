"""The load generator watches itself (SPEC §4): CPU of this process and greenlet lag.

A generator that is itself saturated measures its own delays, not the server's. Each process
samples its CPU use once a second and its scheduling lag twenty times a second, and saves the
figures to ``procs/<tag>.json`` in the results directory; the run is then judged valid or not
by :func:`streamslo.finalize.judge_validity`.
"""

from __future__ import annotations

import time
from pathlib import Path

import gevent
import psutil

from streamslo.results import Layout, write_json

__all__ = ["GeneratorMonitor"]

_LAG_PERIOD = 0.05


class GeneratorMonitor:
    """Samples CPU % and greenlet lag in a background greenlet.

    Args:
        directory: the results directory (None: keep figures in memory only).
        tag: this process's tag (file name).
    """

    def __init__(self, directory: Path | None, tag: str) -> None:
        self.directory = directory
        self.tag = tag
        self.cpu: list[float] = []
        self.lag_ms: list[float] = []
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
        n = 0
        while True:
            t = time.perf_counter()
            gevent.sleep(_LAG_PERIOD)
            self.lag_ms.append(max(0.0, (time.perf_counter() - t - _LAG_PERIOD) * 1000.0))
            n += 1
            if n % 20 == 0:  # CPU once a second
                self.cpu.append(self._proc.cpu_percent(None))

    def figures(self) -> dict[str, object]:
        lag = sorted(self.lag_ms)
        p99 = lag[min(len(lag) - 1, round(0.99 * (len(lag) - 1)))] if lag else None
        busy = sum(1 for c in self.cpu if c > 90.0)
        return {
            "tag": self.tag,
            "cpu_samples": len(self.cpu),
            "cpu_busy_samples": busy,
            "cpu_busy_fraction": busy / len(self.cpu) if self.cpu else 0.0,
            "peak_cpu_percent": max(self.cpu) if self.cpu else None,
            "mean_cpu_percent": sum(self.cpu) / len(self.cpu) if self.cpu else None,
            "lag_samples": len(lag),
            "lag_p99_ms": p99,
            "lag_max_ms": lag[-1] if lag else None,
            "lag_worst_at_s": [
                round(i * _LAG_PERIOD, 2) for i in sorted(range(len(self.lag_ms)), key=self.lag_ms.__getitem__)[-3:]
            ],
        }

    def save(self) -> None:
        if self.directory is None:
            return
        layout = Layout(self.directory)
        layout.procs_dir.mkdir(parents=True, exist_ok=True)
        write_json(layout.proc_json(self.tag), self.figures())
