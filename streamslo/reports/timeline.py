"""Time series of a run, as tidy frames for the charts (seconds since the run's start).

- :func:`lateness_timeline`: the worst chunk lateness, i.e. the largest inter-token gap, in
  each time bucket (1 s by default; incident B's benchmark used 100 ms). A gap is placed in the
  bucket of ``gaps.t``, the moment it ended.
- :func:`activity_timeline`: streams open and tokens received per second.
- :func:`cdf_points`: an empirical CDF thinned to a fixed number of points.

Gaps and streams come from the latency pool (streams that began and were not cancelled), as
``itl_ms`` does.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from streamslo.figures.metrics import latency_pool
from streamslo.reports.load import LoadedRun

__all__ = ["activity_timeline", "cdf_points", "lateness_timeline"]


def lateness_timeline(run: LoadedRun, bucket_s: float = 1.0) -> pd.DataFrame:
    """Worst gap per bucket: columns ``t`` (bucket start, s) and ``max_gap_ms``.

    Buckets with no gap are absent (nothing was streaming then).
    """
    pool_ids = latency_pool(run.streams)["stream_id"]
    gaps = run.gaps[run.gaps["stream_id"].isin(pool_ids)]
    if gaps.empty:
        return pd.DataFrame({"t": pd.Series(dtype=float), "max_gap_ms": pd.Series(dtype=float)})
    bucket = np.floor(gaps["t"].to_numpy(dtype=float) / bucket_s) * bucket_s
    frame = pd.DataFrame({"t": bucket, "gap_ms": gaps["gap_ms"].to_numpy(dtype=float)})
    out = frame.groupby("t", sort=True)["gap_ms"].max().rename("max_gap_ms").reset_index()
    return out


def activity_timeline(run: LoadedRun, bucket_s: float = 1.0) -> pd.DataFrame:
    """Streams open and tokens/s per bucket: columns ``t``, ``active``, ``tokens_per_s``.

    A stream is open from its start to its end (``started_at + e2e_ms``); ``active`` is the
    time-averaged number open during the bucket (stream-seconds / bucket length), so a user
    that ends one stream and starts the next within a bucket counts once, not twice. Tokens are the first content chunk (at ``ttft_ms``) and each
    gap that ended with a chunk (closed gaps, at ``gaps.t``).
    """
    empty = pd.DataFrame(
        {
            "t": pd.Series(dtype=float),
            "active": pd.Series(dtype=float),
            "tokens_per_s": pd.Series(dtype=float),
        }
    )
    s = run.streams
    if s.empty or run.start_epoch is None:
        return empty
    start = (s["started_at"] - run.start_epoch).to_numpy(dtype=float)
    dur = (s["e2e_ms"].fillna(s["connect_ms"]).fillna(0.0) / 1000.0).to_numpy(dtype=float)
    keep = ~np.isnan(start)
    start, end = start[keep], start[keep] + dur[keep]
    if start.size == 0:
        return empty
    pool = latency_pool(s)
    first = ((pool["started_at"] - run.start_epoch) + pool["ttft_ms"] / 1000.0).dropna()
    gaps = run.gaps[run.gaps["stream_id"].isin(pool["stream_id"]) & ~run.gaps["open"]]
    tok_t = np.concatenate([first.to_numpy(dtype=float), gaps["t"].to_numpy(dtype=float)])
    horizon = max(float(end.max()), float(tok_t.max()) if tok_t.size else 0.0)
    lo = min(0.0, float(np.floor(start.min() / bucket_s) * bucket_s))
    edges = np.arange(lo, horizon + bucket_s, bucket_s)
    if edges.size < 2:
        edges = np.array([lo, lo + bucket_s])
    left, right = edges[:-1], edges[1:]
    active = (_open_integral(start, end, right) - _open_integral(start, end, left)) / bucket_s
    tokens, _ = np.histogram(tok_t, bins=edges)
    return pd.DataFrame({"t": left, "active": active, "tokens_per_s": tokens / bucket_s})


def _open_integral(start: np.ndarray, end: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Stream-seconds open before each ``x``: sum of clip(x - start, 0, end - start)."""
    s_sorted, e_sorted = np.sort(start), np.sort(end)
    s_cum = np.concatenate([[0.0], np.cumsum(s_sorted)])
    e_cum = np.concatenate([[0.0], np.cumsum(e_sorted)])
    ns = np.searchsorted(s_sorted, x, side="left")
    ne = np.searchsorted(e_sorted, x, side="left")
    out: np.ndarray = (ns * x - s_cum[ns]) - (ne * x - e_cum[ne])
    return out


def cdf_points(samples: np.ndarray, points: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """(x, F(x)) of the empirical CDF, thinned to at most ``points`` quantiles plus the tail.

    The top 1 % is kept at full resolution up to ``points`` samples, since that is where p99
    lives.
    """
    x = np.sort(np.asarray(samples, dtype=float))
    n = x.size
    if n == 0:
        return x, x
    f = np.arange(1, n + 1) / n
    if n <= points:
        return x, f
    idx = np.unique(
        np.concatenate(
            [np.linspace(0, n - 1, points).astype(int), np.arange(max(0, n - points), n)]
        )
    )
    return x[idx], f[idx]
