"""Synthetic nightly runs, written as a run writes them: streams by the project's results writer,
windows by its window book, then finalized (run.json, summary.json, slo.json) by the project's
finalize. What ``streamslo history add`` reads is then exactly what a real night leaves.

A night: ``streams`` SSE streams over ``duration_s``, every one ``ok``, ``tokens`` tokens each.
TTFT is lognormal around 150 ms; each gap lognormal around 20 ms (p99 about 45 ms), every stream
with its own pace (gaps within a stream are correlated, as on a real server), and the whole
night scaled by a drift drawn per night (another machine, another hour: ``night_sd``). A
planted ``itl_p99_rise`` stretches the gaps above the distribution's p90 so that the ITL p99
rises by that share while the median stays: the regression a nightly soak is meant to catch,
which still passes ``itl_ms p(99)<200``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from streamslo.figures.windows import WindowAggregator, WindowBook
from streamslo.results.layout import Layout
from streamslo.results.writer import ResultsWriter
from streamslo.runfiles.finalize import finalize
from streamslo.runfiles.windows_csv import append_rows
from streamslo.stream.outcome import Outcome
from streamslo.stream.timing import StreamRecord, Wire

#: The gap distribution: lognormal, median 20 ms, sigma 0.35 (p90 31.3 ms, p99 45.1 ms).
GAP_MEDIAN_S = 0.020
GAP_SIGMA = 0.35
Z90, Z99 = 1.2815515655446004, 2.3263478740408408


@dataclass(frozen=True)
class Night:
    """One synthetic night."""

    seed: int
    start: float
    """Epoch seconds of the run's start."""
    streams: int = 240
    tokens: int = 40
    duration_s: float = 60.0
    itl_p99_rise: float = 0.0
    """0.3: the ITL p99 of this night is 30 % above the distribution's."""
    night_sd: float = 0.03
    """Night-to-night drift of every latency (lognormal sigma)."""
    scenario: str = "locustfiles/scenarios/nightly.toml"
    target: str = "http://llm.internal:8000"


def _tail_stretch(rise: float) -> tuple[float, float]:
    """(x0, k): gaps above x0 (the p90) become x0 + (g - x0) * k, which moves the p99 by
    ``rise`` and leaves everything below the p90 as it was."""
    x0 = GAP_MEDIAN_S * math.exp(Z90 * GAP_SIGMA)
    p99 = GAP_MEDIAN_S * math.exp(Z99 * GAP_SIGMA)
    return x0, ((1.0 + rise) * p99 - x0) / (p99 - x0)


def records(night: Night) -> list[StreamRecord]:
    """The night's finished streams, in the order they ended."""
    rng = np.random.default_rng(night.seed)
    drift = math.exp(rng.normal(0.0, night.night_sd))
    x0, k = _tail_stretch(night.itl_p99_rise)
    out = []
    for i in range(night.streams):
        started = night.start + 0.5 + i * (night.duration_s - 8.0) / night.streams
        pace = math.exp(rng.normal(0.0, 0.08))  # this stream's own pace
        gaps = GAP_MEDIAN_S * np.exp(rng.normal(0.0, GAP_SIGMA, night.tokens - 1))
        if night.itl_p99_rise:
            gaps = np.where(gaps > x0, x0 + (gaps - x0) * k, gaps)
        gaps = gaps * pace * drift
        ttft = 0.150 * math.exp(rng.normal(0.0, 0.3)) * drift
        t0 = 1000.0 + i  # perf_counter of the request's start
        rec = StreamRecord(
            stream_id=f"n{night.seed}-{i}",
            protocol=Wire.SSE,
            user_class="SSEStreamUser",
            started_at=started,
            t0=t0,
        )
        rec.status = 200
        rec.outcome = Outcome.OK
        rec.connect_s = 0.001
        rec.ttft_s = ttft
        rec.e2e_s = ttft + float(gaps.sum())
        rec.tokens = night.tokens
        rec.expected_tokens = night.tokens
        rec.usage_completion_tokens = night.tokens
        rec.finish_reason = "length"
        rec.gap_s.extend(gaps.tolist())
        rec.gap_t.extend((t0 + ttft + np.cumsum(gaps)).tolist())
        out.append(rec)
    out.sort(key=lambda r: r.started_at + (r.e2e_s or 0.0))
    return out


class _Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def write_night(directory: Path, night: Night, window_s: float = 10.0) -> Path:
    """Write the night's results directory (finalized) and return it."""
    clock = _Clock(night.start)
    writer = ResultsWriter(directory, night.start, flush_interval=1e9)
    book = WindowBook(window_s, clock)
    agg = WindowAggregator(window_s, "gen", clock)
    for rec in records(night):
        writer.add(rec)
        agg.add(rec)
        clock.t = rec.started_at + (rec.e2e_s or 0.0)
        agg.sample(clock.t, cpu=20.0, lag_ms=1.0, rss_bytes=150 * 2**20, active=10)
    end = night.start + night.duration_s
    clock.t = end + 60.0
    book.merge(agg.take(wire=False))
    writer.flush(wait=True)
    append_rows(Layout(directory).windows_csv, book.close_all())
    finalize(
        directory,
        {
            "tool_version": "0.1.0",
            "start_epoch": night.start,
            "end_epoch": end,
            "target": night.target,
            "scenario": night.scenario,
            "users": 8,
            "protocol": "sse",
            "max_tokens": night.tokens,
            "locust_version": "2.47.0",
            "window_s": window_s,
        },
    )
    return directory
