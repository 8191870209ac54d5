"""Event-loop watchdog (incident B): a heartbeat task plus a sampling thread.

The heartbeat sleeps ``interval`` (10 ms) and records how late it woke (``LOOP_LAG``). A
thread polls every 5 ms; when the beat is more than ``threshold`` (40 ms) overdue it samples
the loop thread's stack (``sys._current_frames``; up to 2 samples, 15 frames). When the beat
finally runs, the stall is attributed to the first *known* function on the sampled stack
(innermost first), or to ``gc`` when a collection ran during it, counted by cause and logged.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import threading
import time
import traceback
from collections import Counter, deque
from typing import Any

from streamslo.server import metrics

__all__ = ["KNOWN_CAUSES", "LoopWatchdog"]

log = logging.getLogger(__name__)

#: "file.py:function" -> cause; the first match walking outwards from the innermost frame wins
KNOWN_CAUSES: dict[str, str] = {
    "naive.py:_load_tokenizer": "tokenizer-load",
    "naive.py:_tls_contexts": "tls-context",
    "naive.py:_score": "pure-python-scoring",
    "naive.py:_compress": "compression",
    "naive.py:_garbage": "garbage",
    "naive.py:_sync": "device-sync",
    "engine.py:_device_sync": "device-sync",
    "model.py:prefill": "model-compute",
    "model.py:decode": "model-compute",
    "sampling.py:sample": "model-compute",
    "naive.py:_generate_inner": "model-compute",
}


class LoopWatchdog:
    """Detects and attributes event-loop stalls. Start with :meth:`start` on the loop."""

    def __init__(
        self, interval: float = 0.01, threshold: float = 0.04, poll: float = 0.005
    ) -> None:
        self.interval = interval
        self.threshold = threshold
        self.poll = poll
        self.counts: Counter[str] = Counter()
        self.recent: deque[dict[str, Any]] = deque(maxlen=20)
        self.total_blocked_s = 0.0
        self._due = 0.0
        self._samples: list[list[str]] = []
        self._loop_tid = 0
        self._stop = threading.Event()
        self._task: asyncio.Task[None] | None = None
        self._gc_during = False
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the heartbeat (on the running loop) and the sampling thread."""
        self._loop_tid = threading.get_ident()
        self._due = time.perf_counter() + self.interval
        self._task = asyncio.get_running_loop().create_task(self._beat())
        gc.callbacks.append(self._on_gc)
        threading.Thread(target=self._sampler, name="loop-watchdog", daemon=True).start()

    def stop(self) -> None:
        """Stop both."""
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and threading.get_ident() == self._loop_tid:
            self._gc_during = True

    async def _beat(self) -> None:
        while True:
            self._due = time.perf_counter() + self.interval
            await asyncio.sleep(self.interval)
            lag = max(0.0, time.perf_counter() - self._due)
            metrics.LOOP_LAG.observe(lag)
            if lag > self.threshold:
                self._record(lag)
            with self._lock:
                self._samples = []
            self._gc_during = False

    def _record(self, lag: float) -> None:
        with self._lock:
            samples = list(self._samples)
        cause = "unknown"
        for stack in samples:
            for fn in reversed(stack):
                where, _, func = fn.partition(" ")
                name = f"{where.rsplit(':', 1)[0]}:{func}"
                if name in KNOWN_CAUSES:
                    cause = KNOWN_CAUSES[name]
                    break
            if cause != "unknown":
                break
        if cause == "unknown" and self._gc_during:
            cause = "gc"
        if cause == "unknown" and samples and all(_idle(stack) for stack in samples):
            # The loop was waiting in select when it was sampled: it had nothing to run, so
            # its lateness is the host's (a starved CPU), not the server's work.
            cause = "host busy"
        self.counts[cause] += 1
        self.total_blocked_s += lag
        metrics.LOOP_STALLS.labels(cause).inc()
        top = samples[0][-15:] if samples else []
        self.recent.append(
            {"at": time.time(), "ms": round(lag * 1000, 1), "cause": cause, "frames": top}
        )
        log.log(
            logging.DEBUG if cause == "host busy" else logging.WARNING,
            "event loop stalled %.0f ms (cause %s); top frames: %s",
            lag * 1000,
            cause,
            " <- ".join(reversed(top[-5:])),
        )

    def _sampler(self) -> None:
        while not self._stop.wait(self.poll):
            overdue = time.perf_counter() - self._due
            if overdue <= self.threshold:
                continue
            with self._lock:
                if len(self._samples) >= 2:
                    continue
            frame = sys._current_frames().get(self._loop_tid)
            if frame is None:
                continue
            stack = [
                f"{fs.filename.rsplit('/', 1)[-1]}:{fs.lineno} {fs.name}"
                for fs in traceback.extract_stack(frame, limit=40)
            ]
            del frame
            with self._lock:
                self._samples.append(stack)

    def snapshot(self) -> dict[str, object]:
        """What ``/debug/stalls`` serves."""
        return {
            "stalls": sum(self.counts.values()),
            "by_cause": dict(self.counts),
            "blocked_s": round(self.total_blocked_s, 3),
            "threshold_ms": self.threshold * 1000,
            "recent": list(self.recent),
        }


def _idle(stack: list[str]) -> bool:
    """Whether a sampled stack (innermost frame last) is the loop waiting in its selector."""
    return bool(stack) and stack[-1].startswith("selectors.py:") and stack[-1].endswith(" select")
