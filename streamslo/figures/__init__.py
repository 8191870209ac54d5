"""What a run's numbers mean, computed from its results: the metric registry
(:mod:`~streamslo.figures.metrics`), mergeable histograms (:mod:`~streamslo.figures.histogram`),
per-window figures (:mod:`~streamslo.figures.windows`) and drift verdicts
(:mod:`~streamslo.figures.drift`). Imports the results layer only.
"""

__all__: list[str] = []
