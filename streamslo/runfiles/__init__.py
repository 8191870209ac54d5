"""The run files both sides share: what the Locust processes write and the parent reads, and
the run's end, which either side may do (the parent after ``streamslo run``; Locust's own hooks
after a plain ``locust -f`` run).

- :mod:`~streamslo.runfiles.windows_csv`: ``windows.csv`` and ``live.json``, written by the Locust
  side as the run goes, read by the parent's watch and the reports;
- :mod:`~streamslo.runfiles.server_samples`: the server's samples the parent records, read by the Locust
  side's live windows;
- :mod:`~streamslo.runfiles.finalize` and :mod:`~streamslo.runfiles.soak`: the run's end
  (``summary.json``, validity, the windows reconciled, the budget and drift).

The parent's supervision (starting, watching and stopping a run) is :mod:`streamslo.run`.
"""

__all__: list[str] = []
