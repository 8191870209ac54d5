"""The SLO checks over one run: ``pytest --pyargs streamslo.verify.checks --streamslo-run-dir DIR [--slo FILE]``.

- :mod:`streamslo.verify.checks.test_run`: the run is not empty and is valid (generator not saturated).
- :mod:`streamslo.verify.checks.test_thresholds`: one test per threshold, its id ``itl_ms p(99)<200``.
- :mod:`streamslo.verify.checks.test_probes`: single streams end to end against ``--streamslo-probe-url``.

``streamslo verify DIR`` runs the first two.
"""

__all__: list[str] = []
