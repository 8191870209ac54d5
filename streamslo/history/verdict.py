"""The regression verdict: each run of a series against the runs that passed before it.

Pure: runs in, judgements out, nothing read or written. For each run, oldest first:

1. **Baseline**: the last K runs before it (``[regression] baseline``, 7) that *passed*: valid,
   every threshold held, and not themselves judged a regression. A regression never becomes
   the baseline it is judged against the next night; a run whose thresholds failed is not a
   standard either. With fewer than ``min_baseline`` (3) such runs: no verdict yet.
2. **The change** of each judged metric: the run's value minus the baseline (the mean of the
   baseline runs' values), and its interval at ``confidence`` (95 %), from the resamples kept
   for each run (whole streams drawn, as the report draws them), with the nights drawn too:

   - the baseline's figure in one draw: K baseline runs drawn with replacement, each giving one
     of its stream-resamples, averaged: noise within a run and between the runs;
   - the run's figure in that draw: one of its own stream-resamples, moved by a night's own
     deviation, drawn from a Student t with K − 1 degrees of freedom scaled by the spread of
     the baseline runs' values: a night differs from the next by more than its streams' noise
     (another machine, another hour), and a handful of nights shows little of how far one can
     stray (the prediction interval of a new observation).

   The interval is the percentiles of (run − baseline) over the draws.
3. **The verdict** of a metric: ``regressed`` when the change is for the worse, its interval
   excludes no change (beyond noise) *and* it is larger than the metric's margin (beyond a
   practical margin; ``[regression.margins]``); ``improved`` for the mirror case; ``within
   noise`` when the interval holds 0; ``within margin`` when it is real but smaller than the
   margin. A run is a regression when any judged metric regressed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from streamslo.history.measure import Measured
from streamslo.history.store import HistoryRun
from streamslo.slo.regression import HISTORY_METRICS, RegressionSettings

__all__ = [
    "Change",
    "MetricVerdict",
    "RunJudgement",
    "RunVerdict",
    "change_interval",
    "judge_series",
    "point_interval",
]

MetricVerdict = Literal[
    "regressed", "improved", "within noise", "within margin", "no change", "no data", "not judged"
]
RunVerdict = Literal["regressed", "ok", "no baseline"]

#: Draws of the change's bootstrap at most (the stored resamples bound it below).
MAX_DRAWS = 2000


@dataclass(frozen=True)
class Change:
    """One metric of one run: its value and interval, and its change against the baseline."""

    metric: str
    value: float | None
    low: float | None
    """The run's own interval (its stream-resamples)."""
    high: float | None
    baseline: float | None = None
    """The baseline's value (mean of its runs); None without a baseline."""
    delta: float | None = None
    delta_low: float | None = None
    delta_high: float | None = None
    margin: float | None = None
    """The margin, in the metric's unit, for this baseline."""
    verdict: MetricVerdict = "not judged"

    @property
    def relative(self) -> float | None:
        """The change as a share of the baseline (None at a baseline of 0)."""
        if self.delta is None or not self.baseline:
            return None
        return self.delta / abs(self.baseline)


@dataclass(frozen=True)
class RunJudgement:
    """One run of the series, judged."""

    run: HistoryRun
    verdict: RunVerdict
    changes: Mapping[str, Change]
    baseline_ids: tuple[int, ...] = ()
    """The store ids of the runs it was judged against."""
    regressed: tuple[str, ...] = field(default=())
    """The judged metrics that regressed."""

    @property
    def sets_the_standard(self) -> bool:
        """Whether later runs may take it into their baseline: it passed (valid, every
        threshold held) and is no regression."""
        return self.run.passed is True and self.verdict != "regressed"


def _rng(seed: int, run_id: int, metric: str) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([seed, run_id, *(ord(c) for c in metric)]))


def point_interval(m: Measured, confidence: float) -> tuple[float | None, float | None]:
    """A run's own percentile-bootstrap interval of one metric (None when the resamples had
    too little data)."""
    finite = m.resamples[np.isfinite(m.resamples)]
    if m.value is None or finite.size < max(20, m.resamples.size // 2):
        return None, None
    alpha = (1.0 - confidence) / 2.0
    low, high = np.percentile(finite, [100 * alpha, 100 * (1 - alpha)])
    return float(low), float(high)


def change_interval(
    new: Measured, baseline: Sequence[Measured], confidence: float, rng: np.random.Generator
) -> tuple[float, float, float | None, float | None] | None:
    """The change of one metric against a baseline, and its interval (see the module).

    Args:
        new: the run's figure and resamples.
        baseline: the baseline runs' figures (those without a value are left out).
        confidence: the interval's level.
        rng: the seeded generator.

    Returns:
        (baseline value, change, interval low, interval high), the interval None when too few
        draws had data; None when the run or every baseline run has no value.
    """
    base = [m for m in baseline if m.value is not None and m.resamples.size]
    if new.value is None or not base or not new.resamples.size:
        return None
    values = np.array([m.value for m in base], dtype=float)
    level = float(values.mean())
    delta = float(new.value) - level
    k = len(base)
    width = min(MAX_DRAWS, max(new.resamples.size, *(m.resamples.size for m in base)))
    # K baseline runs drawn with replacement, each giving one of its own resamples
    sizes = np.array([m.resamples.size for m in base])
    table = np.full((k, int(sizes.max())), np.nan)
    for i, m in enumerate(base):
        table[i, : m.resamples.size] = m.resamples
    runs = rng.integers(0, k, size=(width, k))
    cols = (rng.random((width, k)) * sizes[runs]).astype(np.int64)
    cells = table[runs, cols]
    ok = np.isfinite(cells)
    counts = ok.sum(axis=1)
    sums = np.where(ok, cells, 0.0).sum(axis=1)
    base_draw = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    # a night's own deviation: the baseline nights' spread, with a Student t's tails (a
    # handful of nights shows little of how far a night can stray: the prediction interval)
    spread = float(values.std(ddof=1)) if k > 1 else 0.0
    night = spread * rng.standard_t(max(k - 1, 1), size=width)
    new_draw = new.resamples[rng.integers(0, new.resamples.size, size=width)]
    diff = new_draw + night - base_draw
    diff = diff[np.isfinite(diff)]
    if diff.size < max(20, width // 2):
        return level, delta, None, None
    alpha = (1.0 - confidence) / 2.0
    low, high = np.percentile(diff, [100 * alpha, 100 * (1 - alpha)])
    return level, delta, float(low), float(high)


def _judge_metric(
    metric: str,
    new: Measured,
    baseline: Sequence[Measured],
    settings: RegressionSettings,
    rng: np.random.Generator,
) -> Change:
    low, high = point_interval(new, settings.confidence)
    got = change_interval(new, baseline, settings.confidence, rng)
    if got is None:
        return Change(metric, new.value, low, high, verdict="no data")
    level, delta, dlow, dhigh = got
    margin = settings.margin(metric).amount(level)
    spec = HISTORY_METRICS[metric]
    verdict: MetricVerdict
    if delta == 0:
        verdict = "no change"
    elif dlow is None or dhigh is None:
        verdict = "no data"
    elif dlow <= 0 <= dhigh:
        verdict = "within noise"
    elif abs(delta) <= margin:
        verdict = "within margin"
    else:
        worse = (delta > 0) != spec.higher_is_better
        verdict = "regressed" if worse else "improved"
    return Change(metric, new.value, low, high, level, delta, dlow, dhigh, margin, verdict)


def judge_series(
    runs: Sequence[HistoryRun],
    settings: RegressionSettings,
    metrics: Sequence[str] | None = None,
    seed: int = 0,
) -> list[RunJudgement]:
    """Judge every run of one series against the runs that passed before it.

    Args:
        runs: the series, oldest first (every run the store has of it, or enough of the
            latest that each judged run finds its baseline).
        settings: baseline size, minimum, confidence, margins, and the metrics judged.
        metrics: the metrics to judge (default: ``settings.metrics``).
        seed: the seed of the change's bootstrap.

    Returns:
        One judgement per run, in the same order.
    """
    judged = tuple(metrics) if metrics is not None else settings.metrics
    out: list[RunJudgement] = []
    standard: list[RunJudgement] = []  # runs that passed, oldest first
    for run in runs:
        base = standard[-settings.baseline :]
        changes: dict[str, Change] = {}
        if len(base) < settings.min_baseline:
            for mid in judged:
                m = run.figures.get(mid)
                if m is not None:
                    low, high = point_interval(m, settings.confidence)
                    changes[mid] = Change(mid, m.value, low, high)
                else:
                    changes[mid] = Change(mid, None, None, None, verdict="no data")
            j = RunJudgement(run, "no baseline", changes)
        else:
            for mid in judged:
                m = run.figures.get(mid)
                if m is None:
                    changes[mid] = Change(mid, None, None, None, verdict="no data")
                    continue
                prior = [b.run.figures[mid] for b in base if mid in b.run.figures]
                changes[mid] = _judge_metric(mid, m, prior, settings, _rng(seed, run.id, mid))
            regressed = tuple(k for k, c in changes.items() if c.verdict == "regressed")
            j = RunJudgement(
                run,
                "regressed" if regressed else "ok",
                changes,
                tuple(b.run.id for b in base),
                regressed,
            )
        out.append(j)
        if j.sets_the_standard:
            standard.append(j)
    return out
