"""The report's failures section: the largest error groups of each failure outcome.

A group is the one rule of :mod:`streamslo.stream.error_groups` (the outcome, the cause, the
error text with its numbers masked), counted from streams.csv by
:func:`streamslo.figures.metrics.top_errors`, the function that writes ``summary.json``'s
``top_errors``: the report, the terminal summary and the run's own summary agree, whatever
version wrote the run's ``summary.json``. Pure: nothing here prints or writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from streamslo.figures.metrics import top_errors
from streamslo.reports.load import LoadedRun
from streamslo.reports.model import ErrorText, FailureGroup
from streamslo.results.layout import Layout
from streamslo.stream.error_groups import NO_TEXT
from streamslo.stream.outcome import OUTCOMES

__all__ = ["NO_TEXT", "TOP_ERRORS", "failure_groups"]

#: Error groups shown per outcome (the rest are counted as "other texts").
TOP_ERRORS = 5
#: Where the groups are counted from.
_SOURCE = Layout(Path()).streams_csv.name


def _rank(outcome: str) -> int:
    return OUTCOMES.index(outcome) if outcome in OUTCOMES else len(OUTCOMES)


def failure_groups(runs: Sequence[LoadedRun], limit: int = TOP_ERRORS) -> tuple[FailureGroup, ...]:
    """One :class:`FailureGroup` per run and failure outcome that occurred, after run first."""
    groups: list[FailureGroup] = []
    for run in reversed(runs):
        s = run.streams
        totals = s["outcome"].value_counts() if len(s) else pd.Series(dtype="int64")
        texts = top_errors(run.data, limit)
        for outcome, rows in sorted(texts.items(), key=lambda kv: (_rank(kv[0]), kv[0])):
            shown = tuple(
                ErrorText(r["error"], r["count"], r["cause"] or "", r["texts"]) for r in rows
            )
            total = int(totals.get(outcome, sum(e.count for e in shown)))
            groups.append(
                FailureGroup(
                    run.label,
                    run.name,
                    outcome,
                    total,
                    shown,
                    max(0, total - sum(e.count for e in shown)),
                    _SOURCE,
                )
            )
    return tuple(groups)
