"""Drift and leaks: a robust trend per resource series of a run, and a verdict.

Series (each ``(t seconds, value)``):

- ``gen_rss_mb``: the load generator's memory, from ``windows.csv``;
- ``server_rss_mb``, ``server_open_files``, ``server_threads``: the server's processes, from
  ``server/resources.jsonl`` (psutil on the bundled server; ``process_*`` metrics of another);
- ``server_worker_restarts``: the bundled server's worker restarts (a count, judged by its
  growth, not a slope).

The trend is the Theil–Sen slope (the median of the slopes between every pair of points) with
Sen's confidence interval (the pairwise slopes ranked ± z·σ of Kendall's S): robust to the
spikes of a garbage collection or a burst of traffic. The first :data:`SETTLE_FRACTION` of a
series is left out (memory grows while caches and pools fill), and a long series is thinned to
:data:`MAX_POINTS` medians of equal slices (pairs grow with the square).

Verdicts: ``leak`` when the interval lies above 0, the fitted growth over the series is more
than :data:`TOLERANCE` of its level (a real but tiny slope is not a leak worth a verdict),
*and* the later half of the series still grows (its own interval above 0): a leak keeps
growing, while memory that fills pools and caches levels off. Measured: a 20-minute run at
300 streams grew 161 → 195 MiB over its first 5 minutes, then held 195–215 MiB; over the
whole it fits +56 MiB/h, its later half −27 MiB/h: ``flat``. ``shrinking`` is the mirror
case. ``flat`` only when the later half's interval rules out a leak: the most it lets the
series grow over that half is within :data:`TOLERANCE` of its level; otherwise
``inconclusive`` (a short or noisy series whose interval still allows large growth is never
called flat). ``too short``
under :data:`MIN_POINTS` points or :data:`MIN_SPAN_S` seconds: no slope then, only the reason
(:attr:`Trend.note`). Restarts: ``restarts`` when the count grew, else ``flat``.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from streamslo.results.layout import Layout

__all__ = [
    "MAX_POINTS",
    "MIN_POINTS",
    "MIN_SPAN_S",
    "SETTLE_FRACTION",
    "TOLERANCE",
    "Trend",
    "analyse",
    "collect_series",
    "judge",
    "theil_sen",
    "too_short_note",
]

#: Leave out this share of each series' start (warming caches are not leaks).
SETTLE_FRACTION = 0.1
#: Thin a series to this many points before the O(n²) fit.
MAX_POINTS = 400
#: Fewer points than this: no verdict.
MIN_POINTS = 8
#: A series shorter than this (seconds) gets no verdict: a 40 s run's open files "grew 221 %"
#: from 5 to 16 while the server warmed up, which says nothing of a leak.
MIN_SPAN_S = 60.0
#: Growth over the series, relative to its level, that a leak must exceed.
TOLERANCE = 0.05


@dataclass(frozen=True)
class Trend:
    """One series' trend and verdict (``summary.json``'s ``drift``)."""

    series: str
    unit: str
    points: int
    span_s: float
    start: float | None
    """The series' median over its first tenth (after settling)."""
    end: float | None
    slope_per_h: float | None
    ci_low_per_h: float | None
    ci_high_per_h: float | None
    growth_pct: float | None
    """Fitted growth over the span, as a share of the level (%)."""
    late_slope_per_h: float | None
    late_ci_low_per_h: float | None
    late_ci_high_per_h: float | None
    """The slope and interval of the later half alone (a leak keeps growing there)."""
    verdict: str
    """``leak``, ``flat``, ``shrinking``, ``inconclusive``, ``restarts``, ``too short``."""
    note: str | None = None
    """Why ``too short`` (what the series had, what a verdict needs) or ``inconclusive`` (the
    growth its interval still allows)."""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def theil_sen(
    t: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray, confidence: float = 0.95
) -> tuple[float, float, float, float]:
    """The Theil–Sen line through ``(t, y)`` with Sen's confidence interval of its slope.

    Returns:
        (slope, intercept, slope low, slope high), per unit of ``t``.

    Raises:
        ValueError: fewer than 3 points, or no two distinct ``t``.
    """
    x = np.asarray(t, dtype=float)
    v = np.asarray(y, dtype=float)
    if x.size < 3:
        raise ValueError("a trend needs at least 3 points")
    i, j = np.triu_indices(x.size, k=1)
    dx = x[j] - x[i]
    keep = dx != 0
    if not keep.any():
        raise ValueError("a trend needs two distinct times")
    slopes = np.sort((v[j] - v[i])[keep] / dx[keep])
    slope = float(np.median(slopes))
    intercept = float(np.median(v - slope * x))
    n, m = x.size, slopes.size
    z = _z(confidence)
    c = z * math.sqrt(n * (n - 1) * (2 * n + 5) / 18.0)
    lo = int(max(0, math.floor((m - c) / 2.0)))
    hi = int(min(m - 1, math.ceil((m + c) / 2.0)))
    return slope, intercept, float(slopes[lo]), float(slopes[hi])


def _z(confidence: float) -> float:
    """The two-sided normal quantile, by bisection on erf (scipy is not a dependency)."""
    target = 1.0 - (1.0 - confidence) / 2.0
    lo, hi = 0.0, 10.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _thin(t: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if t.size <= MAX_POINTS:
        return t, y
    edges = np.linspace(0, t.size, MAX_POINTS + 1).astype(int)
    tt = np.array([np.median(t[a:b]) for a, b in itertools.pairwise(edges) if b > a])
    yy = np.array([np.median(y[a:b]) for a, b in itertools.pairwise(edges) if b > a])
    return tt, yy


def judge(
    series: str, unit: str, t: Sequence[float], y: Sequence[float], *, counter: bool = False
) -> Trend:
    """The trend and verdict of one series (see the module's docstring)."""
    x = np.asarray(t, dtype=float)
    v = np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(v)
    x, v = x[ok], v[ok]
    order = np.argsort(x, kind="stable")
    x, v = x[order], v[order]
    span = float(x[-1] - x[0]) if x.size else 0.0
    if counter:
        grew = bool(v.size and v[-1] > v[0])
        return Trend(
            series,
            unit,
            int(v.size),
            span,
            float(v[0]) if v.size else None,
            float(v[-1]) if v.size else None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            "restarts" if grew else ("flat" if v.size else "too short"),
        )
    skip = math.floor(x.size * SETTLE_FRACTION)
    x, v = x[skip:], v[skip:]
    if x.size < MIN_POINTS or span < MIN_SPAN_S or x[-1] == x[0]:
        return Trend(
            series,
            unit,
            int(x.size),
            span,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            None,
            "too short",
            too_short_note(span, int(x.size)),
        )
    xt, vt = _thin(x, v)
    slope, _, lo, hi = theil_sen(xt, vt)
    half = xt.size // 2
    late, _, late_lo, late_hi = (
        theil_sen(xt[half:], vt[half:]) if xt.size - half >= 3 else (slope, 0.0, lo, hi)
    )
    tenth = max(1, x.size // 10)
    start, end = float(np.median(v[:tenth])), float(np.median(v[-tenth:]))
    fit_span = float(x[-1] - x[0])
    level = abs(start) if start else abs(float(np.median(v))) or 1.0
    growth = slope * fit_span / level
    # The most the later half's interval lets the series grow over that half: "flat" must
    # rule a leak out, not merely fail to prove one.
    late_span = float(xt[-1] - xt[half]) if xt.size - half >= 3 else fit_span
    allowed = late_hi * late_span / level
    note = None
    if lo > 0 and growth > TOLERANCE and late_lo > 0:
        verdict = "leak"
    elif hi < 0 and growth < -TOLERANCE and late_hi < 0:
        verdict = "shrinking"
    elif allowed > TOLERANCE:
        verdict = "inconclusive"
        note = (
            f"its later half's 95 % interval allows growth of {allowed:.0%} over that half, "
            f"more than the {TOLERANCE:.0%} that rules a leak out: a longer run would tell"
        )
    else:
        verdict = "flat"
    h = 3600.0
    return Trend(
        series,
        unit,
        int(x.size),
        span,
        round(start, 4),
        round(end, 4),
        slope * h,
        lo * h,
        hi * h,
        round(growth * 100.0, 3),
        late * h,
        late_lo * h,
        late_hi * h,
        verdict,
        note,
    )


def too_short_note(span_s: float, points: int) -> str:
    """Why a series gets no verdict: what it had against what a verdict needs."""
    return (
        f"too short to judge: {span_s:.0f} s and {points} points; a verdict needs at least "
        f"{MIN_SPAN_S:.0f} s and {MIN_POINTS} points"
    )


def _jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            obj = json.loads(line)
        except ValueError:
            continue  # a killed run's half line
        if isinstance(obj, dict):
            out.append(obj)
    return out


def _cell(v: float | None) -> float:
    """A windows.csv cell that is set in every row (TypeError when empty, as ``float(None)``)."""
    if v is None:
        raise TypeError("an empty windows.csv cell where a number is needed")
    return float(v)


def collect_series(
    directory: Path, windows: Sequence[Mapping[str, float | None]]
) -> dict[str, tuple[str, list[float], list[float], bool]]:
    """Every series of a results directory: name -> (unit, t, values, is a counter)."""
    out: dict[str, tuple[str, list[float], list[float], bool]] = {}
    gen = [
        (_cell(r["window_start"]), _cell(r["gen_rss_mb"]))
        for r in windows
        if r.get("gen_rss_mb") is not None
    ]
    if gen:
        out["gen_rss_mb"] = ("MiB", [a for a, _ in gen], [b for _, b in gen], False)
    res = _jsonl(Layout(directory).server_resources)
    for key, name, unit, scale, counter in (
        ("rss_bytes", "server_rss_mb", "MiB", 2.0**-20, False),
        ("open_files", "server_open_files", "files", 1.0, False),
        ("threads", "server_threads", "threads", 1.0, False),
        ("worker_restarts", "server_worker_restarts", "restarts", 1.0, True),
    ):
        pts = [
            (float(r["t"]), float(r[key]) * scale)
            for r in res
            if isinstance(r.get(key), (int, float)) and isinstance(r.get("t"), (int, float))
        ]
        if pts:
            out[name] = (unit, [a for a, _ in pts], [b for _, b in pts], counter)
    return out


def analyse(
    directory: Path, windows: Sequence[Mapping[str, float | None]]
) -> dict[str, dict[str, object]]:
    """``summary.json``'s ``drift``: a :class:`Trend` per series, by name."""
    return {
        name: judge(name, unit, t, y, counter=counter).as_dict()
        for name, (unit, t, y, counter) in collect_series(directory, windows).items()
    }
