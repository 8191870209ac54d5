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
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from streamslo.errors import BadInputError
from streamslo.reports.model import BootstrapSettings, Report, VerdictRow

if TYPE_CHECKING:
    from streamslo.reports.load import LoadedRun
    from streamslo.reports.section import Section
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

    Phases: the model (:func:`_model`), every optional section
    (:data:`streamslo.reports.sections.SECTIONS`), the files (:func:`_write_report`).

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
        stages: the ``--stages`` the runs ramped through (``compare``): adds "Load levels".

    Returns:
        The paths written, the verdict rows, and a text summary table.

    Raises:
        ResultsError: a results directory or file is missing or damaged (names the file).
        SLOFileError: the SLO file does not parse (names the file and line).
        BadInputError: a file of the report cannot be written (names it and why).
    """
    from streamslo.reports.load import load_report_runs
    from streamslo.reports.render import summary_table
    from streamslo.reports.section import SectionInput
    from streamslo.reports.sections import build_sections
    from streamslo.reports.verdicts import resolve_slo

    settings = _settings(resamples, confidence, seed)
    slo_obj, slo_source = resolve_slo(slo)
    runs = load_report_runs(None if before_dir is None else Path(before_dir), Path(after_dir))
    report = _model(runs, slo_obj, slo_source, settings)
    sections = build_sections(SectionInput(runs, slo_obj, stages))
    html_path, md_path, json_path = _write_report(Path(out_html), runs, report, sections)
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


def _settings(resamples: int, confidence: float, seed: int) -> BootstrapSettings:
    """The bootstrap's settings, checked (ValueError: out of range)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), not {confidence!r}")
    if resamples < 1:
        raise ValueError(f"resamples must be positive, not {resamples!r}")
    return BootstrapSettings("stream", resamples, confidence, seed)


def _model(
    runs: tuple[LoadedRun, ...], slo: SLO, slo_source: str, settings: BootstrapSettings
) -> Report:
    """The report model: every threshold checked on every run, and the pure comparison."""
    from streamslo.reports.compare import build_model
    from streamslo.reports.verdicts import evaluate_runs

    verdicts = evaluate_runs(slo, [r.data for r in runs])
    return build_model(runs, verdicts, slo_source, settings)


def _write_report(
    html_path: Path, runs: tuple[LoadedRun, ...], report: Report, sections: Sequence[Section]
) -> tuple[Path, Path, Path]:
    """Draw the report's charts and write ``report.html``, ``.md`` and ``.json`` (whole)."""
    from streamslo.reports.charts import make_charts
    from streamslo.reports.render import render_html, render_json, render_markdown

    _mkdir(html_path.parent)
    md_path, json_path = html_path.with_suffix(".md"), html_path.with_suffix(".json")
    _write(html_path, render_html(report, make_charts(runs, report), sections))
    _write(md_path, render_markdown(report, sections))
    _write(json_path, render_json(report, sections))
    return html_path, md_path, json_path
