"""What finalizing adds for long runs: ``windows.csv`` made to agree with ``streams.csv``, the
budget's alerts replayed when the run could not record them (a killed run), the budget spent,
and the drift verdicts (``docs/soak.md``).

Called by :func:`streamslo.runfiles.finalize.finalize`, for every run (``streamslo run`` at its end, a
plain Locust run, ``streamslo finalize DIR``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from streamslo.figures.drift import analyse
from streamslo.results.layout import Layout, RunData
from streamslo.results.schema import RunJson, SummaryJson
from streamslo.runfiles.windows_csv import read_windows, reconcile
from streamslo.slo.budget import Budget, BurnTracker

__all__ = ["finalize_extras"]

log = logging.getLogger(__name__)


def finalize_extras(
    directory: Path, run: Mapping[str, object], data: RunData
) -> tuple[RunJson, SummaryJson]:
    """The long-run fields of a finalized run.

    Args:
        directory: the results directory.
        run: ``run.json`` as finalize is about to write it.
        data: the loaded run.

    Returns:
        (fields for ``run.json``: ``windows``, and ``alerts`` when replayed; fields for
        ``summary.json``: ``windows``, ``budget`` with a budget, ``drift``).
    """
    layout = Layout(Path(directory))
    run_up: RunJson = {}
    summary_up: SummaryJson = {}
    try:
        info = reconcile(data)
    except OSError as exc:
        log.warning("streamslo: could not rewrite %s (%s)", layout.windows_csv, exc)
        info = None
    try:
        rows = read_windows(layout.windows_csv)
    except ValueError as exc:
        log.warning("streamslo: %s", exc)
        rows = []
    if info is not None:
        run_up["windows"] = summary_up["windows"] = info
    raw = run.get("budget")
    if isinstance(raw, dict):
        try:
            budget = Budget.from_dict(raw)
        except ValueError as exc:
            log.warning("streamslo: run.json budget ignored (%s)", exc)
        else:
            tracker = BurnTracker(budget)
            for r in rows:
                tracker.add(r)
            if run.get("alerts") is None:
                run_up["alerts"] = [a.as_dict() for a in tracker.fired]
            consumed = tracker.consumed
            alerts = run_up.get("alerts", run.get("alerts"))
            summary_up["budget"] = {
                "objective": budget.objective,
                "target": budget.target,
                "consumed": consumed,
                "remaining": None if consumed is None else 1.0 - consumed,
                "alerts_fired": len(alerts) if isinstance(alerts, list) else 0,
            }
    summary_up["drift"] = analyse(layout.root, rows)
    return run_up, summary_up
