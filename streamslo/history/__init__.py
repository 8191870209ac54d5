"""Run history (docs/history.md): finished runs kept in an embedded store, their trends with
confidence intervals, and a regression verdict for each run against the runs before it that
passed.

- :mod:`~streamslo.history.measure`: a run's figures and their stream-resamples (the report's
  bootstrap);
- :mod:`~streamslo.history.store`: the SQLite store (one file, no server);
- :mod:`~streamslo.history.record`: adding a results directory (``record_run``, what
  ``streamslo history add`` and ``--history`` call);
- :mod:`~streamslo.history.verdict`: the verdict, pure;
- :mod:`~streamslo.history.series` and :mod:`~streamslo.history.outputs`: ``streamslo
  history``'s series, judged, and its page, Markdown and JSON.

The settings (baseline size, margins) are the SLO file's ``[regression]`` table
(:mod:`streamslo.slo.regression`).
"""

from streamslo.history.record import record_run

__all__ = ["record_run"]
