"""A run's figures for the history: each metric's value and its bootstrap resamples.

The value is the one ``summary.json`` and the report give (numpy ``linear`` percentiles over
every sample, :mod:`streamslo.figures.metrics`). The resamples are the report's bootstrap
(:mod:`streamslo.reports.bootstrap`): whole streams drawn with replacement, since the gaps of
one stream are correlated. They are computed once, when the run is added, and kept in the
store (a few KiB a run): the store never holds a run's gaps, and every later interval (the
point's own, a change against the baseline) is taken from these resamples.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamslo.figures.metrics import (
    LatencyStats,
    counted_mask,
    gauge_value,
    rate_value,
    trend_samples,
)
from streamslo.reports.bootstrap import (
    Clustered,
    bootstrap_means,
    bootstrap_percentiles,
    resamples_for,
)
from streamslo.reports.compare import clustered_rate, clustered_samples
from streamslo.reports.load import LoadedRun
from streamslo.slo.regression import HISTORY_METRICS

__all__ = ["DEFAULT_RESAMPLES", "Measured", "measure_run"]

#: Resamples kept per metric and run: 400 float64 are 3.2 KiB a metric, 67 KiB a run. A 95 %
#: interval's ends then move by about 3 % of its width from one set of resamples to another
#: (20,000 sets of 400 normal draws: the 2.5th and 97.5th percentiles' sd is 0.033 x the width).
DEFAULT_RESAMPLES = 400


@dataclass(frozen=True)
class Measured:
    """One metric of one run."""

    value: float | None
    """The figure (None: the run has no data for it)."""
    resamples: np.ndarray
    """float64, one value per stream-resample (NaN where a resample drew no sample)."""


def _seed(seed: int, key: str) -> np.random.Generator:
    # stable across Python runs (no hash()): the same run measured twice gives the same resamples
    return np.random.default_rng(np.random.SeedSequence([seed, *(ord(c) for c in key)]))


def _trends(run: LoadedRun, resamples: int, seed: int) -> dict[str, Measured]:
    out: dict[str, Measured] = {}
    by_base: dict[str, list[tuple[str, float]]] = {}
    for m in HISTORY_METRICS.values():
        if m.kind == "trend" and m.percentile is not None:
            by_base.setdefault(m.base, []).append((m.id, m.percentile))
    for base, wanted in by_base.items():
        stats = LatencyStats.of(trend_samples(run.data, base))
        data = clustered_samples(run, base)
        n = resamples_for(data.values.size, resamples)
        boot = bootstrap_percentiles(data, [p for _, p in wanted], n, _seed(seed, base))
        for i, (mid, p) in enumerate(wanted):
            value = getattr(stats, f"p{int(p)}")
            out[mid] = Measured(None if value is None else float(value), boot[:, i].copy())
    return out


def _rates(run: LoadedRun, resamples: int, seed: int) -> dict[str, Measured]:
    out: dict[str, Measured] = {}
    for m in HISTORY_METRICS.values():
        if m.kind != "rate":
            continue
        num, den = rate_value(run.data, m.base)
        data = clustered_rate(run, m.base)
        boot = bootstrap_means(data, resamples, _seed(seed, m.id))
        out[m.id] = Measured(None if den == 0 else num / den, boot)
    return out


def _gauges(run: LoadedRun, resamples: int, seed: int) -> dict[str, Measured]:
    """Throughput: the run's count over its length. A resample draws whole streams; its
    figure is what those streams would have given over the same length."""
    out: dict[str, Measured] = {}
    s = run.streams
    n = len(s)
    for m in HISTORY_METRICS.values():
        if m.kind != "gauge":
            continue
        value = gauge_value(run.data, m.base)
        if value is None or n == 0:
            out[m.id] = Measured(None, np.full(resamples, np.nan))
            continue
        per_stream = (
            s["tokens"].fillna(0).to_numpy(dtype=float)
            if m.base == "tokens_per_s"
            else counted_mask(s).to_numpy(dtype=float)  # requests_per_s: each counted stream
        )
        mean = float(per_stream.mean())
        data = Clustered(per_stream, np.arange(n, dtype=np.int64), n)
        boot = bootstrap_means(data, resamples, _seed(seed, m.id))
        # value = n * mean / duration: scale each resample's mean the same way
        scale = value / mean if mean > 0 else 0.0
        out[m.id] = Measured(float(value), boot * scale)
    return out


def measure_run(
    run: LoadedRun, resamples: int = DEFAULT_RESAMPLES, seed: int = 0
) -> dict[str, Measured]:
    """Every history metric of one loaded run (:data:`streamslo.slo.regression.HISTORY_METRICS`).

    Args:
        run: the run, loaded as the report loads it.
        resamples: stream-resamples per metric (a huge run gets fewer: the report's budget).
        seed: the bootstrap's seed (each metric draws from its own stream of it).

    Returns:
        metric id -> :class:`Measured`.
    """
    out = _trends(run, resamples, seed)
    out.update(_rates(run, resamples, seed))
    out.update(_gauges(run, resamples, seed))
    return {mid: out[mid] for mid in HISTORY_METRICS if mid in out}
