"""SLOs: thresholds in k6's grammar (:mod:`~streamslo.slo.thresholds`, parsed by
:mod:`~streamslo.slo._parse`), checked on running totals while a run goes
(:mod:`~streamslo.slo.live_eval`), and error budgets with burn-rate alerts
(:mod:`~streamslo.slo.budget`).
"""

__all__: list[str] = []
