"""The metrics of a run, computed from ``streams.csv`` and ``gaps.parquet`` (SPEC §3-4).

One implementation used by the run summary, ``verify`` and ``report``:

- **rates** (k6 ``Rate``): ``truncation_rate``, ``http_5xx_rate``, ``error_rate`` and
  ``<outcome>_rate`` for every outcome; ``cancelled`` streams are in no denominator. A rate
  with no denominator is ``None``.
- **trends** (k6 ``Trend``, milliseconds): ``ttft_ms``, ``itl_ms``, ``tpot_ms``, ``e2e_ms``,
  ``connect_ms``, ``max_gap_ms``, and for open-loop runs ``ttft_sched_ms`` / ``e2e_sched_ms``
  measured from the scheduled send time (coordinated omission). Latency samples pool every
  stream that began and was not cancelled; ``itl_ms`` pools every gap (one sample per gap,
  never averaged per stream), including a failed stream's open last gap.
- **counters**: ``requests``, ``tokens``, ``streams_began``.

Percentiles everywhere use numpy's default ``method="linear"`` over all samples.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from streamslo.results import RunData
from streamslo.stream.outcome import OUTCOMES

__all__ = [
    "COUNTER_METRICS",
    "PERCENTILES",
    "RATE_METRICS",
    "SELECTOR_KEYS",
    "TREND_METRICS",
    "LatencyStats",
    "counter_value",
    "latency_pool",
    "metric_kind",
    "percentile",
    "rate_value",
    "run_duration_s",
    "select",
    "summarize",
    "trend_samples",
]

PERCENTILES = (50, 90, 95, 99)
TREND_METRICS = (
    "ttft_ms",
    "itl_ms",
    "tpot_ms",
    "e2e_ms",
    "connect_ms",
    "max_gap_ms",
    "ttft_sched_ms",
    "e2e_sched_ms",
)
RATE_METRICS = (
    "truncation_rate",
    "http_5xx_rate",
    "error_rate",
    # http_5xx_rate is both a headline rate and an outcome rate: listed once.
    *(f"{o}_rate" for o in OUTCOMES if o not in ("cancelled", "http_5xx")),
)
COUNTER_METRICS = ("requests", "tokens", "streams_began")
#: Columns of streams.csv a threshold selector may filter on (k6 tags style).
SELECTOR_KEYS = ("protocol", "user_class", "outcome", "status")

_NOT_BEGUN = ("http_4xx", "http_5xx", "connect_error")


def metric_kind(name: str) -> str | None:
    """``"trend"``, ``"rate"``, ``"counter"``, or None for an unknown metric."""
    if name in TREND_METRICS:
        return "trend"
    if name in RATE_METRICS:
        return "rate"
    if name in COUNTER_METRICS:
        return "counter"
    return None


def percentile(samples: np.ndarray, p: float) -> float | None:
    """The ``p``-th percentile (numpy ``linear``), None without samples."""
    if samples.size == 0:
        return None
    return float(np.percentile(samples, p))


@dataclass(frozen=True)
class LatencyStats:
    """Distribution of one latency metric, in milliseconds."""

    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    max: float | None
    mean: float | None
    count: int

    @classmethod
    def of(cls, samples: np.ndarray) -> LatencyStats:
        if samples.size == 0:
            return cls(None, None, None, None, None, None, 0)
        p50, p90, p95, p99 = (float(v) for v in np.percentile(samples, PERCENTILES))
        return cls(p50, p90, p95, p99, float(samples.max()), float(samples.mean()), int(samples.size))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _began_mask(streams: Any) -> Any:
    status = streams["status"]
    ok_status = ((status >= 200) & (status < 300)) | (status == 101)
    return ok_status.fillna(False).astype(bool) & ~streams["outcome"].isin(_NOT_BEGUN)


def select(data: RunData, selector: Mapping[str, str]) -> RunData:
    """The part of a run whose streams match every ``key: value`` of ``selector``.

    Raises:
        KeyError: a selector key that is not one of :data:`SELECTOR_KEYS`.
    """
    if not selector:
        return data
    streams = data.streams
    mask = np.ones(len(streams), dtype=bool)
    for key, value in selector.items():
        if key not in SELECTOR_KEYS:
            raise KeyError(key)
        col = streams[key].astype("string")
        mask &= (col == str(value)).fillna(False).to_numpy(dtype=bool)
    sub = streams[mask]
    gaps = data.gaps[data.gaps["stream_id"].isin(sub["stream_id"])]
    return RunData(path=data.path, run=data.run, streams=sub, gaps=gaps)


def latency_pool(streams: Any) -> Any:
    """Streams that began and were not cancelled: the pool every latency comes from."""
    return streams[_began_mask(streams) & (streams["outcome"] != "cancelled")]


def trend_samples(data: RunData, name: str) -> np.ndarray:
    """Every sample of a trend metric, in milliseconds."""
    return np.asarray(_trend_series(data, name), dtype=float)


def _trend_series(data: RunData, name: str) -> Any:
    pool = latency_pool(data.streams)
    if name == "itl_ms":
        gaps = data.gaps[data.gaps["stream_id"].isin(pool["stream_id"])]
        return gaps["gap_ms"].to_numpy(dtype=float)
    if name == "tpot_ms":
        tokens = pool["tokens"].astype("float64")
        ok = (tokens > 1) & pool["ttft_ms"].notna() & pool["e2e_ms"].notna()
        sub = pool[ok.fillna(False)]
        vals = (sub["e2e_ms"] - sub["ttft_ms"]) / (sub["tokens"].astype("float64") - 1)
        return vals.to_numpy(dtype=float)
    if name in ("ttft_sched_ms", "e2e_sched_ms"):
        base = name.replace("_sched", "")
        sub = pool[pool["scheduled_at"].notna() & pool[base].notna()]
        lag_ms = (sub["started_at"] - sub["scheduled_at"]).clip(lower=0) * 1000.0
        return (sub[base] + lag_ms).to_numpy(dtype=float)
    if name == "connect_ms":
        col = data.streams.loc[data.streams["outcome"] != "cancelled", "connect_ms"]
        return col.dropna().to_numpy(dtype=float)
    if name in ("ttft_ms", "e2e_ms", "max_gap_ms"):
        return pool[name].dropna().to_numpy(dtype=float)
    raise KeyError(name)


def rate_value(data: RunData, name: str) -> tuple[int, int]:
    """(numerator, denominator) of a rate metric."""
    s = data.streams
    counted = s[s["outcome"] != "cancelled"]
    if name == "truncation_rate":
        began = counted[_began_mask(counted)]
        return int((began["outcome"] != "ok").sum()), len(began)
    if name == "http_5xx_rate":
        return int((counted["outcome"] == "http_5xx").sum()), len(counted)
    if name == "error_rate":
        return int((counted["outcome"] != "ok").sum()), len(counted)
    if name.endswith("_rate") and name[:-5] in OUTCOMES:
        return int((counted["outcome"] == name[:-5]).sum()), len(counted)
    raise KeyError(name)


def counter_value(data: RunData, name: str) -> float:
    """The value of a counter metric."""
    s = data.streams
    if name == "requests":
        return float(len(s))
    if name == "tokens":
        return float(s["tokens"].fillna(0).sum())
    if name == "streams_began":
        return float(_began_mask(s[s["outcome"] != "cancelled"]).sum())
    raise KeyError(name)


def _ratio(num: int, den: int) -> float | None:
    return None if den == 0 else num / den


def run_duration_s(data: RunData) -> float | None:
    """The run's length in seconds: run.json's start/end epochs, else the span of its streams.

    Returns:
        Seconds, or None when the run has no length (no streams, no start/end).
    """
    run = data.run
    start, end = run.get("start_epoch"), run.get("end_epoch")
    if isinstance(start, (int, float)) and isinstance(end, (int, float)) and end > start:
        return float(end - start)
    s = data.streams
    if len(s) == 0:
        return None
    ends = s["started_at"] + s["e2e_ms"].fillna(0) / 1000.0
    span = float(ends.max() - s["started_at"].min())
    return span if span > 0 else None


def summarize(data: RunData) -> dict[str, Any]:
    """The ``summary.json`` of a run (SPEC §5)."""
    s = data.streams
    counts = {o: int((s["outcome"] == o).sum()) for o in OUTCOMES}
    out: dict[str, Any] = {
        "requests": len(s),
        "outcomes": counts,
        "truncation_rate": _ratio(*rate_value(data, "truncation_rate")),
        "http_5xx_rate": _ratio(*rate_value(data, "http_5xx_rate")),
        "error_rate": _ratio(*rate_value(data, "error_rate")),
    }
    for name in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
        out[name] = LatencyStats.of(trend_samples(data, name)).as_dict()
    if s["scheduled_at"].notna().any():
        for name in ("ttft_sched_ms", "e2e_sched_ms"):
            out[name] = LatencyStats.of(trend_samples(data, name)).as_dict()
    duration = run_duration_s(data)
    out["duration_s"] = duration
    counted = s[s["outcome"] != "cancelled"]
    out["requests_per_s"] = None if not duration else len(counted) / duration
    out["tokens_per_s"] = None if not duration else float(s["tokens"].fillna(0).sum()) / duration
    out["valid"] = data.valid
    if not data.valid:
        out["invalid_reason"] = data.run.get("invalid_reason")
    return out
