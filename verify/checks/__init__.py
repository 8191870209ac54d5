"""The SLO checks over one run: ``pytest --pyargs verify.checks --run-dir DIR [--slo FILE]``.

- :mod:`verify.checks.test_run`: the run is not empty and is valid (generator not saturated).
- :mod:`verify.checks.test_thresholds`: one test per threshold, its id ``itl_ms p(99)<200``.
- :mod:`verify.checks.test_probes`: single streams end to end against ``--probe-url``.

``streamslo verify DIR`` runs the first two.
"""

__all__: list[str] = []
