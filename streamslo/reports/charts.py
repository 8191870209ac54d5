"""The report's charts, drawn with matplotlib's Agg renderer and returned as base64 PNG.

Figures are built with :class:`matplotlib.figure.Figure` and a
:class:`~matplotlib.backends.backend_agg.FigureCanvasAgg`, never through ``pyplot``: no global
figure registry, no GUI backend, nothing to close, safe in threads and under
``filterwarnings = error``.

Charts: ITL and TTFT CDFs (before vs after, log scale, SLO bound marked), the worst chunk
lateness per second, active streams and tokens/s over time, outcome counts (truncation causes),
the server's own evidence when present, and the server's own series that matter for streaming
(running and waiting requests, KV cache, preemptions, CPU, memory) over the run's time axis.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib import rcParams
from matplotlib.axis import Axis, XAxis
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.ticker import FuncFormatter, Locator, NullFormatter

from streamslo.figures.metrics import trend_samples
from streamslo.reports.load import LoadedRun
from streamslo.reports.model import Report
from streamslo.reports.server_series import panel_series
from streamslo.reports.timeline import activity_timeline, cdf_points, lateness_timeline

__all__ = [
    "COLORS",
    "Chart",
    "FitLogLocator",
    "make_charts",
    "plain_log",
    "png_base64",
    "tick_text",
]

#: Line colour per run label.
COLORS = {"before": "#c0392b", "after": "#1f77b4", "run": "#1f77b4"}


@dataclass(frozen=True)
class Chart:
    """One rendered chart."""

    key: str
    title: str
    caption: str
    png_base64: str
    wide: bool = False
    """Spans the page's width (two panels side by side)."""


def png_base64(fig: Figure) -> str:
    """The figure as a base64 PNG (for an inline data: image)."""
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


#: Tick sets a log axis may take, densest first: 1-2-5, 1-3, every decade, every second or
#: third decade.
_LOG_STEPS: tuple[tuple[tuple[float, ...], int], ...] = (
    ((1.0, 2.0, 5.0), 1),
    ((1.0, 3.0), 1),
    ((1.0,), 1),
    ((1.0,), 2),
    ((1.0,), 3),
)
#: Space kept between two tick labels, in pixels.
_LABEL_GAP_PX = 6.0


def tick_text(v: float) -> str:
    """A log tick's label: ``0.5``, ``20``, ``5000`` (never ``5e+03`` or ``10^3``)."""
    return f"{v:g}" if 1e-4 <= abs(v) < 1e6 else f"{v:.0e}"


class FitLogLocator(Locator):
    """Log-axis ticks whose labels cannot run together: the densest of 1-2-5, 1-3, decades,
    every second or third decade whose labels, at the axis's size when it is drawn, keep
    :data:`_LABEL_GAP_PX` apart (a label's size estimated from its characters and the tick
    font). ``500 1000 2000`` on a narrow axis therefore becomes ``100 1000``."""

    def __call__(self) -> Sequence[float]:
        lo, hi = self.axis.get_view_interval()  # type: ignore[union-attr]
        return self.tick_values(lo, hi)

    def tick_values(self, vmin: float, vmax: float) -> Sequence[float]:
        lo, hi = sorted((vmin, vmax))
        if hi <= 0:
            return []
        lo = max(lo, hi * 1e-12)
        length, size, horizontal = self._geometry()
        for subs, every in _LOG_STEPS:
            ticks = _log_ticks(lo, hi, subs, every)
            if len(ticks) >= 2 and _fits(ticks, lo, hi, length, size, horizontal):
                return ticks
        # A tiny axis: the decades, each kept only if its label clears the last one kept.
        kept: list[float] = []
        for t in _log_ticks(lo, hi, (1.0,), 1):
            if not kept or _fits([kept[-1], t], lo, hi, length, size, horizontal):
                kept.append(t)
        return kept

    def _geometry(self) -> tuple[float, float, bool]:
        """The axis's length in pixels, its tick font's size in pixels, and whether it runs
        horizontally."""
        axis = self.axis
        if not isinstance(axis, Axis) or axis.axes is None:
            return 1000.0, 10.0, True
        ax = axis.axes
        box = ax.get_window_extent()
        horizontal = isinstance(axis, XAxis)
        # From the tick label font's setting: asking the axis for its ticks would ask this
        # locator again.
        size = rcParams["xtick.labelsize" if horizontal else "ytick.labelsize"]
        points = FontProperties(size=size).get_size_in_points()
        px = float(points) * ax.figure.dpi / 72.0
        return (box.width if horizontal else box.height), px, horizontal


def _log_ticks(lo: float, hi: float, subs: tuple[float, ...], every: int) -> list[float]:
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    return [
        m * 10.0**k
        for k in range(first, last + 1)
        if k % every == 0
        for m in subs
        if lo <= m * 10.0**k <= hi * (1 + 1e-9)
    ]


def _fits(
    ticks: Sequence[float], lo: float, hi: float, length: float, size: float, horizontal: bool
) -> bool:
    """Whether the ticks' labels keep their distance on an axis ``length`` pixels long."""
    span = math.log10(hi / lo) if hi > lo else 1.0
    pos = [(math.log10(t / lo) / span) * length for t in ticks]
    extent = [(len(tick_text(t)) * 0.62 * size) if horizontal else (1.2 * size) for t in ticks]
    return all(
        pos[i + 1] - pos[i] >= (extent[i] + extent[i + 1]) / 2 + _LABEL_GAP_PX
        for i in range(len(ticks) - 1)
    )


def plain_log(axis: Axis) -> None:
    """A log axis labelled 10, 20, 50, 100 instead of 10^1, with as many labels as fit
    (:class:`FitLogLocator`); minor ticks unlabelled."""
    axis.set_major_locator(FitLogLocator())
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: tick_text(v)))
    axis.set_minor_formatter(NullFormatter())


def _name(run: LoadedRun) -> str:
    return run.label if run.name == run.label else f"{run.label} ({run.name})"


def _bound(report: Report, metric: str) -> float | None:
    """The numeric bound of a ``p(N)<x`` threshold on ``metric``, for a guide line."""
    for v in report.verdicts:
        if v.metric == metric and "<" in v.expression:
            try:
                return float(v.expression.split("<")[-1].lstrip("="))
            except ValueError:
                return None
    return None


def _cdf(runs: Sequence[LoadedRun], report: Report, metric: str, title: str) -> Chart | None:
    fig = Figure(figsize=(11.0, 2.6))
    ax, tail = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    drawn = False
    lo, hi = np.inf, 0.0
    for run in runs:
        x, f = cdf_points(trend_samples(run.data, metric))
        x_pos = x > 0
        if x_pos.sum() == 0:
            continue
        lo, hi = min(lo, float(x[x_pos].min())), max(hi, float(x[x_pos].max()))
        kw = {"where": "post", "color": COLORS[run.label], "label": _name(run)}
        ax.step(x[x_pos], f[x_pos], **kw)
        n = x.size
        surv = 1.0 - f + 1.0 / (2 * max(n, 1))  # keep the last sample visible on a log axis
        tail.step(x[x_pos], surv[x_pos], **kw)
        drawn = True
    if not drawn:
        return None
    bound = _bound(report, metric)
    for a in (ax, tail):
        if bound:
            a.axvline(bound, color="#555", ls="--", lw=1, label=f"SLO bound {bound:g} ms")
        a.set_xscale("log")
        plain_log(a.xaxis)
        a.set_xlabel(f"{metric} (ms, log scale)")
        a.grid(True, which="both", alpha=0.3)
    ax.axhline(0.99, color="#999", ls=":", lw=1)
    ax.set_ylabel("fraction of samples ≤ x")
    ax.set_ylim(0, 1.01)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(title)
    tail.axhline(0.01, color="#999", ls=":", lw=1)
    tail.set_yscale("log")
    plain_log(tail.yaxis)
    tail.set_ylabel("fraction of samples > x")
    tail.set_title("Tail (log scale)")
    caption = "Dotted lines: p99. Left: the whole distribution; right: its tail."
    return Chart(f"cdf_{metric}", title, caption, png_base64(fig), wide=True)


def _lateness(runs: Sequence[LoadedRun], report: Report) -> Chart | None:
    fig = Figure(figsize=(6.4, 3.4))
    ax = fig.add_subplot()
    drawn = False
    for run in runs:
        tl = lateness_timeline(run, 1.0)
        if tl.empty:
            continue
        ax.plot(
            tl["t"],
            tl["max_gap_ms"],
            drawstyle="steps-post",
            color=COLORS[run.label],
            label=_name(run),
            lw=1.2,
        )
        drawn = True
    if not drawn:
        return None
    bound = _bound(report, "itl_ms")
    if bound:
        ax.axhline(bound, color="#555", ls="--", lw=1, label=f"ITL bound {bound:g} ms")
    ax.set_yscale("log")
    plain_log(ax.yaxis)
    ax.set_xlabel("seconds since the run's start")
    ax.set_ylabel("worst gap in the second (ms)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    title = "Worst chunk lateness per second"
    ax.set_title(title)
    caption = "Largest inter-token gap that ended in each 1 s bucket (incident B's timeline)."
    return Chart("lateness", title, caption, png_base64(fig))


def _activity(runs: Sequence[LoadedRun]) -> Chart | None:
    fig = Figure(figsize=(6.4, 3.6))
    ax1, ax2 = fig.subplots(2, 1, sharex=True)
    drawn = False
    for run in runs:
        tl = activity_timeline(run, 1.0)
        if tl.empty or not (tl["tokens_per_s"] > 0).any():
            continue  # no token: two flat zero lines say less than the tables
        if len(tl) > 2:
            tl = tl.iloc[:-1]  # the last second is partial: its averages would fall to the floor
        c = COLORS[run.label]
        # each bucket drawn across its second: steps-post needs the end of the last one
        x = np.append(tl["t"].to_numpy(dtype=float), float(tl["t"].iloc[-1]) + 1.0)
        for ax, col in ((ax1, "active"), (ax2, "tokens_per_s")):
            y = tl[col].to_numpy(dtype=float)
            ax.plot(x, np.append(y, y[-1]), drawstyle="steps-post", color=c, label=_name(run))
        drawn = True
    if not drawn:
        return None
    ax1.set_ylabel("open streams (avg)")
    ax2.set_ylabel("tokens / s")
    ax2.set_xlabel("seconds since the run's start")
    for ax in (ax1, ax2):
        ax.grid(True, alpha=0.3)
    ax1.legend(loc="upper right", fontsize=8)
    title = "Active streams and tokens/s over time"
    ax1.set_title(title)
    return Chart(
        "activity",
        title,
        "Per 1 s bucket (the last, partial second is not drawn).",
        png_base64(fig),
    )


def _outcomes(report: Report) -> Chart | None:
    """Failed requests by outcome; None with fewer than two failure outcomes (the tables say
    it)."""
    failures = [
        o
        for o in report.outcomes
        if o.protocol == "all"
        and o.outcome not in ("ok", "cancelled", "client_cancelled")
        and (o.after or o.before)
    ]
    if len(failures) < 2:
        return None  # one cause or none: the outcome table and the failures section say it
    fig = Figure(figsize=(6.4, 1.4 + 0.45 * len(failures)))
    ax = fig.add_subplot()
    title = "Failed requests by outcome"
    if failures:
        y = np.arange(len(failures))
        pairs = [("before", [o.before or 0 for o in failures])] if report.before else []
        pairs.append((report.after.label, [o.after for o in failures]))
        h = min(0.8 / len(pairs), 0.3)
        for i, (label, counts) in enumerate(pairs):
            bars = ax.barh(y + i * h, counts, height=h, color=COLORS[label], label=label)
            ax.bar_label(bars, fontsize=8, padding=2)
        ax.set_yticks(y + h * (len(pairs) - 1) / 2, [o.outcome for o in failures])
        ax.set_ylim(len(failures) - 0.4, -0.6)
        ax.set_xlabel("requests")
        ax.legend(loc="lower right", fontsize=8)
        ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(title)
    return Chart(
        "outcomes", title, "Cancelled streams (end of run) are not failures.", png_base64(fig)
    )


def _server(runs: Sequence[LoadedRun], report: Report) -> Chart | None:
    present = [(r, s) for r, s in zip(runs, report.server, strict=True) if s.present]
    backlog_named = any(
        (r.server.metrics["name"] == "streamslo_write_backlog_bytes").any()
        for r, _ in present
        if len(r.server.metrics)
    )
    if not present or not (backlog_named or any(s.stall_causes for _, s in present)):
        # Neither panel has anything (another server's metrics): the series chart shows them.
        return None
    fig = Figure(figsize=(11.0, 3.4))
    ax1, ax2 = fig.subplots(1, 2)
    drew_backlog = False
    for run, _ in present:
        m = run.server.metrics
        sub = m[m["name"] == "streamslo_write_backlog_bytes"] if len(m) else m
        if len(sub) and float(sub["value"].abs().max()) > 0:
            ax1.plot(sub["t"], sub["value"] / 1024.0, color=COLORS[run.label], label=_name(run))
            drew_backlog = True
    causes = sorted({c for _, s in present for c in s.stall_causes})
    if not drew_backlog and not causes:
        return None  # nothing moved: no flat zero on an empty axis
    if drew_backlog:
        ax1.set_ylim(bottom=0)
        ax1.set_title("Server write backlog", fontsize=10)
        ax1.set_xlabel("seconds since start")
        ax1.set_ylabel("KiB")
        ax1.grid(True, alpha=0.3)
        ax1.legend(fontsize=8)
    else:
        ax1.text(
            0.5, 0.5, "no write backlog scraped", ha="center", va="center", transform=ax1.transAxes
        )
        ax1.set_axis_off()
    if causes:
        y = np.arange(len(causes))
        h = min(0.8 / len(present), 0.3)
        for i, (run, s) in enumerate(present):
            ax2.barh(
                y + i * h,
                [s.stall_causes.get(c, 0) for c in causes],
                height=h,
                color=COLORS[run.label],
                label=_name(run),
            )
        ax2.set_yticks(y + h * (len(present) - 1) / 2, causes, fontsize=8)
        ax2.set_ylim(len(causes) - 0.4, -0.6)
        ax2.set_title("Event-loop stalls by cause", fontsize=10)
        ax2.set_xlabel("stalls")
        ax2.legend(fontsize=8)
    else:
        ax2.text(
            0.5,
            0.5,
            "no event-loop stalls reported",
            ha="center",
            va="center",
            transform=ax2.transAxes,
        )
        ax2.set_axis_off()
    title = "Server-side evidence"
    return Chart(
        "server",
        title,
        "Scraped from the target's /metrics and /debug endpoints.",
        png_base64(fig),
        wide=True,
    )


#: Panel order and axis label of the server-series chart (server_series.Known.panel).
_PANELS = {
    "running": "requests running",
    "waiting": "requests waiting",
    "kv": "KV-cache usage (%)",
    "preempt": "preemptions (since start)",
    "batch_tokens": "batch max tokens",
    "cpu": "CPU (cores)",
    "memory": "RSS (MiB)",
}


def _panel_values(panel: str, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    t = frame["t"].to_numpy(dtype=float)
    v = frame["value"].to_numpy(dtype=float)
    if panel == "kv":
        return t, v * 100.0
    if panel == "memory":
        return t, v / (1 << 20)
    if panel == "cpu" and t.size > 1:
        # The CPU counter's increase between scrapes per second between them: cores busy.
        return t[1:], np.diff(v) / np.maximum(np.diff(t), 1e-9)
    return t, v


def _server_series(runs: Sequence[LoadedRun]) -> Chart | None:
    """The target's own series that matter for streaming over the run's time axis, one panel
    per kind, with the client's open streams beside the server's running requests."""
    found = [(run, panel_series(run)) for run in runs]
    panels = [p for p in _PANELS if any(k.panel == p for _, series in found for k, _, _ in series)]
    if not panels:
        return None
    cols = 2 if len(panels) > 1 else 1
    rows = (len(panels) + cols - 1) // cols
    fig = Figure(figsize=(11.0, 2.6 * rows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, sharex=True, squeeze=False).ravel())
    styles = ("-", "--", ":", "-.")
    for ax, panel in zip(axes, panels, strict=False):
        for run, series in found:
            mine = [(k, n, f) for k, n, f in series if k.panel == panel]
            for i, (known, name, frame) in enumerate(mine):
                t, v = _panel_values(panel, frame)
                ax.plot(
                    t,
                    v,
                    styles[i % len(styles)],
                    color=COLORS[run.label],
                    drawstyle="steps-post",
                    label=f"{_name(run)}: {known.title}" if len(runs) > 1 else name,
                )
            if panel == "running" and mine:
                tl = activity_timeline(run, 1.0)
                if not tl.empty:
                    ax.plot(
                        tl["t"],
                        tl["active"],
                        color=COLORS[run.label],
                        alpha=0.45,
                        lw=1,
                        drawstyle="steps-post",
                        label=f"{_name(run)}: client open streams",
                    )
        ax.set_ylabel(_PANELS[panel], fontsize=8)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    for ax in axes[len(panels) :]:
        ax.set_axis_off()
    for ax in axes[-cols:]:
        ax.set_xlabel("seconds since the run's start")
    title = "The server's own series over the run"
    fig.suptitle(title, fontsize=10)
    caption = (
        "Scraped from the target's /metrics every 2 s. Counters are their increase since "
        "the run's first scrape, not lifetime totals; CPU is the CPU counter's rate."
    )
    return Chart("server_series", title, caption, png_base64(fig), wide=True)


def make_charts(runs: Sequence[LoadedRun], report: Report) -> tuple[Chart, ...]:
    """Every chart that has data, in the report's order."""
    charts = [
        _cdf(runs, report, "itl_ms", "Inter-token latency (ITL) CDF"),
        _cdf(runs, report, "ttft_ms", "Time to first token (TTFT) CDF"),
        _lateness(runs, report),
        _activity(runs),
        _outcomes(report),
        _server(runs, report),
        _server_series(runs),
    ]
    return tuple(c for c in charts if c is not None)
