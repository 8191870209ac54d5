"""Cluster bootstrap: confidence intervals that resample whole streams (docs/timing.md).

The gaps of one stream are correlated (one stall delays every later token of that stream), so
resampling single gaps would give intervals that are far too narrow. Here the unit is the
stream: a resample draws ``n`` streams with replacement out of the ``n`` in the pool, and each
drawn stream brings all of its samples. A stream drawn ``k`` times counts ``k`` times, which is
computed as a weight, never by copying samples:

- percentiles: the samples are sorted once; a resample's weights are cumulated along that order
  and the ranks numpy's ``linear`` method needs are found by binary search, so each resample
  costs one pass over the samples and gives the same value as ``np.percentile`` over the
  repeated samples;
- means (rates): per-stream sums and counts, one matrix product per batch.

The cost is bounded: at most :data:`ELEMENT_BUDGET` weight cells in all, so a run with millions
of gaps gets fewer resamples (never fewer than :data:`MIN_RESAMPLES`); the number used is
returned with every interval. Everything is seeded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "BATCH_CELLS",
    "ELEMENT_BUDGET",
    "MIN_RESAMPLES",
    "Clustered",
    "bootstrap_means",
    "bootstrap_percentiles",
    "difference_interval",
    "draw_stream_counts",
    "resamples_for",
]

#: Upper bound on (resamples x samples) for one bootstrap.
ELEMENT_BUDGET = 200_000_000
#: Fewest resamples a large run is cut down to.
MIN_RESAMPLES = 200
#: Weight cells held in memory at once (int32: 4 bytes each).
BATCH_CELLS = 4_000_000


@dataclass(frozen=True)
class Clustered:
    """Samples of one metric with the stream each came from."""

    values: np.ndarray
    """The samples (float64)."""
    clusters: np.ndarray
    """For each sample, its stream's index in ``0 .. n_clusters-1`` (int64)."""
    n_clusters: int
    """Streams in the pool, including those that gave no sample for this metric."""


def resamples_for(n_samples: int, requested: int) -> int:
    """How many resamples a bootstrap over ``n_samples`` samples may afford."""
    affordable = ELEMENT_BUDGET // max(n_samples, 1)
    return int(max(min(requested, MIN_RESAMPLES), min(requested, affordable)))


def draw_stream_counts(rng: np.random.Generator, n: int, size: int) -> np.ndarray:
    """How often each of ``n`` streams is drawn, for ``size`` resamples of ``n`` draws.

    Returns:
        int32 array (size, n); every row sums to ``n``.
    """
    picks = rng.integers(0, n, size=(size, n))
    picks += (np.arange(size) * n)[:, None]
    return np.bincount(picks.ravel(), minlength=size * n).reshape(size, n).astype(np.int32)


def bootstrap_percentiles(
    data: Clustered, percentiles: Sequence[float], resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """Percentiles of ``resamples`` stream-resamples of ``data``.

    Args:
        data: the samples and their streams.
        percentiles: in 0..100 (numpy ``linear`` method).
        resamples: how many resamples (see :func:`resamples_for` for the bounded count).
        rng: the seeded generator.

    Returns:
        Array (resamples, len(percentiles)); a row is NaN where a resample drew no sample.
    """
    ps = np.asarray(percentiles, dtype=float) / 100.0
    out = np.full((resamples, ps.size), np.nan)
    g = data.values.size
    if g == 0 or data.n_clusters == 0:
        return out
    order = np.argsort(data.values, kind="stable")
    v = data.values[order]
    c = data.clusters[order]
    # a resample's total weight is at most n_clusters x the largest stream's sample count
    largest = int(np.bincount(c, minlength=data.n_clusters).max())
    dtype = np.int32 if data.n_clusters * largest < 2**31 - 1 else np.int64
    batch = max(1, min(resamples, BATCH_CELLS // g))
    done = 0
    while done < resamples:
        b = min(batch, resamples - done)
        counts = draw_stream_counts(rng, data.n_clusters, b).astype(dtype, copy=False)
        cum = np.cumsum(counts[:, c], axis=1, dtype=dtype)  # (b, g)
        for i in range(b):
            total = int(cum[i, -1])
            if total == 0:
                continue
            h = (total - 1) * ps
            lo = np.floor(h)
            frac = h - lo
            # ranks as the cumulated weights' own dtype: searchsorted would otherwise convert
            # the whole row to float
            lo_k = lo.astype(dtype)
            hi_k = np.minimum(lo_k + 1, total - 1).astype(dtype)
            # rank k (0-based) of the repeated sorted samples is the first j with cum[j] > k
            j_lo = np.searchsorted(cum[i], lo_k, side="right")
            j_hi = np.searchsorted(cum[i], hi_k, side="right")
            out[done + i] = v[j_lo] + frac * (v[j_hi] - v[j_lo])
        done += b
    return out


def bootstrap_means(data: Clustered, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Means of ``resamples`` stream-resamples of ``data`` (NaN where none was drawn)."""
    out = np.full(resamples, np.nan)
    if data.values.size == 0 or data.n_clusters == 0:
        return out
    sums = np.bincount(data.clusters, weights=data.values, minlength=data.n_clusters)
    ns = np.bincount(data.clusters, minlength=data.n_clusters).astype(float)
    batch = max(1, min(resamples, BATCH_CELLS // data.n_clusters))
    done = 0
    while done < resamples:
        b = min(batch, resamples - done)
        counts = draw_stream_counts(rng, data.n_clusters, b).astype(float)
        num, den = counts @ sums, counts @ ns
        with np.errstate(invalid="ignore", divide="ignore"):
            out[done : done + b] = np.where(den > 0, num / np.where(den > 0, den, 1), np.nan)
        done += b
    return out


def difference_interval(
    before: np.ndarray, after: np.ndarray, confidence: float
) -> tuple[float | None, float | None]:
    """Percentile-bootstrap interval of ``after - before`` from independent resamples.

    Args:
        before: resampled statistic of the before run, shape (B,) (NaN = no sample).
        after: resampled statistic of the after run, shape (B,).
        confidence: e.g. 0.95.

    Returns:
        (low, high), or (None, None) when too few resamples had data on both sides.
    """
    n = min(before.size, after.size)
    diff = after[:n] - before[:n]
    diff = diff[np.isfinite(diff)]
    if diff.size < max(20, n // 2):
        return None, None
    alpha = (1.0 - confidence) / 2.0
    low, high = np.percentile(diff, [100 * alpha, 100 * (1 - alpha)])
    return float(low), float(high)
