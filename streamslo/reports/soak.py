"""The report's long-run sections: the windows timeline with alert marks, the error budget's
burn-down, the alerts, and the drift verdicts (``docs/soak.md``).

:func:`soak_sections` reads each run's ``windows.csv``, ``run.json`` (``budget``, ``alerts``)
and judges drift by :func:`streamslo.figures.drift.analyse` (as finalize does for ``summary.json``);
:func:`soak_charts` draws them; :func:`soak_html` / :func:`soak_markdown` render the tables.
A run without windows gets no section. Nothing here prints.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from matplotlib.figure import Figure

from streamslo.figures.drift import MIN_POINTS, MIN_SPAN_S, analyse, collect_series, theil_sen
from streamslo.reports.charts import COLORS, Chart, png_base64
from streamslo.reports.load import LoadedRun
from streamslo.results.layout import Layout
from streamslo.results.markup import html_table, markdown_table
from streamslo.runfiles.windows_csv import read_windows
from streamslo.slo.budget import Budget, burn_down

if TYPE_CHECKING:
    from streamslo.reports.section import SectionInput

__all__ = [
    "MIN_WINDOWS",
    "LongRunSection",
    "SoakSection",
    "drift_notes",
    "soak_charts",
    "soak_html",
    "soak_json",
    "soak_markdown",
    "soak_sections",
    "window_rates",
]


@dataclass(frozen=True)
class SoakSection:
    """One run's long-run figures."""

    label: str
    name: str
    windows: list[dict[str, Any]] = field(repr=False)
    budget: dict[str, Any] | None
    """run.json's budget (objective, target, alerts), or None."""
    alerts: list[dict[str, Any]]
    """Every alert that fired (run.json ``alerts``)."""
    spent: float | None
    """The share of the budget spent over the run (1.0: all of it)."""
    drift: dict[str, dict[str, Any]]
    """summary.json's ``drift``: a trend and verdict per series."""
    rebuilt: list[float]
    """window_start of the windows finalize rebuilt from streams.csv."""
    span: tuple[float | None, float | None] = (None, None)
    """The run's start and end (epoch s, run.json): windows are aligned to the clock, so the
    first and last cover only part of their length."""

    def as_dict(self) -> dict[str, object]:
        out = asdict(self)
        out.pop("windows")
        out["window_count"] = len(self.windows)
        return out


def _section(run: LoadedRun) -> SoakSection | None:
    layout = Layout(run.path)
    try:
        rows = read_windows(layout.windows_csv)
    except ValueError:
        rows = []
    if not rows:
        return None
    # Judged here, by today's rule, rather than read from summary.json: a directory finalized
    # by an older version keeps verdicts (a "flat" on a 40 s run) that rule would not give.
    drift = analyse(run.path, rows)
    budget = run.run.get("budget") if isinstance(run.run.get("budget"), dict) else None
    spent = None
    if budget is not None:
        try:
            down = burn_down(Budget.from_dict(budget), rows)
            left = next((v for _, v in reversed(down) if v is not None), None)
            spent = None if left is None else 1.0 - left
        except ValueError:
            budget = None
    raw_alerts = run.run.get("alerts")
    alerts: list[dict[str, Any]] = list(raw_alerts) if isinstance(raw_alerts, list) else []
    raw_info = run.run.get("windows")
    windows_info: dict[str, Any] = raw_info if isinstance(raw_info, dict) else {}
    start, end = run.run.get("start_epoch"), run.run.get("end_epoch")
    span = (
        float(start) if isinstance(start, (int, float)) else None,
        float(end) if isinstance(end, (int, float)) else None,
    )
    return SoakSection(
        run.label,
        run.name,
        rows,
        budget,
        alerts,
        spent,
        drift,
        list(windows_info.get("rebuilt_windows") or []),
        span,
    )


#: A run with fewer windows than this (and no error budget or alert) gets no long-run
#: section: a 10 s run's one or two windows draw no timeline and judge no drift.
MIN_WINDOWS = 3


def _worth_showing(sec: SoakSection) -> bool:
    return len(sec.windows) >= MIN_WINDOWS or sec.budget is not None or bool(sec.alerts)


def soak_sections(runs: Sequence[LoadedRun]) -> tuple[SoakSection, ...]:
    """The long-run section of every run with at least :data:`MIN_WINDOWS` windows (or an
    error budget or alert)."""
    return tuple(s for s in (_section(r) for r in runs) if s is not None and _worth_showing(s))


def _judged(sec: SoakSection, name: str) -> bool:
    """Whether drift judged the series (not ``too short``)."""
    return str(sec.drift.get(name, {}).get("verdict", "")) not in ("", "too short")


def _t(sec: SoakSection, epoch: float) -> float:
    return float(epoch) - float(sec.windows[0]["window_start"])


def window_rates(sec: SoakSection) -> list[tuple[float, float | None, bool]]:
    """Each window's (start, requests per second, partial): a window the run covered only in
    part (the first and the last) is divided by the part it covered, not by its whole length,
    so a run that starts mid-window shows no ramp that never happened."""
    start, end = sec.span
    out: list[tuple[float, float | None, bool]] = []
    for r in sec.windows:
        ws, length = float(r["window_start"]), float(r["window_s"])
        lo = max(ws, start) if start is not None else ws
        hi = min(ws + length, end) if end is not None else ws + length
        cover = max(0.0, hi - lo)
        rate = r["requests"] / cover if cover > 0 else None
        out.append((_t(sec, ws), rate, cover < length * 0.999))
    return out


def _alert_marks(ax: Any, sec: SoakSection) -> None:
    for a in sec.alerts:
        ax.axvline(
            _t(sec, a["fired_at_epoch"]),
            color="#c0392b" if a.get("abort_on_fail") else "#e0a800",
            ls="--",
            lw=1.2,
        )


def _timeline(runs: Sequence[LoadedRun], sections: Sequence[SoakSection]) -> Chart:
    fig = Figure(figsize=(11.0, 5.2))
    ax1, ax2, ax3 = fig.subplots(3, 1, sharex=True)
    for sec in sections:
        c = COLORS.get(sec.label, "#1f77b4")
        t = [_t(sec, r["window_start"]) for r in sec.windows]
        rates = window_rates(sec)
        rate = [float("nan") if v is None else v for _, v, _ in rates]
        partial = [
            (x + sec.windows[0]["window_s"] / 2, v) for x, v, p in rates if p and v is not None
        ]
        trunc = [
            ((r["began"] - r["ok"]) / r["began"] * 100.0) if r["began"] else None
            for r in sec.windows
        ]
        itl = [r["itl_ms_p99"] for r in sec.windows]
        ax1.plot(t, rate, drawstyle="steps-post", color=c, label=f"{sec.label} ({sec.name})")
        if partial:  # partial windows: hollow marks, their rate over the part the run covered
            ax1.plot(
                [x for x, _ in partial],
                [v for _, v in partial],
                ls="none",
                marker="o",
                mfc="none",
                color=c,
            )
        ax2.plot(
            t,
            [v if v is not None else float("nan") for v in trunc],
            drawstyle="steps-post",
            color=c,
        )
        ax3.plot(
            t, [v if v is not None else float("nan") for v in itl], drawstyle="steps-post", color=c
        )
        for ax in (ax1, ax2, ax3):
            _alert_marks(ax, sec)
    ax1.set_ylabel("streams / s")
    ax2.set_ylabel("truncation %")
    ax3.set_ylabel("ITL p99 (ms)")
    ax3.set_xlabel("seconds since the first window")
    for ax in (ax1, ax2, ax3):
        ax.grid(True, alpha=0.3)
    ax1.legend(loc="upper right", fontsize=8)
    title = "Windows: throughput, truncation and ITL p99 per window"
    ax1.set_title(title)
    caption = (
        "From windows.csv (streams counted in the window they ended in). The first and "
        "last windows are partial (hollow marks): their rate is over the part of the "
        "window the run covered. Dashed lines: burn-rate alerts (red: abortOnFail)."
    )
    return Chart("soak_timeline", title, caption, png_base64(fig), wide=True)


def _burn_down(sections: Sequence[SoakSection]) -> Chart | None:
    with_budget = [s for s in sections if s.budget is not None]
    if not with_budget:
        return None
    fig = Figure(figsize=(6.4, 3.4))
    ax = fig.add_subplot()
    for sec in with_budget:
        assert sec.budget is not None
        down = burn_down(Budget.from_dict(sec.budget), sec.windows)
        ax.plot(
            [_t(sec, e) for e, _ in down],
            [float("nan") if v is None else v * 100.0 for _, v in down],
            color=COLORS.get(sec.label, "#1f77b4"),
            label=f"{sec.label} ({sec.name})",
        )
        _alert_marks(ax, sec)
    ax.axhline(0.0, color="#555", lw=1)
    ax.set_ylabel("budget left (%)")
    ax.set_xlabel("seconds since the first window")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    b = with_budget[-1].budget or {}
    title = f"Error budget burn-down: {b.get('objective')} target {b.get('target')}"
    ax.set_title(title, fontsize=10)
    return Chart(
        "budget",
        title,
        "100 % minus the share of the budget spent so far; below 0: overspent. "
        "Dashed lines: alerts.",
        png_base64(fig),
    )


def _drift(runs: Sequence[LoadedRun], sections: Sequence[SoakSection]) -> Chart | None:
    by_label = {r.label: r for r in runs}
    series = []
    for sec in sections:
        for name, (unit, t, y, counter) in collect_series(
            by_label[sec.label].path, sec.windows
        ).items():
            if not counter and len(t) >= 3 and _judged(sec, name):
                series.append((sec, name, unit, t, y))
    if not series:
        return None
    fig = Figure(
        figsize=(6.4, 1.0 + 1.6 * len(series)), layout="constrained"
    )  # titles clear of the ticks above
    axes = fig.subplots(len(series), 1, squeeze=False)[:, 0]
    for ax, (sec, name, unit, t, y) in zip(axes, series, strict=True):
        t0 = t[0]
        x = [v - t0 for v in t]
        ax.plot(x, y, ".", ms=3, color=COLORS.get(sec.label, "#1f77b4"))
        slope, icpt, _, _ = theil_sen(x, y)
        ax.plot([x[0], x[-1]], [icpt + slope * x[0], icpt + slope * x[-1]], color="#555", lw=1)
        verdict = sec.drift.get(name, {}).get("verdict", "")
        ax.set_ylabel(unit, fontsize=8)
        ax.set_title(f"{sec.label}: {name} — {verdict}", fontsize=9)
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("seconds")
    return Chart(
        "drift",
        "Resources over time",
        "Each series with its Theil–Sen line (verdicts in the drift table).",
        png_base64(fig),
    )


def soak_charts(runs: Sequence[LoadedRun], sections: Sequence[SoakSection]) -> tuple[Chart, ...]:
    """The timeline (with alert marks), the burn-down and the drift charts that have data."""
    if not sections:
        return ()
    charts = [_timeline(runs, sections), _burn_down(sections), _drift(runs, sections)]
    return tuple(c for c in charts if c is not None)


def _f(v: Any, digits: int = 2) -> str:
    return "—" if v is None else (f"{v:,.{digits}f}" if isinstance(v, (int, float)) else str(v))


def _tables(sec: SoakSection) -> list[tuple[str, list[list[str]]]]:
    out: list[tuple[str, list[list[str]]]] = []
    if sec.budget is not None:
        spent = "—" if sec.spent is None else f"{sec.spent * 100:.1f} %"
        rows = [
            ["objective", "target", "budget spent", "alerts fired"],
            [
                str(sec.budget.get("objective")),
                str(sec.budget.get("target")),
                spent,
                str(len(sec.alerts)),
            ],
        ]
        out.append(("Error budget", rows))
        if sec.alerts:
            out.append(
                (
                    "Alerts fired",
                    [
                        [
                            "alert",
                            "fired at (UTC)",
                            "burn long",
                            "burn short",
                            "factor",
                            "abortOnFail",
                        ]
                    ]
                    + [
                        [
                            a["name"],
                            a["fired_at"],
                            _f(a["burn_long"]),
                            _f(a["burn_short"]),
                            _f(a["factor"], 1),
                            "yes" if a.get("abort_on_fail") else "no",
                        ]
                        for a in sec.alerts
                    ],
                )
            )
    judged = {name: d for name, d in sec.drift.items() if _judged(sec, name)}
    if judged:
        out.append(
            (
                "Drift and leaks",
                [
                    [
                        "series",
                        "verdict",
                        "slope / h",
                        "95 % CI / h",
                        "later half: slope / h",
                        "later half: 95 % CI / h",
                        "growth",
                        "points",
                    ]
                ]
                + [
                    [
                        name,
                        str(d["verdict"]),
                        _f(d.get("slope_per_h"), 3),
                        _ci(d.get("ci_low_per_h"), d.get("ci_high_per_h")),
                        _f(d.get("late_slope_per_h"), 3),
                        _ci(d.get("late_ci_low_per_h"), d.get("late_ci_high_per_h")),
                        "—" if d.get("growth_pct") is None else f"{d['growth_pct']:.1f} %",
                        str(d.get("points")),
                    ]
                    for name, d in judged.items()
                ],
            )
        )
    return out


def _ci(lo: Any, hi: Any) -> str:
    return "—" if lo is None or hi is None else f"[{_f(lo, 3)}, {_f(hi, 3)}]"


def drift_notes(sec: SoakSection) -> list[str]:
    """What the drift verdicts rest on, in words: the series too short to judge (with what a
    verdict needs), and each inconclusive one with the growth its interval still allows. A
    leak is ``leak`` when its whole series and its later half both grow beyond 5 %; ``flat``
    only when the later half's interval rules out more than 5 % growth."""
    out = []
    short = [name for name in sec.drift if not _judged(sec, name)]
    if short:
        had = ", ".join(
            f"{n} ({_f(sec.drift[n].get('span_s'), 0)} s, {sec.drift[n].get('points')} points)"
            for n in short
        )
        out.append(
            f"Drift not judged for {had}: too short to judge; a verdict needs at least "
            f"{MIN_SPAN_S:.0f} s and {MIN_POINTS} points."
        )
    for name, d in sec.drift.items():
        if d.get("verdict") == "inconclusive" and d.get("note"):
            out.append(f"{name} is inconclusive: {d['note']}.")
    return out


def soak_html(sections: Sequence[SoakSection]) -> str:
    """The long-run tables as HTML (empty without sections)."""
    parts = []
    for sec in sections:
        parts.append(
            f"<h3>{html.escape(sec.label)} ({html.escape(sec.name)}): {len(sec.windows)} windows</h3>"
        )
        if sec.rebuilt:
            parts.append(
                f'<p class="note">{len(sec.rebuilt)} window(s) rebuilt from streams.csv at finalize.</p>'
            )
        for title, rows in _tables(sec):
            parts.append(f"<h4>{html.escape(title)}</h4>{html_table(rows)}")
        parts += [f'<p class="note">{html.escape(n)}</p>' for n in drift_notes(sec)]
    return "\n".join(parts)


def soak_markdown(sections: Sequence[SoakSection]) -> str:
    """The long-run tables as Markdown (empty without sections)."""
    out = []
    for sec in sections:
        out += [f"### Long run: {sec.label} ({sec.name}), {len(sec.windows)} windows", ""]
        for title, rows in _tables(sec):
            out += [
                f"**{title}**",
                "",
                markdown_table(rows),
                "",
            ]
        out += [x for n in drift_notes(sec) for x in (f"_{n}_", "")]
    return "\n".join(out)


def soak_json(sections: Sequence[SoakSection]) -> list[dict[str, object]]:
    """``report.json``'s ``soak``."""
    out: list[dict[str, Any]] = json.loads(json.dumps([s.as_dict() for s in sections], default=str))
    return out


@dataclass(frozen=True)
class LongRunSection:
    """Windows, error budget, alerts and drift of the runs long enough for them (a report
    section)."""

    key: ClassVar[str] = "soak"
    title: ClassVar[str] = "Long run: windows, error budget, drift"
    charts_first: ClassVar[bool] = False
    runs: tuple[LoadedRun, ...]
    sections: tuple[SoakSection, ...]

    @classmethod
    def build(cls, inp: SectionInput) -> LongRunSection:
        return cls(inp.runs, soak_sections(inp.runs))

    def charts(self) -> tuple[Chart, ...]:
        return soak_charts(self.runs, self.sections)

    def html(self) -> str:
        return soak_html(self.sections)

    def markdown(self) -> str:
        return soak_markdown(self.sections)

    def to_json(self) -> object:
        return soak_json(self.sections)
