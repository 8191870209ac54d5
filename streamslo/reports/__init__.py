"""The before/after SLO report (``streamslo report``), built with pandas and matplotlib.

Layout::

    load.py       results directories -> labelled runs, tidy frames, comparability warnings
    compare.py    pure before/after maths -> the report model (model.py)
    bootstrap.py  confidence intervals that resample whole streams
    verdicts.py   SLO checks through streamslo.slo.thresholds
    failures.py   the most frequent error texts per failure outcome
    glossary.py   metric names, units, directions and meanings; outcome meanings
    timeline.py   per-second series for the charts
    server_series.py  the target's own series (vLLM, TGI, SGLang, process) over the run
    charts.py     matplotlib (Agg) charts as base64 PNG
    tables.py     the tables as rows of text (units, names, judged change, headline)
    render.py     HTML / Markdown / JSON / terminal text
    build.py      build_report(): all of the above, files written (``streamslo report``'s
                  shell is streamslo/commands/report.py)

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
