"""The report's "Load levels" section: for runs that ramped through held concurrency levels
(``--stages``; ``streamslo compare`` ramps each server that way), one point per level and run
(:func:`streamslo.reports.knee.level_points`), the knee of each run, a table and the knee chart
(truncation rate, ITL p99 and TTFT p99 against concurrency, one line per run).

Nothing here prints; :func:`level_series` computes, the ``levels_*`` functions render, and
:class:`LevelsSection` is the section (:mod:`streamslo.reports.section`).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from streamslo.reports.charts import Chart
from streamslo.reports.knee import RULES, Knee, LoadPoint, find_knee, level_points, slo_levels
from streamslo.reports.knee_charts import knee_chart, slo_bounds
from streamslo.reports.load import LoadedRun
from streamslo.reports.render import fmt, html_table, md_table

if TYPE_CHECKING:
    from streamslo.reports.section import SectionInput
    from streamslo.slo.thresholds import SLO

__all__ = [
    "SETTLE_S",
    "LevelSeries",
    "LevelsSection",
    "knee_line",
    "level_chart",
    "level_series",
    "levels_html",
    "levels_json",
    "levels_markdown",
]

#: Streams that start within this long of a level's hold are left out. The ramp to the level is
#: already left out; a slow server's streams take seconds, so a short level would keep none.
SETTLE_S = 0.0


@dataclass(frozen=True)
class LevelSeries:
    """One run's points by concurrency level, and its knee."""

    name: str
    """The run's name (``naive``, ``fixed``: the bundled server's mode, else the folder's)."""
    points: tuple[LoadPoint, ...]
    knee: Knee


def level_series(
    runs: Sequence[LoadedRun],
    stages: str | None,
    slo: SLO | None = None,
    settle_s: float = SETTLE_S,
) -> tuple[LevelSeries, ...]:
    """The series of every run with requests in at least one level (none without ``stages``).

    Args:
        runs: the report's runs.
        stages: the ``--stages`` text the runs were made with.
        slo: checked at each level, or None.
        settle_s: see :data:`SETTLE_S`.
    """
    if not stages:
        return ()
    out = []
    for r in runs:
        pts = tuple(
            p for p in level_points(r.data, stages, slo=slo, settle_s=settle_s) if p.requests > 0
        )
        if pts:
            out.append(LevelSeries(r.name, pts, find_knee(pts)))
    return tuple(out)


def level_chart(series: Sequence[LevelSeries], slo: SLO | None) -> Chart | None:
    """The knee chart of the series (None without any)."""
    if not series:
        return None
    return knee_chart(
        {s.name: s.points for s in series},
        key="levels",
        title="Truncation rate, ITL p99 and TTFT p99 against concurrency",
        xlabel="concurrent streams",
        knees={s.name: s.knee for s in series},
        bounds=slo_bounds(slo),
        log_x=True,
    )


def _rows(series: Sequence[LevelSeries]) -> list[list[str]]:
    rows = [
        [
            "run",
            "streams",
            "requests",
            "truncation",
            "errors",
            "TTFT p99 (ms)",
            "ITL p99 (ms)",
            "SLO",
        ]
    ]
    for s in series:
        for p in s.points:
            slo = "—" if p.passed is None else ("pass" if p.passed else "fail")
            rows.append(
                [
                    s.name,
                    f"{p.x:g}",
                    str(p.requests),
                    fmt(p.truncation_rate, 1, pct=True),
                    fmt(p.error_rate, 1, pct=True),
                    fmt(p.ttft_ms.p99),
                    fmt(p.itl_ms.p99),
                    slo,
                ]
            )
    return rows


def knee_line(s: LevelSeries) -> str:
    """One run's line: the SLO's verdict level by level, then the knee named by its rule (a
    latency knee is not the SLO: a level past it may still meet the SLO)."""
    slo = slo_levels(s.points).sentence()
    k = s.knee
    if k.rule is None:
        knee = (
            f"no knee up to {k.label}: no level broke a knee rule ("
            + "; ".join(RULES[r] for r in ("ttft_p99", "itl_p99", "truncation"))
            + ")"
        )
    elif k.label is None:
        knee = f"knee at the lowest level, {k.broke_at}, by the rule '{RULES[k.rule]}'"
    elif k.rule == "slo":
        knee = f"knee after {k.label} by the rule '{RULES['slo']}': at {k.broke_at}"
    else:
        knee = f"knee after {k.label} by the rule '{RULES[k.rule]}': at {k.broke_at}, {k.reason}"
    return f"{s.name}: {slo}; {knee}."


def levels_html(series: Sequence[LevelSeries]) -> str:
    """The section's HTML body (the chart goes with the report's charts)."""
    knees = "".join(f"<li>{html.escape(knee_line(s))}</li>" for s in series)
    return (
        f"<ul>{knees}</ul>"
        + html_table(_rows(series))
        + '<p class="note">Each level: the streams that started while it held (after the '
        "ramp to it). The SLO column is the SLO's verdict at that level; the knee is a change "
        "of slope found by the rule it names, not the SLO (a level past a latency knee may "
        "still meet the SLO).</p>"
    )


def levels_markdown(series: Sequence[LevelSeries]) -> str:
    """The section as Markdown ("" without series)."""
    if not series:
        return ""
    return "\n".join(
        [
            "### Load levels",
            "",
            *[f"- {knee_line(s)}" for s in series],
            "",
            md_table(_rows(series)),
            "",
        ]
    )


def levels_json(series: Sequence[LevelSeries]) -> list[dict[str, object]]:
    """The section as plain data for report.json."""
    return [
        {"name": s.name, "knee": s.knee.as_dict(), "levels": [p.as_dict() for p in s.points]}
        for s in series
    ]


@dataclass(frozen=True)
class LevelsSection:
    """Each run's figures per held concurrency level and its knee (a report section; runs
    ramped through ``--stages``)."""

    key: ClassVar[str] = "levels"
    title: ClassVar[str] = "Load levels"
    charts_first: ClassVar[bool] = True
    series: tuple[LevelSeries, ...]
    slo: SLO | None

    @classmethod
    def build(cls, inp: SectionInput) -> LevelsSection:
        return cls(level_series(inp.runs, inp.stages, inp.slo), inp.slo)

    def charts(self) -> tuple[Chart, ...]:
        chart = level_chart(self.series, self.slo)
        return () if chart is None else (chart,)

    def html(self) -> str:
        return levels_html(self.series) if self.series else ""

    def markdown(self) -> str:
        return levels_markdown(self.series)

    def to_json(self) -> object:
        return levels_json(self.series)
