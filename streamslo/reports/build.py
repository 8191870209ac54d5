"""The one call that makes a report: load, compute, render, write (used by the CLI and by
``streamslo compare``).

``build_report(before_dir, after_dir, out_html)`` writes ``report.html``, ``report.md`` and
``report.json`` side by side (the Markdown and JSON take the HTML file's stem) and returns a
:class:`ReportResult` with the paths, the verdict rows and a plain-text summary table for the
caller to print. It prints nothing itself.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from streamslo.errors import BadInputError
from streamslo.reports.model import BootstrapSettings, Report, VerdictRow

if TYPE_CHECKING:
    from streamslo.slo.thresholds import SLO

__all__ = ["DEFAULT_CONFIDENCE", "DEFAULT_RESAMPLES", "ReportResult", "build_report"]

#: Bootstrap resamples asked for (large runs may use fewer; see streamslo.reports.bootstrap).
DEFAULT_RESAMPLES = 1000
#: Confidence level of the intervals.
DEFAULT_CONFIDENCE = 0.95


@dataclass(frozen=True)
class ReportResult:
    """What :func:`build_report` wrote and found."""

    html: Path
    markdown: Path
    json: Path
    report: Report
    """The whole report model (the numbers in report.json)."""
    verdicts: tuple[VerdictRow, ...]
    """Every SLO threshold, before/after/delta/verdict."""
    passed: bool
    """Whether the after run (the only run, alone) met every threshold."""
    valid: bool
    """Whether every run was valid (its load generator was not saturated)."""
    summary: str
    """Plain-text summary table for a terminal."""


def _write(path: Path, text: str) -> None:
    """Write ``text`` whole (a temporary file, then a rename).

    Raises:
        BadInputError: the file cannot be written (the path and the reason).
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise BadInputError(f"cannot write {path}: {exc.strerror or exc}") from None


def _mkdir(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(
            f"cannot write the report into {folder}: {exc.strerror or exc}"
        ) from None


def build_report(
    before_dir: str | os.PathLike[str] | None,
    after_dir: str | os.PathLike[str],
    out_html: str | os.PathLike[str] = "report.html",
    slo: SLO | str | Path | None = None,
    *,
    seed: int = 0,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    stages: str | None = None,
) -> ReportResult:
    """Report one run (``before_dir=None``) or compare two, and write the three files.

    Args:
        before_dir: the before (naive) results directory, or None for a single-run report.
        after_dir: the after (fixed) results directory.
        out_html: where the HTML goes; ``.md`` and ``.json`` are written beside it with the
            same stem. Its folder is created.
        slo: None (the incidents' SLO), a TOML file path, or an SLO object from
            :func:`streamslo.slo.thresholds.load_slo`.
        seed: bootstrap seed (same inputs and seed give the same report numbers).
        resamples: bootstrap resamples (bounded further for very large runs).
        confidence: confidence level of the intervals, e.g. 0.95.
        stages: the ``--stages`` the runs ramped through (``compare`` ramps each server): adds
            the "Load levels" section, each run's figures per concurrency level and its knee.

    Returns:
        The paths written, the verdict rows, and a text summary table.

    Raises:
        ResultsError: a results directory or file is missing or damaged (names the file).
        SLOFileError: the SLO file does not parse (names the file and line).
        BadInputError: a file of the report cannot be written (names it and why).
    """
    from streamslo.reports.charts import make_charts
    from streamslo.reports.compare import build_model
    from streamslo.reports.levels import (
        level_chart,
        level_series,
        levels_html,
        levels_json,
        levels_markdown,
    )
    from streamslo.reports.load import load_report_runs
    from streamslo.reports.render import render_html, render_json, render_markdown, summary_table
    from streamslo.reports.replay import replay_html, replay_json, replay_markdown, replay_tables
    from streamslo.reports.scenarios import (
        scenario_html,
        scenario_json,
        scenario_markdown,
        scenario_tables,
    )
    from streamslo.reports.session_view import (
        session_views,
        sessions_html,
        sessions_json,
        sessions_markdown,
    )
    from streamslo.reports.soak import (
        soak_charts,
        soak_html,
        soak_json,
        soak_markdown,
        soak_sections,
    )
    from streamslo.reports.turns import turns_html, turns_json, turns_markdown
    from streamslo.reports.verdicts import evaluate_runs, resolve_slo

    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), not {confidence!r}")
    if resamples < 1:
        raise ValueError(f"resamples must be positive, not {resamples!r}")
    slo_obj, slo_source = resolve_slo(slo)
    runs = load_report_runs(None if before_dir is None else Path(before_dir), Path(after_dir))
    verdicts = evaluate_runs(slo_obj, [r.data for r in runs])
    settings = BootstrapSettings("stream", resamples, confidence, seed)
    report = build_model(runs, verdicts, slo_source, settings)
    charts = make_charts(runs, report)
    levels = level_series(runs, stages, slo_obj)  # concurrency levels and knees (compare ramps)
    level_fig = level_chart(levels, slo_obj)
    charts = (level_fig, *charts) if level_fig is not None else charts
    turns = turns_json(runs)  # multi-turn runs: TTFT by turn
    soak = soak_sections(runs)  # windows, budget, alerts, drift: long runs (docs/soak.md)
    charts += soak_charts(runs, soak)
    scenarios = scenario_tables(runs)  # per-scenario figures ([scenarios.*], docs/scenarios.md)
    extra_html = [("Scenarios", scenario_html(scenarios))] if scenarios else []
    extra_html += [("Load levels", levels_html(levels))] if levels else []
    extra_html += [("TTFT by turn", turns_html(turns))] if turns else []
    extra_html += [("Long run: windows, error budget, drift", soak_html(soak))] if soak else []
    extra_md = "\n".join(
        part
        for part in (
            scenario_markdown(scenarios),
            levels_markdown(levels),
            turns_markdown(turns),
            soak_markdown(soak),
        )
        if part
    )
    sessions = session_views(runs)  # agentic sessions: the swim lane, by depth (docs/report.md)
    if sessions:
        extra_html += [("Agentic sessions", sessions_html(sessions))]
        extra_md = "\n".join(part for part in (extra_md, sessions_markdown(sessions)) if part)
    replay = replay_tables(runs)  # trace arrivals, hang-ups, prefix cache (docs/workloads.md)
    if replay:
        extra_html += [("Replay: arrivals, hang-ups, prefix cache", replay_html(replay))]
        extra_md = "\n".join(part for part in (extra_md, replay_markdown(replay)) if part)

    html_path = Path(out_html)
    _mkdir(html_path.parent)
    md_path = html_path.with_suffix(".md")
    json_path = html_path.with_suffix(".json")
    _write(html_path, render_html(report, charts, extra_html))
    _write(md_path, render_markdown(report, extra_md))
    _write(
        json_path,
        render_json(
            report,
            {
                "soak": soak_json(soak),
                "scenarios": scenario_json(runs),
                "levels": levels_json(levels),
                "turns": turns,
                "replay": replay_json(runs),
                "sessions": sessions_json(sessions),
            },
        ),
    )
    return ReportResult(
        html=html_path,
        markdown=md_path,
        json=json_path,
        report=report,
        verdicts=report.verdicts,
        passed=report.passed,
        valid=all(r.valid for r in report.runs),
        summary=summary_table(report),
    )
