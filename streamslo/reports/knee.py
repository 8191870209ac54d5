"""Load against latency: one :class:`LoadPoint` per load level, the knee, and the charts.

A *level* is a request rate (``streamslo sweep``: one run per rate) or a concurrency (a staged
run: the streams that started while a stage held N users; ``streamslo compare`` ramps that
way). Every figure of a point comes from :mod:`streamslo.figures.metrics` over that level's streams, so
it matches what ``verify`` and ``summary.json`` would say of the same streams.

The knee (:func:`find_knee`) is the last level before the service turns, found by the first of
these rules a level breaks, in this order: the SLO fails (``slo``); (rates) the asked rate was
not kept up (``keep_up``: fewer sent than :func:`keep_up_floor` allows, the open-loop generator
fell behind, e.g. ``--max-concurrency`` reached); TTFT p99 or ITL p99 more than doubles over the
lowest level's and grows by more than :data:`LATENCY_FLOOR_MS` (``ttft_p99``, ``itl_p99``); the
truncation rate rises by more than one point over it (``truncation``). Only the first rule is
the SLO: a latency knee is a change of slope, and a level past it may still meet the SLO, so
the knee is always named by its rule (:data:`RULES`) and the SLO's verdict per level is said
apart (:func:`slo_levels`). Nothing here prints.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from streamslo.figures.metrics import (
    GoodputBounds,
    LatencyStats,
    counted_mask,
    gauge_value,
    rate_value,
    run_duration_s,
    trend_samples,
)
from streamslo.results.layout import RunData

if TYPE_CHECKING:
    from streamslo.slo.thresholds import SLO

__all__ = [
    "KEEP_UP",
    "RULES",
    "Knee",
    "LoadPoint",
    "SloLevels",
    "find_knee",
    "finite",
    "first_user_s",
    "keep_up_floor",
    "level_points",
    "load_point",
    "sent_rate",
    "slo_levels",
    "stage_levels",
]

#: Achieved over asked rate below this: the server no longer keeps up.
KEEP_UP = 0.9
#: A latency p99 more than this many times the lowest level's: the knee is passed.
LATENCY_FACTOR = 2.0
#: ... and more than this many ms above it (a doubling of a few ms is not a turn).
LATENCY_FLOOR_MS = 50.0
#: A truncation rate more than this above the lowest level's: the knee is passed.
TRUNCATION_RISE = 0.01


@dataclass(frozen=True)
class LoadPoint:
    """The figures of one load level."""

    x: float
    """The level: requests per second asked, or concurrent streams."""
    label: str
    """How the level is named in tables (``2 req/s``, ``16 users``, ``synchronous``)."""
    requests: int
    duration_s: float | None
    achieved_rate: float | None
    """Requests per second that were sent: the streams started, over the span of their
    starts (start-up and drain do not dilute it, so a short run is judged fairly)."""
    tokens_per_s: float | None
    ttft_ms: LatencyStats
    itl_ms: LatencyStats
    tpot_ms: LatencyStats
    e2e_ms: LatencyStats
    truncation_rate: float | None
    error_rate: float | None
    goodput_per_s: float | None = None
    goodput_fraction: float | None = None
    passed: bool | None = None
    """Every SLO threshold held at this level (None: not checked)."""
    valid: bool = True
    failed: tuple[str, ...] = ()
    """The thresholds that failed (``metric expression``)."""
    asked: bool = False
    """``x`` is an asked request rate (achieved can fall short of it)."""

    def as_dict(self) -> dict[str, object]:
        """Plain data for ``sweep.json`` and ``report.json``."""
        out: dict[str, Any] = {
            k: getattr(self, k)
            for k in (
                "x",
                "label",
                "requests",
                "duration_s",
                "achieved_rate",
                "tokens_per_s",
                "truncation_rate",
                "error_rate",
                "goodput_per_s",
                "goodput_fraction",
                "passed",
                "valid",
            )
        }
        for name in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
            out[name] = getattr(self, name).as_dict()
        out["failed"] = list(self.failed)
        return out


def _ratio(counts: tuple[int, int]) -> float | None:
    return None if counts[1] == 0 else counts[0] / counts[1]


def load_point(
    data: RunData,
    x: float,
    label: str,
    *,
    duration_s: float | None = None,
    slo: SLO | None = None,
    asked: bool = False,
) -> LoadPoint:
    """The figures of ``data`` (a whole run, or one level's streams of it).

    Args:
        data: the streams and gaps of the level.
        x: the level.
        label: its name in tables.
        duration_s: the level's length (default: the run's).
        slo: an SLO (:mod:`streamslo.slo.thresholds`) to check the level against, or None.
        asked: ``x`` is an asked request rate.
    """
    from streamslo.slo import thresholds

    if duration_s is not None:
        data = RunData(
            path=data.path,
            run={**data.run, "start_epoch": 0.0, "end_epoch": duration_s},
            streams=data.streams,
            gaps=data.gaps,
        )
    goodput = GoodputBounds.from_run(data.run).any
    passed: bool | None = None
    failed: tuple[str, ...] = ()
    if slo is not None:
        checks = thresholds.evaluate(slo, data)
        passed = all(c.passed for c in checks)
        failed = tuple(
            f"{c.threshold.metric} {c.threshold.expression}" for c in checks if not c.passed
        )
    achieved = sent_rate(data.streams["started_at"].to_numpy(dtype=float))
    return LoadPoint(
        x=float(x),
        label=label,
        requests=int(counted_mask(data.streams).sum()),
        duration_s=duration_s if duration_s is not None else _duration(data),
        achieved_rate=achieved,
        tokens_per_s=gauge_value(data, "tokens_per_s"),
        ttft_ms=LatencyStats.of(trend_samples(data, "ttft_ms")),
        itl_ms=LatencyStats.of(trend_samples(data, "itl_ms")),
        tpot_ms=LatencyStats.of(trend_samples(data, "tpot_ms")),
        e2e_ms=LatencyStats.of(trend_samples(data, "e2e_ms")),
        truncation_rate=_ratio(rate_value(data, "truncation_rate")),
        error_rate=_ratio(rate_value(data, "error_rate")),
        goodput_per_s=gauge_value(data, "goodput_per_s") if goodput else None,
        goodput_fraction=_ratio(rate_value(data, "goodput_fraction")) if goodput else None,
        passed=passed,
        valid=data.valid,
        failed=failed,
        asked=asked,
    )


def sent_rate(started_at: np.ndarray) -> float | None:
    """Requests per second sent: ``n - 1`` gaps over the span from the first start to the
    last (None with fewer than two starts, or all at once)."""
    t = np.sort(started_at[np.isfinite(started_at)])
    if len(t) < 2 or t[-1] <= t[0]:
        return None
    return float((len(t) - 1) / (t[-1] - t[0]))


def _duration(data: RunData) -> float | None:
    return run_duration_s(data)


# --------------------------------------------------------------------------- staged runs
def stage_levels(stages: str) -> list[tuple[int, float, float]]:
    """The levels of a staged run: (users, start s, end s) of each stage that *holds* a user
    count (k6's ``target`` reached and kept), from its ``--stages`` text ("" or bad: none)."""
    from streamslo.errors import BadInputError
    from streamslo.options.stages import parse_stages

    if not stages:
        return []
    try:
        parsed = parse_stages(stages)
    except BadInputError:
        return []
    out: list[tuple[int, float, float]] = []
    t, prev = 0.0, 0
    for st in parsed:
        if st.target == prev and st.duration > 0 and st.target > 0:
            out.append((st.target, t, t + st.duration))
        t += st.duration
        prev = st.target
    return out


def first_user_s(stages: str) -> float:
    """When a staged run's first user starts, in seconds of its stages: the first whole second
    (the load shape is asked once a second) at which the first stage's linear ramp from 0
    rounds to at least one user."""
    from streamslo.options.stages import parse_stages

    first = parse_stages(stages)[0]
    if first.target < 1 or first.duration <= 0:
        return 0.0
    k = 0
    while k < first.duration and round(first.target * k / first.duration) < 1:
        k += 1
    return float(min(k, first.duration))


def level_points(
    data: RunData, stages: str, slo: SLO | None = None, settle_s: float = 0.0
) -> list[LoadPoint]:
    """One point per held stage of a staged run: the streams that started while it held (when
    none did, because a slow server's streams outlasted the stage, those in flight through it).

    The stages' clock is set by the run's first stream, which started when the first stage
    reached one user (:func:`first_user_s`); Locust's start-up is not part of any stage. A run
    without streams has no points.

    Args:
        data: the whole run.
        stages: the run's ``--stages`` text.
        slo: checked at each level, or None.
        settle_s: streams that started within this long of a stage's start are left out (the
            ramp's transient).
    """
    s, g = data.streams, data.gaps
    levels = stage_levels(stages)
    if not levels or s.empty:
        return []
    started = s["started_at"].to_numpy(dtype=float)
    since = started - np.nanmin(started) + first_user_s(stages)
    until = since + s["e2e_ms"].fillna(0).to_numpy(dtype=float) / 1000.0
    points = []
    for users, lo, hi in levels:
        mask = (since >= lo + settle_s) & (since < hi)
        if not mask.any():
            # No stream started while it held (a slow server's streams outlasted the level):
            # the streams in flight through it are its figures, rather than no point at all.
            mask = (since < hi) & (until > lo + settle_s)
        sub = s[mask]
        gaps = g[g["stream_id"].isin(sub["stream_id"])]
        part = RunData(path=data.path, run=data.run, streams=sub, gaps=gaps)
        points.append(
            load_point(
                part,
                users,
                f"{users} user{'s' if users != 1 else ''}",
                duration_s=hi - lo - settle_s,
                slo=slo,
            )
        )
    return points


# ----------------------------------------------------------------------------- the knee
#: Each knee rule, in words (a chart's legend, the levels' lines).
RULES = {
    "slo": "the SLO failed",
    "keep_up": "the asked rate was not kept up",
    "ttft_p99": (
        f"TTFT p99 over {LATENCY_FACTOR:g}x the lowest level's and {LATENCY_FLOOR_MS:g} ms above it"
    ),
    "itl_p99": (
        f"ITL p99 over {LATENCY_FACTOR:g}x the lowest level's and {LATENCY_FLOOR_MS:g} ms above it"
    ),
    "truncation": (
        f"truncation rate more than {TRUNCATION_RISE * 100:g} point above the lowest level's"
    ),
}


@dataclass(frozen=True)
class Knee:
    """Where a series turns, and by which rule."""

    x: float | None
    """The last level before the turn (None: it had turned at the lowest level already)."""
    label: str | None
    broke_at: str | None
    """The first level past the knee (None: the series never turned)."""
    reason: str
    """Why that level is past it, with its figures (or that no level turned)."""
    rule: str | None = None
    """The rule that found it (a key of :data:`RULES`); None when no level turned."""

    def as_dict(self) -> dict[str, object]:
        return {
            "x": self.x,
            "label": self.label,
            "broke_at": self.broke_at,
            "reason": self.reason,
            "rule": self.rule,
        }


def _worse(p: float | None, base: float | None) -> bool:
    return (
        p is not None
        and base is not None
        and base > 0
        and p > LATENCY_FACTOR * base
        and p > base + LATENCY_FLOOR_MS
    )


def _turned(p: LoadPoint, base: LoadPoint) -> tuple[str, str] | None:
    """(rule, reason with the level's figures) of the first rule ``p`` breaks, or None."""
    if p.passed is False:
        return "slo", "the SLO failed (" + ", ".join(p.failed) + ")"
    if p.asked and p.achieved_rate is not None and p.achieved_rate < keep_up_floor(p.x, p.requests):
        return "keep_up", f"only {p.achieved_rate:.2f} of {p.x:g} req/s asked were sent"
    if _worse(p.ttft_ms.p99, base.ttft_ms.p99):
        return "ttft_p99", (
            f"TTFT p99 {p.ttft_ms.p99:.0f} ms, over {LATENCY_FACTOR:g}x the lowest level's "
            f"{base.ttft_ms.p99:.0f} ms"
        )
    if _worse(p.itl_ms.p99, base.itl_ms.p99):
        return "itl_p99", (
            f"ITL p99 {p.itl_ms.p99:.0f} ms, over {LATENCY_FACTOR:g}x the lowest level's "
            f"{base.itl_ms.p99:.0f} ms"
        )
    if (
        p.truncation_rate is not None
        and p.truncation_rate > (base.truncation_rate or 0.0) + TRUNCATION_RISE
    ):
        return "truncation", f"truncation rate {p.truncation_rate:.1%}"
    return None


def keep_up_floor(asked: float, n: int) -> float:
    """The lowest sent rate that still counts as keeping up with ``asked``: :data:`KEEP_UP` of
    it, lower for few requests (Poisson arrivals: three standard errors, ``3/sqrt(n)``)."""
    slack = max(1.0 - KEEP_UP, 3.0 / math.sqrt(max(n, 1)))
    return asked * max(0.0, 1.0 - slack)


def find_knee(points: Sequence[LoadPoint]) -> Knee:
    """The knee of a rising series (sorted by ``x`` here)."""
    pts = sorted((p for p in points if p.requests > 0), key=lambda p: p.x)
    if not pts:
        return Knee(None, None, None, "no level had requests")
    base = pts[0]
    if base.passed is False:
        return Knee(
            None,
            None,
            base.label,
            "the lowest level already failed the SLO (" + ", ".join(base.failed) + ")",
            "slo",
        )
    for prev, p in itertools.pairwise(pts):
        turned = _turned(p, base)
        if turned is not None:
            return Knee(prev.x, prev.label, p.label, turned[1], turned[0])
    top = pts[-1]
    return Knee(top.x, top.label, None, "no level turned, up to the highest")


@dataclass(frozen=True)
class SloLevels:
    """The SLO's verdict at each level of a series, in words a person can check."""

    met: tuple[str, ...]
    """The levels where every threshold held."""
    failed: tuple[tuple[str, tuple[str, ...]], ...]
    """The levels where one failed, each with the thresholds that did."""

    @property
    def checked(self) -> bool:
        return bool(self.met or self.failed)

    def sentence(self) -> str:
        """``the SLO was met at 1, 2 and 5 users and failed at 10 users (itl_ms p(99)<200)``."""
        if not self.checked:
            return "the SLO was not checked per level"
        if not self.failed:
            return f"the SLO was met at every level ({_words(self.met)})"
        # Levels that failed the same thresholds together: "2 and 4 users (itl_ms p(99)<200)".
        groups: dict[tuple[str, ...], list[str]] = {}
        for lab, why in self.failed:
            groups.setdefault(why, []).append(lab)
        fails = "; ".join(f"{_words(labs)} ({', '.join(why)})" for why, labs in groups.items())
        if not self.met:
            return f"the SLO failed at every level: {fails}"
        return f"the SLO was met at {_words(self.met)} and failed at {fails}"


def _words(labels: Sequence[str]) -> str:
    """``1, 2 and 5 users`` from labels that share a unit (``1 user``, ``2 users``, ``5
    users``; ``2 req/s``...), else the labels themselves, joined."""
    parts = [lab.split(" ", 1) for lab in labels]
    units = {p[1].rstrip("s") for p in parts if len(p) == 2}
    if len(labels) > 1 and len(units) == 1 and all(len(p) == 2 for p in parts):
        nums = [p[0] for p in parts]
        unit = parts[-1][1] if parts[-1][1].endswith("s") else units.pop() + "s"
        return ", ".join(nums[:-1]) + " and " + nums[-1] + f" {unit}"
    return labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]


def slo_levels(points: Sequence[LoadPoint]) -> SloLevels:
    """Where the SLO held and where it failed, level by level (sorted by ``x``)."""
    pts = sorted((p for p in points if p.requests > 0), key=lambda p: p.x)
    return SloLevels(
        tuple(p.label for p in pts if p.passed is True),
        tuple((p.label, p.failed) for p in pts if p.passed is False),
    )


def finite(values: Sequence[float | None]) -> np.ndarray:
    """Values as floats, None as NaN (for the charts)."""
    return np.array([np.nan if v is None else float(v) for v in values], dtype=float)
