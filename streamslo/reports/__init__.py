"""The before/after SLO report (``streamslo report``), built with pandas and matplotlib.

Layout::

    load.py       results directories -> labelled runs, tidy frames, comparability warnings
    compare.py    pure before/after maths -> the report model (model.py)
    model.py      the report model: frozen dataclasses every output is rendered from
    bootstrap.py  confidence intervals that resample whole streams
    verdicts.py   SLO checks through streamslo.slo.thresholds
    failures.py   the largest error groups per failure outcome (the one grouping rule)
    glossary.py   metric names, units, directions and meanings; outcome meanings
    timeline.py   per-second series for the charts
    server_series.py  the target's own series (vLLM, TGI, SGLang, process) over the run
    charts.py     matplotlib (Agg) charts as base64 PNG; log axes whose labels fit
    tables.py     the tables as rows of text (units, names, judged change, headline)
    render.py     HTML / Markdown / JSON / terminal text
    section.py    the protocol of an optional section (key, title, charts, html, markdown,
                  to_json) and what it is built from
    sections.py   the optional sections, in the page's order:
      scenarios.py     per-scenario figures ([scenarios.*])
      levels.py        figures per held concurrency level and the knee (``--stages``),
                       with knee.py (load points, the knee and its rules) and
                       knee_charts.py (the charts against load)
      turns.py         TTFT by turn (``--turns``)
      soak.py          windows, error budget, alerts and drift (long runs)
      session_view.py  the sessions' swim lane and steps by depth (``--sessions``)
      replay.py        trace arrivals, client hang-ups, the prefix cache
    build.py      build_report(): the model, the sections, the files written
                  (``streamslo report``'s shell is streamslo/commands/report.py)
    sweep_report.py  ``streamslo sweep``'s document and pages (knee.py's points and knee)

Importing this package is light (``streamslo --help`` imports it); pandas and matplotlib load
on first use of :func:`build_report`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streamslo.reports.build import ReportResult, build_report

__all__ = ["ReportResult", "build_report"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from streamslo.reports import build

        return getattr(build, name)
    raise AttributeError(f"module 'reports' has no attribute {name!r}")
