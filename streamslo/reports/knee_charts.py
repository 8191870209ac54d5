"""Charts of latency and failures against load (a rate sweep, or a staged run's concurrency
levels), one line per series, the knee and the SLO bounds marked.

Log-scale axes get ticks that cannot collide: as many 1-2-5, 1-3 or decade labels as fit at the
axis's size (:class:`streamslo.reports.charts.FitLogLocator`); the load axis is ticked at the levels themselves,
thinned so that neighbouring labels keep their distance. Built as
:mod:`streamslo.reports.charts` builds its charts (Agg, no pyplot).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.axis import Axis
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from streamslo.reports.charts import Chart, plain_log, png_base64
from streamslo.reports.knee import Knee, LoadPoint, finite

if TYPE_CHECKING:
    from streamslo.slo.thresholds import SLO

__all__ = [
    "SERIES_COLORS",
    "knee_chart",
    "knee_figure",
    "knee_label",
    "level_ticks",
    "log_ticks",
    "slo_bounds",
]

#: Line colour by series name (others cycle through the rest).
SERIES_COLORS = {
    "naive": "#c0392b",
    "before": "#c0392b",
    "fixed": "#1f77b4",
    "after": "#1f77b4",
    "sweep": "#1f77b4",
    "run": "#1f77b4",
}
_CYCLE = ("#2e7d32", "#8e44ad", "#e67e22", "#16a085")


def log_ticks(axis: Axis, lo: float, hi: float) -> None:
    """Label a log axis from ``lo`` to ``hi`` without crowding: as many 1-2-5, 1-3 or decade
    labels as fit at the axis's size (:class:`streamslo.reports.charts.FitLogLocator`)."""
    plain_log(axis)


def level_ticks(levels: Sequence[float], log: bool, min_gap: float) -> list[float]:
    """The levels to label, each at least ``min_gap`` from the previous one (in log10 units
    on a log axis, in axis units otherwise); the highest level is always labelled."""
    xs = sorted(set(levels))
    if not xs:
        return []
    pos = [math.log10(x) if log else x for x in xs]
    keep = [0]
    for i in range(1, len(xs)):
        if pos[i] - pos[keep[-1]] >= min_gap:
            keep.append(i)
    if keep[-1] != len(xs) - 1:
        if len(keep) > 1 and pos[-1] - pos[keep[-1]] < min_gap:
            keep.pop()
        keep.append(len(xs) - 1)
    return [xs[i] for i in keep]


#: A panel's plot width in pixels (3.6 in at 100 dpi, less the y labels), and a tick digit's.
_PANEL_PX = 250.0
_CHAR_PX = 7.0


def _min_gap(levels: Sequence[float], log: bool) -> float:
    """The distance (axis units; log10 units on a log axis) two labelled levels keep: the
    widest label and a margin, as a share of the axis's span."""
    lo, hi = levels[0], levels[-1]
    span = (math.log10(hi / lo) if lo > 0 else 1.0) if log else hi - lo
    if span <= 0:
        return 1.0
    widest = max(len(f"{v:g}") for v in levels)
    return span * (widest * _CHAR_PX + 12.0) / _PANEL_PX


def _color(name: str, i: int) -> str:
    return SERIES_COLORS.get(name, _CYCLE[i % len(_CYCLE)])


def _panel_latency(
    ax: object, series: Mapping[str, Sequence[LoadPoint]], metric: str, bound: float | None
) -> None:
    values: list[float] = []
    for i, (name, pts) in enumerate(series.items()):
        xs = [p.x for p in pts]
        ys = finite([getattr(p, metric).p99 for p in pts])
        ax.plot(xs, ys, marker="o", color=_color(name, i), label=name)  # type: ignore[attr-defined]
        values += [v for v in ys if np.isfinite(v) and v > 0]
    if bound:
        ax.axhline(bound, color="#555", ls="--", lw=1, label="SLO bound")  # type: ignore[attr-defined]
        values.append(bound)
    if values:
        lo, hi = min(values) / 1.3, max(values) * 1.3
        ax.set_yscale("log")  # type: ignore[attr-defined]
        ax.set_ylim(lo, hi)  # type: ignore[attr-defined]
        log_ticks(ax.yaxis, lo, hi)  # type: ignore[attr-defined]
    ax.set_ylabel(f"{metric.removesuffix('_ms').upper()} p99 (ms, log)")  # type: ignore[attr-defined]


def knee_chart(
    series: Mapping[str, Sequence[LoadPoint]], *, key: str, title: str, **options: Any
) -> Chart | None:
    """:func:`knee_figure` as a report chart (None without points); ``key`` names it, ``title``
    and ``options`` go to :func:`knee_figure`."""
    fig = knee_figure(series, title=title, **options)
    if fig is None:
        return None
    caption = (
        "Each point: the streams of one load level. Dashed: the SLO's bound. Dotted: each "
        "series' knee, the last level before one of the knee rules turned, the rule named in "
        "the legend; a latency knee is a change of slope, not the SLO (whether each level met "
        "the SLO is in the table)."
    )
    return Chart(key, title, caption, png_base64(fig), wide=True)


def knee_figure(
    series: Mapping[str, Sequence[LoadPoint]],
    *,
    title: str,
    xlabel: str,
    knees: Mapping[str, Knee] | None = None,
    bounds: Mapping[str, float] | None = None,
    log_x: bool = False,
    throughput: bool = False,
) -> Figure | None:
    """Truncation rate, ITL p99 and TTFT p99 against load (and, with ``throughput``, achieved
    requests/s and goodput/s), one line per series.

    Args:
        series: series name (``naive``, ``fixed``, ``sweep``) -> its points.
        title: shown above the panels.
        xlabel: the load axis's name.
        knees: series name -> its knee, marked with a dotted line.
        bounds: ``itl_ms`` / ``ttft_ms`` / ``truncation_rate`` -> the SLO's bound.
        log_x: a log load axis (concurrency doubling from stage to stage).
        throughput: add the throughput panel (rate sweeps).
    """
    series = {k: sorted(v, key=lambda p: p.x) for k, v in series.items() if v}
    if not series:
        return None
    bounds = bounds or {}
    n = 4 if throughput else 3
    fig = Figure(figsize=(3.6 * n, 3.5))
    axes = fig.subplots(1, n)
    trunc, itl, ttft = axes[0], axes[1], axes[2]
    for i, (name, pts) in enumerate(series.items()):
        xs = [p.x for p in pts]
        trunc.plot(
            xs,
            finite([None if p.truncation_rate is None else 100 * p.truncation_rate for p in pts]),
            marker="o",
            color=_color(name, i),
            label=name,
        )
    if "truncation_rate" in bounds:
        trunc.axhline(
            100 * bounds["truncation_rate"], color="#555", ls="--", lw=1, label="SLO bound"
        )
    trunc.set_ylabel("truncation rate (%)")
    highest = [100 * (p.truncation_rate or 0.0) for pts in series.values() for p in pts]
    # At least 0-5 %: a flat zero line must not get an axis of its own rounding noise.
    trunc.set_ylim(-2, max(5.0, *highest, 100 * bounds.get("truncation_rate", 0.0)) * 1.08)
    _panel_latency(itl, series, "itl_ms", bounds.get("itl_ms"))
    _panel_latency(ttft, series, "ttft_ms", bounds.get("ttft_ms"))
    if throughput:
        tp = axes[3]
        for i, (name, pts) in enumerate(series.items()):
            xs = [p.x for p in pts]
            tp.plot(
                xs,
                finite([p.achieved_rate for p in pts]),
                marker="o",
                color=_color(name, i),
                label=f"{name} sent/s",
            )
            if any(p.goodput_per_s is not None for p in pts):
                tp.plot(
                    xs,
                    finite([p.goodput_per_s for p in pts]),
                    marker="s",
                    ls="--",
                    color=_CYCLE[i % len(_CYCLE)],
                    label=f"{name} goodput/s",
                )
        tp.set_ylabel("requests / s")
    levels = sorted({p.x for pts in series.values() for p in pts})
    for ax in axes:
        if log_x:
            ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(
            FixedLocator(level_ticks(levels, log_x, _min_gap(levels, log_x)))
        )
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel(xlabel)
        ax.grid(True, which="major", alpha=0.3)
        for i, (name, knee) in enumerate((knees or {}).items()):
            if knee.x is not None and knee.broke_at is not None:
                ax.axvline(
                    knee.x, color=_color(name, i), ls=":", lw=1.2, label=knee_label(name, knee)
                )
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    # One legend for every panel, below them: inside a panel it hid the points it names.
    handles: dict[str, Any] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(lab, h)
    fig.legend(
        list(handles.values()),
        list(handles),
        loc="upper center",
        bbox_to_anchor=(0.5, 0.0),
        ncol=min(len(handles), 6),
        fontsize=8,
        frameon=False,
    )
    return fig


#: A knee rule in a legend's few words.
_RULE_SHORT = {
    "slo": "SLO failed",
    "keep_up": "rate not kept up",
    "ttft_p99": "TTFT p99 over 2x",
    "itl_p99": "ITL p99 over 2x",
    "truncation": "truncation +1 point",
}


def knee_label(name: str, knee: Knee) -> str:
    """A knee's legend entry: the series, the rule that found it, the level."""
    return f"{name} knee: {_RULE_SHORT.get(knee.rule or '', knee.rule)} after {knee.label}"


def slo_bounds(slo: SLO | None) -> dict[str, float]:
    """The bounds worth a guide line on these charts: a ``p(99)<x`` threshold on ``itl_ms`` or
    ``ttft_ms`` (the panels show p99) and a ``rate<x`` on ``truncation_rate``, whole-run only."""
    out: dict[str, float] = {}
    for th in getattr(slo, "thresholds", ()):
        if th.selector or th.op not in ("<", "<="):
            continue
        p99 = th.metric in ("itl_ms", "ttft_ms") and th.aggregation == "p" and th.percentile == 99
        if p99 or (th.metric == "truncation_rate" and th.aggregation == "rate"):
            out.setdefault(th.metric, th.value)
    return out
